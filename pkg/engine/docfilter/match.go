package docfilter

import (
	"math"
	"regexp"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/bsonorder"
)

// node is a compiled query (or part of one) tested on a whole document.
type node interface {
	match(doc bson.Raw) bool
}

// andNode matches when every part does; empty, it matches everything.
type andNode []node

func (n andNode) match(doc bson.Raw) bool {
	for _, c := range n {
		if !c.match(doc) {
			return false
		}
	}
	return true
}

// orNode matches when a part does.
type orNode []node

func (n orNode) match(doc bson.Raw) bool {
	for _, c := range n {
		if c.match(doc) {
			return true
		}
	}
	return false
}

// norNode matches when no part does.
type norNode []node

func (n norNode) match(doc bson.Raw) bool { return !orNode(n).match(doc) }

// fieldNode tests the values a path reaches.
type fieldNode struct {
	path path
	cond cond
}

func (n fieldNode) match(doc bson.Raw) bool { return n.cond.onPath(doc, n.path) }

// cond is a condition on a field. onPath tests the values a path reaches
// in a document (a field of the query); onValue tests one value, as the
// operators inside {$elemMatch: {$gt: ...}} test each array element.
type cond interface {
	onPath(doc bson.Raw, p path) bool
	onValue(v bson.RawValue) bool
}

// leaf holds when some value the path reaches satisfies pred. expand says
// whether an array at the end of the path offers its elements as well as
// itself.
type leaf struct {
	pred   func(v bson.RawValue) bool
	expand bool
}

func (l leaf) onPath(doc bson.Raw, p path) bool { return walk(doc, p, l.expand, l.pred) }
func (l leaf) onValue(v bson.RawValue) bool     { return l.pred(v) }

// notCond negates a conjunction: $ne, $nin, {$exists: false} and $not.
// On a path it holds when no value satisfies them all together as the
// positive form would; a missing field satisfies it.
type notCond []cond

func (n notCond) onPath(doc bson.Raw, p path) bool {
	for _, c := range n {
		if !c.onPath(doc, p) {
			return true
		}
	}
	return false
}

func (n notCond) onValue(v bson.RawValue) bool {
	for _, c := range n {
		if !c.onValue(v) {
			return true
		}
	}
	return false
}

// cmpOp is one of the comparison operators.
type cmpOp int

const (
	opEQ cmpOp = iota
	opLT
	opLTE
	opGT
	opGTE
)

var (
	rankNull      = bsonorder.Bracket(bson.TypeNull)
	rankUndefined = bsonorder.Bracket(bson.TypeUndefined)
)

// canonical is a value's type bracket; missing shares Undefined's, as the
// server's EOO does.
func canonical(t bson.Type) int {
	if t == 0 {
		return rankUndefined
	}
	return bsonorder.Bracket(t)
}

// compare applies op to v (the document's value) and rhs (the query's),
// as the server's ComparisonMatchExpression does: values of different type
// brackets never match, except that null matches missing (and undefined)
// for $eq, $lte and $gte, and MinKey and MaxKey bound every value; NaN
// equals NaN and is neither below nor above anything.
func compare(op cmpOp, v, rhs bson.RawValue) bool {
	cv, cr := canonical(v.Type), canonical(rhs.Type)
	if cv != cr {
		if (cv == rankNull && cr == rankUndefined) || (cv == rankUndefined && cr == rankNull) {
			return op == opEQ || op == opLTE || op == opGTE
		}
		switch rhs.Type {
		case bson.TypeMaxKey:
			return op == opLT || op == opLTE
		case bson.TypeMinKey:
			return op == opGT || op == opGTE
		}
		return false
	}
	if nv, nr := isNaN(v), isNaN(rhs); nv || nr {
		return nv && nr && op != opLT && op != opGT
	}
	c := bsonorder.Compare(v, rhs)
	switch op {
	case opLT:
		return c < 0
	case opLTE:
		return c <= 0
	case opGT:
		return c > 0
	case opGTE:
		return c >= 0
	}
	return c == 0
}

func isNaN(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeDouble:
		f, ok := v.DoubleOK()
		return ok && math.IsNaN(f)
	case bson.TypeDecimal128:
		d, ok := v.Decimal128OK()
		return ok && d.IsNaN()
	}
	return false
}

// regexMatch is a regular expression of the query: it matches strings and
// symbols it finds in, and a regex value with the same pattern and flags.
type regexMatch struct {
	re             *regexp.Regexp
	pattern, flags string
}

func (r regexMatch) matches(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeString:
		s, ok := v.StringValueOK()
		return ok && r.re.MatchString(s)
	case bson.TypeSymbol:
		s, ok := v.SymbolOK()
		return ok && r.re.MatchString(s)
	case bson.TypeRegex:
		p, f, ok := v.RegexOK()
		return ok && p == r.pattern && f == r.flags
	}
	return false
}

// inSet is the list of $in: values compared for equality and regular
// expressions.
type inSet struct {
	values  []bson.RawValue
	regexes []regexMatch
}

func (s inSet) matches(v bson.RawValue) bool {
	for _, rhs := range s.values {
		if compare(opEQ, v, rhs) {
			return true
		}
	}
	for _, r := range s.regexes {
		if r.matches(v) {
			return true
		}
	}
	return false
}

// elemMatchDoc is {$elemMatch: {<query>}}: an array with an embedded
// document (or array) that matches the query.
func elemMatchDoc(q node) func(bson.RawValue) bool {
	return func(v bson.RawValue) bool {
		if v.Type != bson.TypeArray {
			return false
		}
		for _, e := range arrayValues(v) {
			if (e.Type == bson.TypeEmbeddedDocument || e.Type == bson.TypeArray) && q.match(bson.Raw(e.Value)) {
				return true
			}
		}
		return false
	}
}

// elemMatchValue is {$elemMatch: {$op: ...}}: an array with an element
// that satisfies every operator.
func elemMatchValue(conds []cond) func(bson.RawValue) bool {
	return func(v bson.RawValue) bool {
		if v.Type != bson.TypeArray {
			return false
		}
	elems:
		for _, e := range arrayValues(v) {
			for _, c := range conds {
				if !c.onValue(e) {
					continue elems
				}
			}
			return true
		}
		return false
	}
}

// intValue reads a number as the server's $mod and $size do: doubles and
// decimals truncated toward zero. NaN, infinities and values beyond int64
// give false.
func intValue(v bson.RawValue) (int64, bool) {
	var f float64
	switch v.Type {
	case bson.TypeInt32:
		return int64(v.Int32()), true
	case bson.TypeInt64:
		return v.Int64(), true
	case bson.TypeDouble:
		f = v.Double()
	case bson.TypeDecimal128:
		d := v.Decimal128()
		if d.IsNaN() || d.IsInf() != 0 {
			return 0, false
		}
		b, exp, err := d.BigInt()
		if err != nil {
			return 0, false
		}
		f = float64FromDecimal(b.String(), exp)
	default:
		return 0, false
	}
	if math.IsNaN(f) || f >= math.MaxInt64 || f < math.MinInt64 {
		return 0, false
	}
	return int64(f), true
}
