package oplog

import "errors"

// Sentinel errors. Every error this package returns wraps one of them, with
// the entry's ts and namespace (or the diff path) as context, so a caller
// can classify with errors.Is and a user can read what was wrong.
var (
	// ErrMalformedEntry: the raw bytes are not a well-formed oplog entry
	// (bad BSON, a required field missing or of the wrong type).
	ErrMalformedEntry = errors.New("malformed oplog entry")

	// ErrUnknownDiffSection: a $v:2 diff holds a section this package does
	// not know. The replayer must stop rather than guess: a newer server
	// may have added a section whose meaning we would silently drop.
	ErrUnknownDiffSection = errors.New("unknown $v:2 diff section")

	// ErrMalformedDiff: a known $v:2 diff section has the wrong type or an
	// impossible value (a negative array length, an index that is not a
	// number).
	ErrMalformedDiff = errors.New("malformed $v:2 diff")

	// ErrUnsupportedUpdate: an update entry in a form this package cannot
	// translate ($v other than 1 or 2, an operator other than $set/$unset
	// in a $v:1 entry, operators mixed with plain fields).
	ErrUnsupportedUpdate = errors.New("unsupported update entry")

	// ErrUnaddressablePath: a field name cannot be written as part of a
	// dotted update path (it is empty, contains '.' or starts with '$'),
	// so a $v:2 diff or operator touching it cannot be replayed as an
	// update. Refetching the whole document from the source is the way out.
	ErrUnaddressablePath = errors.New("field cannot be addressed by an update path")

	// ErrBinaryDiff: a $v:2 diff holds a binary section (b: {<field>:
	// {o: <offset>, d: <bytes>}}), which MongoDB 8.0 writes for the
	// compressed columns of a time-series bucket: the column's bytes from
	// the offset on are replaced. No update operator can write part of a
	// binary value, so the bucket is re-read from the source instead.
	ErrBinaryDiff = errors.New("binary diff of a compressed column")

	// ErrUnknownCommand: a command entry ('c') that is neither a DDL class
	// nor a transaction entry this package knows.
	ErrUnknownCommand = errors.New("unknown oplog command")

	// ErrNeedsAssembly: applyOps, commitTransaction and abortTransaction
	// entries must go through an Assembler, not straight to Translate.
	ErrNeedsAssembly = errors.New("transaction entry must go through the Assembler")

	// ErrIncompleteTxn: a transaction entry refers to earlier entries of
	// its transaction (prevOpTime, a commit after a prepare) that the
	// Assembler has not seen: reading started after the transaction did, or
	// a checkpoint was taken past an open transaction without saving the
	// Assembler's state. Applying the rest would apply part of a
	// transaction, so it is an error.
	ErrIncompleteTxn = errors.New("incomplete transaction")
)
