package source

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// ErrWriteBlockUnavailable means the source cannot block user writes:
// the server lacks setUserWriteBlockMode or the user may not run it.
var ErrWriteBlockUnavailable = errors.New("cannot block writes on the source")

// Server error codes setUserWriteBlockMode answers with when it cannot
// run.
const (
	codeUnauthorized    = 13
	codeCommandNotFound = 59
)

// SetUserWriteBlock blocks (or unblocks) user writes on the whole source
// deployment with setUserWriteBlockMode (MongoDB 6.0 and later). Writes
// by users with the bypassWriteBlockingMode privilege still go through.
func SetUserWriteBlock(ctx context.Context, client *mongo.Client, block bool) error {
	err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "setUserWriteBlockMode", Value: 1}, {Key: "global", Value: block}}).Err()
	if err == nil {
		return nil
	}
	const fix = "set cutover.blockSourceWrites: false and stop the application's writes to the source yourself before the cut-over"
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		switch ce.Code {
		case codeCommandNotFound:
			return fmt.Errorf("%w: the server does not have setUserWriteBlockMode (MongoDB 6.0 or later has it; it answered: %s); %s", ErrWriteBlockUnavailable, ce.Message, fix)
		case codeUnauthorized:
			return fmt.Errorf("%w: the source user may not run setUserWriteBlockMode (it needs a role with the setUserWriteBlockMode action on the cluster resource; the server answered: %s); grant it, or %s", ErrWriteBlockUnavailable, ce.Message, fix)
		}
	}
	return fmt.Errorf("setUserWriteBlockMode global=%t: %w", block, err)
}
