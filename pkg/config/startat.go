package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// ParseStartAt reads incremental.startAt: an oplog position written
// "seconds,increment" (or "seconds:increment", as status.shards shows
// positions) or an RFC 3339 time, which becomes the position at the start
// of its second (increment 0), so every entry of that second and later is
// after it.
func ParseStartAt(s string) (bson.Timestamp, error) {
	s = strings.TrimSpace(s)
	if sep := strings.IndexAny(s, ",:"); sep > 0 && !strings.ContainsAny(s, "T-") {
		t, errT := strconv.ParseUint(strings.TrimSpace(s[:sep]), 10, 32)
		i, errI := strconv.ParseUint(strings.TrimSpace(s[sep+1:]), 10, 32)
		if errT != nil || errI != nil || t == 0 {
			return bson.Timestamp{}, fmt.Errorf("%q is not an oplog position: write it as seconds,increment (such as 1764045600,3), both whole numbers and seconds above 0", s)
		}
		return bson.Timestamp{T: uint32(t), I: uint32(i)}, nil
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return bson.Timestamp{}, fmt.Errorf("%q is neither an oplog position (seconds,increment, such as 1764045600,3) nor an RFC 3339 time (such as 2026-11-25T05:00:00Z)", s)
	}
	if at.Unix() <= 0 || at.Unix() > int64(^uint32(0)) {
		return bson.Timestamp{}, fmt.Errorf("%q is outside the times an oplog position can hold (1970 to 2106)", s)
	}
	return bson.Timestamp{T: uint32(at.Unix())}, nil
}

// FormatPosition writes an oplog position as incremental.startAt reads it.
func FormatPosition(ts bson.Timestamp) string {
	return strconv.FormatUint(uint64(ts.T), 10) + "," + strconv.FormatUint(uint64(ts.I), 10)
}
