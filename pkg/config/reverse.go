package config

import (
	"errors"
	"fmt"
	"regexp"
)

// ReverseSuffix is added to a task's name, and to its checkpoint
// database's, to name its reverse sync.
const ReverseSuffix = "-reverse"

// ReverseCheckpointDatabase is the checkpoint database of the reverse of a
// task whose checkpoint database is forward: another name, so that the
// reverse sync never reads the forward task's checkpoint (it is kept on
// the reverse sync's source) or writes into it.
func ReverseCheckpointDatabase(forward string) string {
	return forward + "_reverse"
}

// ReverseNamespaces turns the namespace selection of a task around for its
// reverse sync: renames are inverted (what the forward task wrote to
// shop_v2 goes back to shop) and the forward task's checkpoint database,
// which lives on the reverse sync's source, is excluded; document filters
// are kept. Include, exclude and filter patterns name source namespaces,
// so with renames they would no longer name the same collections: that
// combination is refused with what to do.
func ReverseNamespaces(ns Namespaces, forwardCheckpointDB string) (Namespaces, error) {
	if len(ns.Rename) > 0 && (len(ns.Include) > 0 || len(ns.Exclude) > 0 || len(ns.Filters) > 0) {
		return Namespaces{}, errors.New("namespaces: the task both renames and filters namespaces, and its patterns name the source's namespaces, not the renamed ones on the target: " +
			"write the reverse task's namespaces.include and exclude by hand (ferry reverse -o, then edit)")
	}
	out := Namespaces{
		Include: append([]string(nil), ns.Include...),
		Exclude: append([]string(nil), ns.Exclude...),
	}
	for _, f := range ns.Filters {
		out.Filters = append(out.Filters, *f.DeepCopy())
	}
	for _, r := range ns.Rename {
		out.Rename = append(out.Rename, Rename{From: r.To, To: r.From})
	}
	out.Exclude = append(out.Exclude, "^"+regexp.QuoteMeta(forwardCheckpointDB)+`\.`)
	return out, nil
}

// Reverse returns the reverse sync of a task whose cut-over completed: a
// task in mode incremental from the task's target back to its source,
// starting at startAt (the target's position recorded at cut-over,
// "seconds,increment"), with its own name and checkpoint database and the
// namespace selection turned around (ReverseNamespaces). Each endpoint
// keeps its credentials and TLS settings; the fields that only apply to a
// source (kind, shards) or to a target (sharding, shardKeys) are left to
// their defaults.
func (t *Task) Reverse(startAt string) (*Task, error) {
	if _, err := ParseStartAt(startAt); err != nil {
		return nil, fmt.Errorf("start position: %w", err)
	}
	ns, err := ReverseNamespaces(t.Namespaces, t.Checkpoint.Database)
	if err != nil {
		return nil, err
	}
	r := &Task{Name: t.Name + ReverseSuffix}
	t.Spec.DeepCopyInto(&r.Spec)
	r.Mode = ModeIncremental
	r.Source, r.Target = endpointOnly(t.Target), endpointOnly(t.Source)
	r.Namespaces = ns
	r.Incremental.StartAt = startAt
	r.FullSync.DropTarget = false
	r.Checkpoint.Database = ReverseCheckpointDatabase(t.Checkpoint.Database)
	r.Cutover = Cutover{}
	r.Suspend = false
	r.SetDefaults()
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("the reverse task: %w", err)
	}
	return r, nil
}

// endpointOnly is e without the fields that only apply to one side.
func endpointOnly(e Endpoint) Endpoint {
	out := Endpoint{URI: e.URI, Username: e.Username, PasswordFile: e.PasswordFile, PasswordEnv: e.PasswordEnv, AuthSource: e.AuthSource, AuthMechanism: e.AuthMechanism}
	if e.TLS != nil {
		out.TLS = e.TLS.DeepCopy()
	}
	return out
}
