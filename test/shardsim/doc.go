// Package shardsim is a deterministic model of a sharded MongoDB cluster
// with the balancer on, for testing the per-shard replay subtasks. There
// is no mongod and no sharding here; what stands in for what:
//
//   - Model is the cluster: shards with their own oplogs, chunks of a
//     shard-key range table, a balancer that moves chunks both ways and
//     sometimes aborts, user writes and transactions on one cluster clock
//     (every entry gets the next ts, so the clock is shared and strictly
//     ordered), shard-key changes as prepared transactions on two shards,
//     idle shards writing periodic no-ops, a shard added and one drained
//     and removed, and topology DDL (the no-ops of shardCollection,
//     refineCollectionShardKey, reshardCollection, resharding and
//     movePrimary: followed, or on the task's collection a stop the run
//     must end at). It writes each shard's oplog as raw entries in
//     MongoDB's shapes (inserts and deletes with o2/the document key,
//     $v:2 diffs, fromMigrate copies, catch-up writes and range
//     deletions, applyOps, prepare and commitTransaction, op n no-ops);
//   - Run feeds each shard's oplog to a real replay.Replayer (one subtask
//     per shard, ShardMember, a shared board.MemoryBoard) through readers
//     whose per-shard delivery speed is set by the seed (one reader far
//     ahead of another), kills subtasks and restarts them from their last
//     saved checkpoint;
//   - Recorder is the target: an Options.ApplyAt sink that applies the
//     writes to documents in memory and checks that each document's
//     writes arrive in the cluster's order, none from a fromMigrate entry
//     and none twice except when a restarted subtask replays after its
//     checkpoint. Such a replay may land behind a later write its earlier
//     instance applied, when that instance applied the write first or had
//     it refused on _id first (stepped over, or settled from the source).
//     Optionally it forwards them to a real FerretDB target;
//   - Target, optionally, makes that target a sharded cluster of a given
//     version (5.0 to 8.0) and shard key: the task's pre-split plan
//     (targetsharding.MakePlan from the model's chunks) is applied to its chunk
//     table, which must cover the key space with no gap, and every write
//     is routed as mongos routes it, refused as mongos refuses it (an
//     upsert without the whole key up to 7.0, a shard-key change without
//     it, a single write with neither the key nor _id). The replayers
//     read its keys and documents through replay.ShardKeys, and the run
//     checks that every update, replacement and delete carried the whole
//     shard key, shard-key changes included.
//   - GenerateCopy (copy.go) puts a per-shard copy into a schedule: the
//     shards' start positions, then the chunk ownership, then readers
//     over each shard's documents as the shard holds them (shardstate.go:
//     its oplog applied, orphans included), filtered by that ownership
//     (pkg/engine/sourceshardcopy), while chunks migrate both ways between the
//     clone's batches, empty or aborted, range deleters run and readers
//     are killed mid-range; then the settling passes; Run with
//     Config.From replays from the start positions onto the copy's
//     documents (NewCopyRecorder). docs/sharded.md, "Per-shard copy", has
//     the rule.
//
// The final documents must equal the model's. TestSim runs every
// schedule with the replayers' default options, as a task runs them.
//
// Behaviours (behaviours.go) add what mongod writes that the first model,
// built from the same assumption as the replay rule, left out; each is
// switched on or off per schedule (GenerateWith; TestSim switches every
// one on unless SHARDSIM_BEHAVIOURS names a list, or none, and
// SHARDSIM_WITHOUT leaves one off), at a version
// (4.4 to 8.0) the seed picks, and comes from the server source named:
//
//   - Clocks: each shard's own hybrid logical clock, advanced past the
//     cluster time a message carries (db/vector_clock.cpp,
//     db/logical_time.h): a router's request, the donor's and recipient's
//     migration commands, a coordinator's prepare and commit; the
//     application's client gossips the cluster time of a document's last
//     write, except an insert from an unrelated client
//     (InsertIDUnrelated), which can lie below the delete it follows. Entries of two shards can share a ts. A periodic no-op is
//     written only after 10 s without a write (repl/noop_writer.cpp).
//   - ConfigDocs: config.migrationCoordinators on the donor,
//     config.rangeDeletions on both sides, from 6.0 the recipient's
//     config.migrationRecipients and config.collection_critical_sections,
//     each inserted, updated and deleted in the server's order
//     (s/migration_source_manager.cpp, s/migration_coordinator.cpp,
//     s/migration_util.cpp, s/migration_destination_manager.cpp,
//     s/range_deletion_util.cpp and the .idl files of each document); an
//     aborted migration's copies go through the recipient's range deleter.
//   - RecordIDClone: the clone reads the record ids taken at its start in
//     batches, with donor writes between them; a document deleted before
//     its batch is skipped, and its transferred delete logs nothing on a
//     recipient without it (s/migration_chunk_cloner_source.cpp,
//     _applyMigrateOp in s/migration_destination_manager.cpp).
//   - EmptyMigrations: a chunk emptied by plain deletes migrates (no
//     fromMigrate CRUD entry at all) and one of its _ids is inserted again
//     on the recipient.
//   - Sessions: retryable writes; a migration moves each session's last
//     write as a $sessionMigrateInfo no-op, or the $incompleteOplogHistory
//     sentinel for a transaction (s/session_catalog_migration_source.cpp,
//     s/session_catalog_migration_destination.cpp).
//   - Coordinator: config.transaction_coordinators with the participants
//     on the coordinator shard, commitTimestamp the largest prepare ts,
//     the decision before the commits, some transactions aborted after
//     some prepares (s/transaction_coordinator.cpp,
//     s/transaction_coordinator_util.cpp). The replayers read the
//     decision to make a commit wait for the participants alone.
//   - IDReuse: an _id deleted on one shard and inserted with a shard key
//     another shard owns, half the time from a client that has not seen
//     the delete (InsertIDUnrelated: with Clocks, below it when the new
//     shard's clock is behind); scenarios_rehome_test.go names the
//     interleavings, during migrations too.
//   - LateCommit: in half the committed multi-shard transactions, some
//     participants' commitTransaction comes only after a client that
//     learnt of the commit has updated the committed participants'
//     documents or moved them to a third shard: the coordinator sends the
//     commits once its decision is durable
//     (TransactionCoordinator::runCommit, s/transaction_coordinator.cpp),
//     and the router answers at the decision on 5.0 to 6.0
//     (coordinateCommitReturnImmediatelyAfterPersistingDecision), after
//     the participants' acknowledgements on 4.4 and from 6.1, while any
//     client can read a committed participant; scenarios_latecommit_test.go
//     adds another transaction on the late shard before its commit.
//
// Inserts carry their document key in o2 from the 5.3 binary on, at any
// FCV (fcv.go): at 4.4 and 5.0 they are logged without it, and the
// replayers read the collection's shard key as config.collections has
// it.
//
// docs/oplog-shapes.md shows the shapes by version; testdata holds them as
// extended JSON (TestConfigShapeFixtures). scenarios_mongod_test.go has
// the interleavings of these behaviours a replay rule must survive.
package shardsim
