package oplog

import (
	"strings"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// Collections the server maintains whose writes stand for user-visible
// changes: mongod logs a view's DDL as writes on <db>.system.views, and a
// time-series collection's measurements as writes on its buckets
// collection <db>.system.buckets.<name>.
const (
	viewsColl       = "system.views"
	bucketsPrefix   = "system.buckets."
	convertToCapped = ".convertToCapped."
)

// IsViews reports whether ns is a database's view catalog (system.views).
func IsViews(ns catalog.Namespace) bool { return ns.Coll == viewsColl }

// BucketsOf returns the time-series collection whose buckets collection ns
// is (db.system.buckets.weather -> db.weather).
func BucketsOf(ns catalog.Namespace) (catalog.Namespace, bool) {
	name, ok := strings.CutPrefix(ns.Coll, bucketsPrefix)
	if !ok || name == "" {
		return catalog.Namespace{}, false
	}
	return catalog.Namespace{DB: ns.DB, Coll: name}, true
}

// BucketsNamespace returns the buckets collection of time-series
// collection ts (db.weather -> db.system.buckets.weather).
func BucketsNamespace(ts catalog.Namespace) catalog.Namespace {
	return catalog.Namespace{DB: ts.DB, Coll: bucketsPrefix + ts.Coll}
}

// IsBucketsName reports whether a collection name is a buckets
// collection's (system.buckets.<name>).
func IsBucketsName(coll string) bool {
	name, ok := strings.CutPrefix(coll, bucketsPrefix)
	return ok && name != ""
}

// CappedCloneOf returns the collection a convertToCapped clones: the server
// copies it into tmpXXXXX.convertToCapped.<name> (capped_utils.cpp), then
// renames the clone over it with dropTarget.
func CappedCloneOf(ns catalog.Namespace) (catalog.Namespace, bool) {
	if !strings.HasPrefix(ns.Coll, "tmp") {
		return catalog.Namespace{}, false
	}
	_, name, ok := strings.Cut(ns.Coll, convertToCapped)
	if !ok || name == "" {
		return catalog.Namespace{}, false
	}
	return catalog.Namespace{DB: ns.DB, Coll: name}, true
}

// userNamespace returns the namespace a write on ns changes as a user
// sees it: the time-series collection for its buckets, ns itself
// otherwise. Writes on system.views are judged by the view they define
// (see viewNamespace).
func userNamespace(ns catalog.Namespace) catalog.Namespace {
	if ts, ok := BucketsOf(ns); ok {
		return ts
	}
	return ns
}
