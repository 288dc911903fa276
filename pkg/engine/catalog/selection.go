package catalog

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// ErrEmptySelection means the task's namespaces select no collection on
// the source: a run would copy nothing and report success.
var ErrEmptySelection = errors.New("the task selects no collection")

// ErrNamespaceCollision means two selected source collections map to one
// target collection: copying both would merge them.
var ErrNamespaceCollision = errors.New("two source collections map to one target collection")

// Selection is what a task's namespace rules make of the source's
// collections (see Mapper.Select).
type Selection struct {
	// Selected are the namespaces the task copies, in the order given.
	Selected []Namespace
	// Warnings explain include patterns that select nothing, and why.
	Warnings []string
	// Excluded reports whether namespaces.exclude removed a namespace an
	// include pattern (or, without include, the default of everything)
	// selected.
	Excluded bool
	// reasons says, per include pattern (or for the whole source without
	// include), what removed its namespaces; joined into ErrEmptySelection.
	reasons []string
}

// Select applies the task's rules to all, the source's namespaces that
// are not internal (Names).
func (m *Mapper) Select(all []Namespace) Selection {
	var s Selection
	for _, n := range all {
		if m.Selected(n) {
			s.Selected = append(s.Selected, n)
		}
	}
	if len(m.include) == 0 {
		if why := m.removedBy(all); why != "" {
			s.Excluded = len(all) > 0
			s.reasons = append(s.reasons, "with no namespaces.include every collection is selected, but "+why)
		}
		return s
	}
	for i, re := range m.include {
		matched := slices.DeleteFunc(slices.Clone(all), func(n Namespace) bool { return !re.MatchString(n.String()) })
		if len(matched) == 0 {
			why := fmt.Sprintf("namespaces.include[%d] `%s` selects no collection on the source (%s): %s", i, m.includeExprs[i], databases(all), hint(m.includeExprs[i], all))
			s.Warnings = append(s.Warnings, why)
			s.reasons = append(s.reasons, why)
			continue
		}
		if slices.ContainsFunc(matched, m.Selected) {
			continue
		}
		why := fmt.Sprintf("namespaces.include[%d] `%s` selects %s, but %s", i, m.includeExprs[i], nsList(matched), m.removedBy(matched))
		s.Warnings = append(s.Warnings, why)
		s.reasons = append(s.reasons, why)
		s.Excluded = true
	}
	return s
}

// Waiting says, for a task that replays, that nothing is selected yet and
// that collections created later which match the include patterns will be
// replayed, with why each pattern selects nothing ("" when something is
// selected, or when an exclude removed what was selected: Err's case).
func (s Selection) Waiting(include []string) string {
	if len(s.Selected) > 0 || s.Excluded {
		return ""
	}
	what := "collections created later"
	if len(include) > 0 {
		quoted := make([]string, len(include))
		for i, e := range include {
			quoted[i] = "`" + e + "`"
		}
		what += " that match namespaces.include " + strings.Join(quoted, ", ")
	}
	why := "the source holds no collection outside admin, local, config and the checkpoint database"
	if len(s.reasons) > 0 {
		why = strings.Join(s.reasons, "; ")
	}
	return fmt.Sprintf("nothing is selected yet, so the copy is empty; %s will be replayed. %s. If this is not intended, stop the task and change namespaces.include",
		what, why)
}

// Err is ErrEmptySelection, saying which rule removed what, when nothing
// is selected; nil otherwise.
func (s Selection) Err() error {
	if len(s.Selected) > 0 {
		return nil
	}
	why := "the source holds no collection outside admin, local, config and the checkpoint database"
	if len(s.reasons) > 0 {
		why = strings.Join(s.reasons, "; ")
	}
	return fmt.Errorf("namespaces: %w: %s; nothing was written: change namespaces.include or namespaces.exclude so that they select at least one collection",
		ErrEmptySelection, why)
}

// Databases names the databases of all, the source's namespaces that are
// not internal: "its databases are crm and shop", or "it holds no
// collection outside admin, local, config and the checkpoint database".
func databases(all []Namespace) string {
	var dbs []string
	for _, n := range all {
		if !slices.Contains(dbs, n.DB) {
			dbs = append(dbs, n.DB)
		}
	}
	switch len(dbs) {
	case 0:
		return "it holds no collection outside admin, local, config and the checkpoint database"
	case 1:
		return "its only database is " + dbs[0]
	}
	return "its databases are " + strings.Join(dbs[:len(dbs)-1], ", ") + " and " + dbs[len(dbs)-1]
}

