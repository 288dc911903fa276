package catalog

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// codeNamespaceExists is returned by create for an existing collection.
const codeNamespaceExists = 48

// CreateCollection creates the target collection with the source's options.
// An existing collection is left as it is. A view's viewOn is mapped
// through the mapper so a renamed database keeps working views.
func CreateCollection(ctx context.Context, target *mongo.Client, c Collection, m *Mapper) error {
	cmd, err := CreateCommand(c, m)
	if err != nil {
		return err
	}
	err = target.Database(c.Target.DB).RunCommand(ctx, cmd).Err()
	var ce mongo.CommandError
	if errors.As(err, &ce) && ce.Code == codeNamespaceExists {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", c.Target, err)
	}
	return nil
}

// CreateCommand returns the create command that makes c on the target:
// every listCollections option (capped, size, max, collation, validator,
// validationLevel, validationAction, clusteredIndex, timeseries,
// expireAfterSeconds, changeStreamPreAndPostImages, pipeline, ...) as the
// source reports it, except the server-assigned or legacy ones create
// refuses (uuid, flags, autoIndexId), and viewOn mapped to the target.
func CreateCommand(c Collection, m *Mapper) (bson.D, error) {
	cmd := bson.D{{Key: "create", Value: c.Target.Coll}}
	if len(c.Options) == 0 {
		return cmd, nil
	}
	elems, err := c.Options.Elements()
	if err != nil {
		return nil, fmt.Errorf("options of %s: %w", c.Source, err)
	}
	for _, e := range elems {
		switch e.Key() {
		case "autoIndexId", "flags", "uuid", "temp":
			// legacy, server-assigned or internal (temp marks
			// convertToCapped's clone); not accepted by create
		case "viewOn":
			on := m.Target(Namespace{DB: c.Source.DB, Coll: e.Value().StringValue()})
			cmd = append(cmd, bson.E{Key: "viewOn", Value: on.Coll})
		case "timeseries":
			ts, err := timeseriesOptions(e.Value())
			if err != nil {
				return nil, fmt.Errorf("timeseries options of %s: %w", c.Source, err)
			}
			cmd = append(cmd, bson.E{Key: "timeseries", Value: ts})
		default:
			cmd = append(cmd, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}
	return cmd, nil
}

// timeseriesOptions returns a time series collection's options for create.
// MongoDB 6.3+ reports bucketMaxSpanSeconds next to granularity, but
// create refuses the two together: the span is implied by the granularity,
// so it is left out when a granularity is set.
func timeseriesOptions(v bson.RawValue) (bson.D, error) {
	doc, ok := v.DocumentOK()
	if !ok {
		return nil, fmt.Errorf("not a document: %s", v)
	}
	elems, err := doc.Elements()
	if err != nil {
		return nil, err
	}
	_, granular := doc.Lookup("granularity").StringValueOK()
	out := bson.D{}
	for _, e := range elems {
		if granular && (e.Key() == "bucketMaxSpanSeconds" || e.Key() == "bucketRoundingSeconds") {
			continue
		}
		out = append(out, bson.E{Key: e.Key(), Value: e.Value()})
	}
	return out, nil
}

// CreateIndexes builds the source's indexes on the target collection.
// Server-specific fields (v, ns, background) are dropped from the specs.
func CreateIndexes(ctx context.Context, target *mongo.Client, c Collection) error {
	return CreateIndexesBy(ctx, target, c, false)
}

// CreateIndexesBy is CreateIndexes with one createIndexes command per index
// when oneByOne is set (conn.Profile.IndexesOneByOne).
func CreateIndexesBy(ctx context.Context, target *mongo.Client, c Collection, oneByOne bool) error {
	if len(c.Indexes) == 0 {
		return nil
	}
	specs := make(bson.A, 0, len(c.Indexes))
	for _, raw := range c.Indexes {
		elems, err := raw.Elements()
		if err != nil {
			return fmt.Errorf("index of %s: %w", c.Source, err)
		}
		spec := bson.D{}
		for _, e := range elems {
			switch e.Key() {
			case "v", "ns", "background":
			default:
				spec = append(spec, bson.E{Key: e.Key(), Value: e.Value()})
			}
		}
		specs = append(specs, spec)
	}
	batches := []bson.A{specs}
	if oneByOne {
		batches = batches[:0]
		for _, s := range specs {
			batches = append(batches, bson.A{s})
		}
	}
	for _, b := range batches {
		err := target.Database(c.Target.DB).RunCommand(ctx, bson.D{
			{Key: "createIndexes", Value: c.Target.Coll}, {Key: "indexes", Value: b},
		}).Err()
		if err != nil {
			return fmt.Errorf("create indexes on %s: %w", c.Target, err)
		}
	}
	return nil
}
