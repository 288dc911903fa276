// Package holdback keeps back, during a sync, the target options that
// would change the target's data on the target's own clock or refuse
// replayed writes, and restores them at cut-over: Holder rewrites the
// collections and indexes the copy and the replay create (a TTL index is
// built without its expiry, a capped collection uncapped, a unique index
// whose late build meets the copy's duplicates built non-unique) and
// records what it held in the checkpoint database; Pending lists the
// records and Restore applies them to the target.
package holdback
