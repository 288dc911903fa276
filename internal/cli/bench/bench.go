// Package bench is `ferry bench`: the benchmarks full, replay (with
// --wire), live, sharded and peer, one package each, sharing measure.
package bench

import (
	"github.com/spf13/cobra"

	"github.com/mongoferry/mongoferry/internal/cli/bench/full"
	"github.com/mongoferry/mongoferry/internal/cli/bench/live"
	"github.com/mongoferry/mongoferry/internal/cli/bench/peer"
	"github.com/mongoferry/mongoferry/internal/cli/bench/replay"
	"github.com/mongoferry/mongoferry/internal/cli/bench/sharded"
)

// NewCommand returns `ferry bench`; each benchmark is a subcommand from
// its own package.
func NewCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the engine's throughput on throwaway local servers",
		Long: `bench runs MongoFerry's benchmarks. 'full' and 'live' use throwaway FerretDB
servers (built by 'make ferretdb' into bin/ferretdb) started on free loopback
ports and removed afterwards ('live' runs a whole task on them: start-up,
copy, replay of live writes); 'sharded' copies a sharded cluster stand-in
(FerretDB shards and a FerretDB mongos) shard by shard and through mongos,
side by side, on 1 to 3 shards; 'peer' runs MongoShake's collector and
MongoFerry one after the other on the same data and live writes; 'replay' needs no server (a synthetic oplog
into a discarding sink). Each benchmark prints its figures, the command line and
the peak memory; copy them into docs/benchmarks.md.

A benchmark exits 0 when it ran, whether or not its figures reach their
target, and non-zero only when something failed.`,
		Example: `  make bench
  ferry bench full --records 50000 --rounds 5
  ferry bench replay --shape ddt
  ferry bench live --inserts 2000 --updates 0 --deletes 0
  ferry bench sharded
  ferry bench peer --peer-bin ./collector`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(full.NewCommand(), replay.NewCommand(), live.NewCommand(), sharded.NewCommand(), peer.NewCommand())
	return cmd
}
