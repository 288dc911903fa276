package chaos

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Diff is what a comparison of one database found.
type Diff struct {
	// Compared counts the source's documents compared.
	Compared int
	// Missing, Changed and Extra count documents absent from the target,
	// different on it (byte for byte), and on it but not on the source;
	// Indexes counts indexes (by name and key) on one side only.
	Missing, Changed, Extra, Indexes int
	// Examples shows a few of them.
	Examples []string
}

// Differences is the number of differences found.
func (d Diff) Differences() int { return d.Missing + d.Changed + d.Extra + d.Indexes }

func (d *Diff) note(s string) {
	if len(d.Examples) < 6 {
		d.Examples = append(d.Examples, s)
	}
}

func (d Diff) String() string {
	return fmt.Sprintf("%d documents compared: %d missing, %d changed, %d extra, %d index differences (%s)",
		d.Compared, d.Missing, d.Changed, d.Extra, d.Indexes, strings.Join(d.Examples, "; "))
}

// Compare compares every collection of database db on the source with the
// same collection on the target: the same documents (keyed by the raw bytes
// of their _id, type included), byte for byte, and the same indexes.
func Compare(ctx context.Context, src, dst *mongo.Client, db string) (Diff, error) {
	var d Diff
	names, err := collections(ctx, src, db)
	if err != nil {
		return d, fmt.Errorf("list source collections: %w", err)
	}
	tnames, err := collections(ctx, dst, db)
	if err != nil {
		return d, fmt.Errorf("list target collections: %w", err)
	}
	for _, n := range tnames {
		if !slices.Contains(names, n) {
			d.Extra++
			d.note("extra collection " + n)
		}
	}
	for _, coll := range names {
		want, err := readAll(ctx, src.Database(db).Collection(coll))
		if err != nil {
			return d, fmt.Errorf("read source %s.%s: %w", db, coll, err)
		}
		got, err := readAll(ctx, dst.Database(db).Collection(coll))
		if err != nil {
			return d, fmt.Errorf("read target %s.%s: %w", db, coll, err)
		}
		d.Compared += len(want)
		for k, w := range want {
			g, ok := got[k]
			switch {
			case !ok:
				d.Missing++
				d.note(coll + ": missing " + w.String())
			case !bytes.Equal(g, w):
				d.Changed++
				d.note(fmt.Sprintf("%s: changed: target %s, source %s", coll, g, w))
			}
		}
		for k, g := range got {
			if _, ok := want[k]; !ok {
				d.Extra++
				d.note(coll + ": extra " + g.String())
			}
		}
		si, err := indexes(ctx, src.Database(db).Collection(coll))
		if err != nil {
			return d, err
		}
		ti, err := indexes(ctx, dst.Database(db).Collection(coll))
		if err != nil {
			return d, err
		}
		for _, i := range si {
			if !slices.Contains(ti, i) {
				d.Indexes++
				d.note(coll + ": index missing on the target: " + i)
			}
		}
		for _, i := range ti {
			if !slices.Contains(si, i) {
				d.Indexes++
				d.note(coll + ": index only on the target: " + i)
			}
		}
	}
	return d, nil
}

func collections(ctx context.Context, c *mongo.Client, db string) ([]string, error) {
	names, err := c.Database(db).ListCollectionNames(ctx, bson.D{})
	if err != nil {
		return nil, err
	}
	names = slices.DeleteFunc(names, func(n string) bool { return strings.HasPrefix(n, "system.") })
	slices.Sort(names)
	return names, nil
}

func readAll(ctx context.Context, coll *mongo.Collection) (map[string]bson.Raw, error) {
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetBatchSize(2000))
	if err != nil {
		return nil, err
	}
	defer func() { _ = cur.Close(ctx) }()
	out := map[string]bson.Raw{}
	for cur.Next(ctx) {
		id := cur.Current.Lookup("_id")
		key := string(append([]byte{byte(id.Type)}, id.Value...))
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("_id %s read twice", id)
		}
		out[key] = bytes.Clone(cur.Current)
	}
	return out, cur.Err()
}

// indexes lists a collection's indexes as "name key".
func indexes(ctx context.Context, coll *mongo.Collection) ([]string, error) {
	cur, err := coll.Indexes().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list indexes of %s: %w", coll.Name(), err)
	}
	var out []string
	for cur.Next(ctx) {
		out = append(out, cur.Current.Lookup("name").StringValue()+" "+cur.Current.Lookup("key").String())
	}
	return out, cur.Err()
}
