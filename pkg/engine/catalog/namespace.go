package catalog

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// Namespace is a database and a collection.
type Namespace struct {
	DB   string `bson:"db" json:"db"`
	Coll string `bson:"coll" json:"coll"`
}

// ParseNamespace splits "db.collection" at the first dot.
func ParseNamespace(s string) Namespace {
	db, coll, _ := strings.Cut(s, ".")
	return Namespace{DB: db, Coll: coll}
}

func (n Namespace) String() string { return n.DB + "." + n.Coll }

// Mapper decides which namespaces a task copies and what they are called on
// the target.
type Mapper struct {
	include, exclude []*regexp.Regexp
	includeExprs     []string
	excludeExprs     []string
	dbRenames        map[string]string
	// renameRule is the index of the namespaces.rename rule of each from.
	renameRule  map[string]int
	collRenames map[string]Namespace
	internalDBs []string
	// filters are namespaces.filters (filter.go).
	filters []nsFilter
}

// NewMapper compiles a task's namespace rules. Each regular expression must
// match the whole "db.collection". checkpointDB is never copied.
func NewMapper(ns config.Namespaces, checkpointDB string) (*Mapper, error) {
	m := &Mapper{
		dbRenames:   map[string]string{},
		collRenames: map[string]Namespace{},
		renameRule:  map[string]int{},
		internalDBs: append(slices.Clone(config.InternalDatabases), checkpointDB),
	}
	compile := func(field string, exprs []string) ([]*regexp.Regexp, error) {
		out := make([]*regexp.Regexp, 0, len(exprs))
		for i, e := range exprs {
			re, err := config.NamespacePattern(e)
			if err != nil {
				return nil, fmt.Errorf("namespaces.%s[%d]: invalid regular expression %q: %w", field, i, e, err)
			}
			out = append(out, re)
		}
		return out, nil
	}
	var err error
	if m.include, err = compile("include", ns.Include); err != nil {
		return nil, err
	}
	m.includeExprs = slices.Clone(ns.Include)
	if m.exclude, err = compile("exclude", ns.Exclude); err != nil {
		return nil, err
	}
	m.excludeExprs = slices.Clone(ns.Exclude)
	if m.filters, err = compileFilters(ns.Filters); err != nil {
		return nil, err
	}
	for i, r := range ns.Rename {
		m.renameRule[r.From] = i
		if strings.Contains(r.From, ".") {
			m.collRenames[r.From] = ParseNamespace(r.To)
		} else {
			m.dbRenames[r.From] = r.To
		}
	}
	return m, nil
}

// IsInternal reports whether a namespace belongs to the server or to
// MongoFerry and is never copied: admin, local, config, the checkpoint
// database, and system.* collections.
func (m *Mapper) IsInternal(n Namespace) bool {
	return slices.Contains(m.internalDBs, n.DB) || strings.HasPrefix(n.Coll, "system.")
}

// SelectedDB reports whether any collection of db may be selected, to skip
// whole databases early.
func (m *Mapper) SelectedDB(db string) bool { return !slices.Contains(m.internalDBs, db) }

// ExcludesDB reports whether namespaces.exclude leaves out every
// collection of db: one of its expressions matches "db." (as `db\..*`
// does).
func (m *Mapper) ExcludesDB(db string) bool {
	return slices.ContainsFunc(m.exclude, func(re *regexp.Regexp) bool { return re.MatchString(db + ".") })
}

// Selected reports whether the task copies the namespace.
func (m *Mapper) Selected(n Namespace) bool {
	if m.IsInternal(n) {
		return false
	}
	s := n.String()
	if len(m.include) > 0 && !slices.ContainsFunc(m.include, func(re *regexp.Regexp) bool { return re.MatchString(s) }) {
		return false
	}
	return !slices.ContainsFunc(m.exclude, func(re *regexp.Regexp) bool { return re.MatchString(s) })
}

// Target returns the namespace's name on the target: a collection rename
// wins over a database rename.
func (m *Mapper) Target(n Namespace) Namespace {
	if t, ok := m.collRenames[n.String()]; ok {
		return t
	}
	return Namespace{DB: m.TargetDB(n.DB), Coll: n.Coll}
}

// TargetDB returns a database's name on the target.
func (m *Mapper) TargetDB(db string) string {
	if t, ok := m.dbRenames[db]; ok {
		return t
	}
	return db
}
