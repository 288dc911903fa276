package catalog

import (
	"context"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/docfilter"
)

// Collection is one source collection the task copies.
type Collection struct {
	// Source and Target name the collection on each side.
	Source, Target Namespace
	// Type is "collection", "view" or "timeseries".
	Type string
	// Options are the listCollections options (capped, collation,
	// validator, clusteredIndex, timeseries, viewOn, pipeline, ...).
	Options bson.Raw
	// Indexes are the listIndexes specifications, _id index excluded.
	Indexes []bson.Raw
	// Filter, when set, keeps only the documents that match it
	// (namespaces.filters); RangeQuery reads a range through it.
	Filter *docfilter.Filter
}

// HasUniqueIndex reports whether the collection has a unique index other
// than _id.
func (c Collection) HasUniqueIndex() bool {
	for _, ix := range c.Indexes {
		if u, _ := ix.Lookup("unique").BooleanOK(); u {
			return true
		}
	}
	return false
}

// Copyable reports whether the collection holds documents to copy (views
// are recreated, not copied).
func (c Collection) Copyable() bool { return c.Type != "view" }

// List returns the source collections the mapper selects, sorted by name,
// with their options and indexes.
func List(ctx context.Context, client *mongo.Client, m *Mapper) ([]Collection, error) {
	dbs, err := client.ListDatabaseNames(ctx, bson.D{})
	if err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	slices.Sort(dbs)
	var out []Collection
	for _, db := range dbs {
		if !m.SelectedDB(db) {
			continue
		}
		colls, err := listDB(ctx, client, m, db, bson.D{})
		if err != nil {
			return nil, err
		}
		out = append(out, colls...)
	}
	slices.SortFunc(out, func(a, b Collection) int {
		if a.Source.DB != b.Source.DB {
			return compareStrings(a.Source.DB, b.Source.DB)
		}
		return compareStrings(a.Source.Coll, b.Source.Coll)
	})
	return out, nil
}

// Describe returns one source collection's options and indexes as List
// does, with its target name from m; ok is false when the source has no
// such collection (or m does not select it).
func Describe(ctx context.Context, client *mongo.Client, m *Mapper, ns Namespace) (c Collection, ok bool, err error) {
	colls, err := listDB(ctx, client, m, ns.DB, bson.D{{Key: "name", Value: ns.Coll}})
	if err != nil || len(colls) == 0 {
		return Collection{}, false, err
	}
	return colls[0], true, nil
}

// listDB lists the collections of db that match filter and m selects.
func listDB(ctx context.Context, client *mongo.Client, m *Mapper, db string, filter bson.D) ([]Collection, error) {
	cur, err := client.Database(db).ListCollections(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("list collections of %s: %w", db, err)
	}
	var specs []struct {
		Name    string   `bson:"name"`
		Type    string   `bson:"type"`
		Options bson.Raw `bson:"options"`
	}
	if err := cur.All(ctx, &specs); err != nil {
		return nil, fmt.Errorf("list collections of %s: %w", db, err)
	}
	var out []Collection
	for _, s := range specs {
		ns := Namespace{DB: db, Coll: s.Name}
		if !m.Selected(ns) {
			continue
		}
		c := Collection{Source: ns, Target: m.Target(ns), Type: s.Type, Options: s.Options}
		if c.Type == "" {
			c.Type = "collection"
		}
		if c.Type != "view" {
			if c.Indexes, err = listIndexes(ctx, client.Database(db).Collection(s.Name)); err != nil {
				return nil, err
			}
			if c.Filter, err = m.Filter(ns); err != nil {
				return nil, err
			}
		}
		out = append(out, c)
	}
	return out, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func listIndexes(ctx context.Context, coll *mongo.Collection) ([]bson.Raw, error) {
	cur, err := coll.Indexes().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list indexes of %s.%s: %w", coll.Database().Name(), coll.Name(), err)
	}
	var specs []bson.Raw
	for cur.Next(ctx) {
		if name, _ := cur.Current.Lookup("name").StringValueOK(); name == "_id_" {
			continue
		}
		specs = append(specs, slices.Clone(cur.Current))
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("list indexes of %s.%s: %w", coll.Database().Name(), coll.Name(), err)
	}
	return specs, nil
}

// Names returns every source namespace that is not internal (IsInternal),
// selected or not, sorted: what a task's rules choose from (Mapper.Select).
func Names(ctx context.Context, client *mongo.Client, m *Mapper) ([]Namespace, error) {
	dbs, err := client.ListDatabaseNames(ctx, bson.D{})
	if err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	slices.Sort(dbs)
	var out []Namespace
	for _, db := range dbs {
		if !m.SelectedDB(db) {
			continue
		}
		colls, err := client.Database(db).ListCollectionNames(ctx, bson.D{})
		if err != nil {
			return nil, fmt.Errorf("list collections of %s: %w", db, err)
		}
		slices.Sort(colls)
		for _, c := range colls {
			if n := (Namespace{DB: db, Coll: c}); !m.IsInternal(n) {
				out = append(out, n)
			}
		}
	}
	return out, nil
}