// hint says how include pattern expr, which selects nothing in all, could
// be written to select something: as a database's name (shop for
// `shop\..*`), or as part of the name (patterns match the whole
// db.collection); or that nothing on the source looks like it.
func hint(expr string, all []Namespace) string {
	const whole = "a pattern matches the whole db.collection (^ and $ are implied)"
	inner := strings.TrimSuffix(strings.TrimPrefix(expr, "^"), "$")
	for _, c := range []struct{ expr, means string }{
		{inner + `\..*`, "every collection of that database"},
		{inner + ".*", "the names that begin with it"},
		{".*(?:" + inner + ").*", "the names that contain it"},
	} {
		re, err := regexp.Compile("^(?:" + c.expr + ")$")
		if err != nil {
			continue
		}
		var hit []Namespace
		for _, n := range all {
			if re.MatchString(n.String()) {
				hit = append(hit, n)
			}
		}
		if len(hit) > 0 {
			return fmt.Sprintf("%s; for %s write `%s`, which selects %s", whole, c.means, c.expr, nsList(hit))
		}
	}
	return "no database or collection of that name exists on the source yet, or the pattern has a typo (" + whole + ")"
}

// removedBy says which exclude patterns remove which of ns ("" when none
// removes any).
func (m *Mapper) removedBy(ns []Namespace) string {
	var parts []string
	for j, re := range m.exclude {
		var hit []Namespace
		for _, n := range ns {
			if re.MatchString(n.String()) && !slices.ContainsFunc(m.exclude[:j], matches(n)) {
				hit = append(hit, n)
			}
		}
		if len(hit) > 0 {
			parts = append(parts, fmt.Sprintf("namespaces.exclude[%d] `%s` removes %s", j, m.excludeExprs[j], nsList(hit)))
		}
	}
	return strings.Join(parts, ", and ")
}

func matches(n Namespace) func(*regexp.Regexp) bool {
	return func(re *regexp.Regexp) bool { return re.MatchString(n.String()) }
}

// nsList names up to five namespaces, then how many more.
func nsList(ns []Namespace) string {
	const most = 5
	names := make([]string, 0, most)
	for i, n := range ns {
		if i == most {
			return strings.Join(names, ", ") + fmt.Sprintf(" and %d more", len(ns)-most)
		}
		names = append(names, n.String())
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// Collisions fails with ErrNamespaceCollision, naming both source
// namespaces, the target namespace and the fix, when two of selected map
// to one target namespace (a rename onto a collection that keeps its name,
// or two renames that meet).
func (m *Mapper) Collisions(selected []Namespace) error {
	byTarget := map[Namespace]Namespace{}
	var errs []error
	for _, n := range selected {
		t := m.Target(n)
		if prev, ok := byTarget[t]; ok && prev != n {
			errs = append(errs, m.collision(prev, n, "nothing was written"))
			continue
		}
		byTarget[t] = n
	}
	return errors.Join(errs...)
}

// collision is the error for a and b mapping to one target namespace;
// stopped says what the task did about it.
func (m *Mapper) collision(a, b Namespace, stopped string) error {
	return fmt.Errorf("namespaces: %w: %s (%s) and %s (%s) would both be written to %s on the target, merging two collections into one; "+
		"%s: exclude one of them with namespaces.exclude, or rename one elsewhere with namespaces.rename",
		ErrNamespaceCollision, a, m.mappedBy(a), b, m.mappedBy(b), m.Target(a), stopped)
}

// mappedBy says which rule gives n its target name.
func (m *Mapper) mappedBy(n Namespace) string {
	if i, ok := m.renameRule[n.String()]; ok {
		return fmt.Sprintf("by namespaces.rename[%d]", i)
	}
	if i, ok := m.renameRule[n.DB]; ok {
		return fmt.Sprintf("by namespaces.rename[%d]", i)
	}
	return "keeps its name"
}

// Claims tracks which source collection each target collection receives
// while replay creates, renames and drops collections, so that a
// collection created on the source later cannot merge into another one's
// target (Claim fails with ErrNamespaceCollision).
type Claims struct {
	m        *Mapper
	byTarget map[Namespace]Namespace
}

// NewClaims starts from the selected source namespaces (checked by
// Collisions).
func NewClaims(m *Mapper, selected []Namespace) *Claims {
	c := &Claims{m: m, byTarget: map[Namespace]Namespace{}}
	for _, n := range selected {
		c.byTarget[m.Target(n)] = n
	}
	return c
}

// Claim records that source namespace n exists and is replayed to its
// target name; it fails when another source namespace holds that name.
func (c *Claims) Claim(n Namespace) error {
	t := c.m.Target(n)
	if prev, ok := c.byTarget[t]; ok && prev != n {
		return c.m.collision(prev, n, fmt.Sprintf("replay stopped before creating %s on the target", t))
	}
	c.byTarget[t] = n
	return nil
}

// Release records that source namespace n no longer exists.
func (c *Claims) Release(n Namespace) {
	if t := c.m.Target(n); c.byTarget[t] == n {
		delete(c.byTarget, t)
	}
}

// ReleaseDB records that every collection of source database db is gone.
func (c *Claims) ReleaseDB(db string) {
	for t, n := range c.byTarget {
		if n.DB == db {
			delete(c.byTarget, t)
		}
	}
}
