package docfilter

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// ErrUnsupported is wrapped by Compile's errors for a query operator the
// engine cannot evaluate on a single document.
var ErrUnsupported = errors.New("operator cannot be evaluated on a document")

// Filter is a compiled query. It is safe for concurrent use.
type Filter struct {
	query  bson.Raw
	root   node
	fields []string
}

// Compile parses a MongoDB query document. It supports implicit equality,
// $eq $ne $gt $gte $lt $lte $in $nin $exists $type $regex (with $options)
// $not $elemMatch $size $all $mod on fields, and $and $or $nor (and
// $comment, ignored) at the top. Any other operator is refused with an
// error naming it; operators that need more than the document ($where,
// $expr, $text, geo queries, $jsonSchema) wrap ErrUnsupported.
func Compile(query bson.Raw) (*Filter, error) {
	if err := query.Validate(); err != nil {
		return nil, fmt.Errorf("query is not a valid BSON document: %w", err)
	}
	c := compiler{fields: map[string]bool{}}
	root, err := c.document(query, true)
	if err != nil {
		return nil, err
	}
	fields := make([]string, 0, len(c.fields))
	for f := range c.fields {
		fields = append(fields, f)
	}
	slices.Sort(fields)
	return &Filter{query: slices.Clone(query), root: root, fields: fields}, nil
}

// Match reports whether doc matches the query. It fails only on a
// document that is not valid BSON.
func (f *Filter) Match(doc bson.Raw) (bool, error) {
	if err := doc.Validate(); err != nil {
		return false, fmt.Errorf("match: document is not valid BSON: %w", err)
	}
	return f.root.match(doc), nil
}

// Fields returns the top-level fields the query reads, sorted: an update
// that changes none of them cannot change whether a document matches.
func (f *Filter) Fields() []string { return slices.Clone(f.fields) }

// Reads reports whether the query reads top-level field name (one of
// Fields), without allocating.
func (f *Filter) Reads(name string) bool {
	_, found := slices.BinarySearch(f.fields, name)
	return found
}

// Query returns the query document Compile was given, for a server's find.
func (f *Filter) Query() bson.Raw { return f.query }

// compiler holds what Compile gathers on the way.
type compiler struct {
	fields map[string]bool
}

// Operators refused because they need more than one document, with what
// to do instead.
var refused = map[string]string{
	"$where":         "it runs JavaScript on the server; express the condition with query operators such as $eq, $in and $regex",
	"$expr":          "aggregation expressions (and $function inside them) are not evaluated by the engine; compare fields with query operators on constants instead",
	"$function":      "it runs JavaScript on the server; express the condition with query operators",
	"$text":          "it needs the collection's text index; use $regex on the field instead",
	"$jsonSchema":    "schema validation is not evaluated by the engine; use $type, $exists and comparisons instead",
	"$near":          "geospatial queries are not evaluated by the engine; filter on plain fields (for example a region code) instead",
	"$nearSphere":    "geospatial queries are not evaluated by the engine; filter on plain fields (for example a region code) instead",
	"$geoWithin":     "geospatial queries are not evaluated by the engine; filter on plain fields (for example a region code) instead",
	"$geoIntersects": "geospatial queries are not evaluated by the engine; filter on plain fields (for example a region code) instead",
	"$within":        "geospatial queries are not evaluated by the engine; filter on plain fields (for example a region code) instead",
	"$sampleRate":    "a random sample differs between the copy and the replay; filter on a field value instead",
}

// unsupported and unknown are the errors for an operator; the caller
// names it.
func unsupported(op string) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, refused[op])
}

func unknown() error {
	return errors.New("unknown or unsupported query operator; use $eq $ne $gt $gte $lt $lte $in $nin $exists $type $regex $not $elemMatch $size $all $mod $and $or $nor")
}

// document compiles a query document. record says whether its field names
// are top-level fields of the documents (not inside $elemMatch).
func (c *compiler) document(q bson.Raw, record bool) (node, error) {
	elems, err := q.Elements()
	if err != nil {
		return nil, err
	}
	and := make(andNode, 0, len(elems))
	for _, e := range elems {
		key, v := e.Key(), e.Value()
		if strings.HasPrefix(key, "$") {
			n, err := c.logical(key, v, record)
			if err != nil {
				return nil, err
			}
			if n != nil {
				and = append(and, n)
			}
			continue
		}
		if record {
			c.fields[strings.SplitN(key, ".", 2)[0]] = true
		}
		conds, err := c.fieldValue(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		p := splitPath(key)
		for _, cd := range conds {
			and = append(and, fieldNode{path: p, cond: cd})
		}
	}
	if len(and) == 1 {
		return and[0], nil
	}
	return and, nil
}

// logical compiles a top-level operator: $and, $or, $nor, or $comment
// (nil: it selects nothing).
func (c *compiler) logical(op string, v bson.RawValue, record bool) (node, error) {
	switch op {
	case "$comment":
		return nil, nil
	case "$and", "$or", "$nor":
	default:
		if _, ok := refused[op]; ok {
			return nil, fmt.Errorf("%s: %w", op, unsupported(op))
		}
		return nil, fmt.Errorf("%s: %w", op, unknown())
	}
	arr, ok := v.ArrayOK()
	if !ok {
		return nil, fmt.Errorf("%s: takes an array of query documents", op)
	}
	vals, err := arr.Values()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if len(vals) == 0 {
		return nil, fmt.Errorf("%s: takes a non-empty array of query documents", op)
	}
	parts := make([]node, 0, len(vals))
	for i, pv := range vals {
		d, ok := pv.DocumentOK()
		if !ok {
			return nil, fmt.Errorf("%s.%d: takes a query document, not %s", op, i, pv.Type)
		}
		n, err := c.document(d, record)
		if err != nil {
			return nil, fmt.Errorf("%s.%d: %w", op, i, err)
		}
		parts = append(parts, n)
	}
	switch op {
	case "$or":
		return orNode(parts), nil
	case "$nor":
		return norNode(parts), nil
	}
	return andNode(parts), nil
}

// isOperatorDoc reports whether v is {$op: ...}: a document whose first
// field starts with $ (otherwise it is a value to compare with).
func isOperatorDoc(v bson.RawValue) (bson.Raw, bool) {
	d, ok := v.DocumentOK()
	if !ok {
		return nil, false
	}
	first, err := d.IndexErr(0)
	if err != nil || !strings.HasPrefix(first.Key(), "$") {
		return nil, false
	}
	return d, true
}

// fieldValue compiles what a query gives a field: operators, a regular
// expression, or a value to compare with.
func (c *compiler) fieldValue(v bson.RawValue) ([]cond, error) {
	if d, ok := isOperatorDoc(v); ok {
		return c.operators(d)
	}
	if v.Type == bson.TypeRegex {
		p, o := v.Regex()
		r, err := compileRegex(p, o)
		if err != nil {
			return nil, err
		}
		return []cond{leaf{pred: r.matches, expand: true}}, nil
	}
	l, err := cmpLeaf(opEQ, v)
	if err != nil {
		return nil, err
	}
	return []cond{l}, nil
}

func cmpLeaf(op cmpOp, rhs bson.RawValue) (leaf, error) {
	if rhs.Type == bson.TypeUndefined {
		return leaf{}, errors.New("cannot compare with undefined; use null")
	}
	return leaf{pred: func(v bson.RawValue) bool { return compare(op, v, rhs) }, expand: true}, nil
}

var cmpOps = map[string]cmpOp{"$eq": opEQ, "$lt": opLT, "$lte": opLTE, "$gt": opGT, "$gte": opGTE}

// operators compiles {$op: arg, ...} on one field; every operator must
// hold.
func (c *compiler) operators(d bson.Raw) ([]cond, error) {
	elems, err := d.Elements()
	if err != nil {
		return nil, err
	}
	var conds []cond
	regexSeen := false
	for _, e := range elems {
		op, arg := e.Key(), e.Value()
		cd, err := c.operator(op, arg, d)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if op == "$regex" {
			regexSeen = true
		}
		if cd != nil {
			conds = append(conds, cd)
		}
	}
	if _, err := d.LookupErr("$options"); err == nil && !regexSeen {
		return nil, errors.New("$options: needs a $regex beside it")
	}
	return conds, nil
}

// operator compiles one field operator; d is the operator document it
// came from ($regex reads $options there). $options itself gives nil.
func (c *compiler) operator(op string, arg bson.RawValue, d bson.Raw) (cond, error) {
	if cop, ok := cmpOps[op]; ok {
		return cmpLeaf(cop, arg)
	}
	switch op {
	case "$ne":
		if arg.Type == bson.TypeRegex {
			return nil, errors.New("cannot take a regular expression; use {$not: /.../}")
		}
		l, err := cmpLeaf(opEQ, arg)
		return notCond{l}, err
	case "$in", "$nin":
		set, err := compileIn(arg)
		if err != nil {
			return nil, err
		}
		l := leaf{pred: set.matches, expand: true}
		if op == "$nin" {
			return notCond{l}, nil
		}
		return l, nil
	case "$exists":
		l := leaf{pred: func(v bson.RawValue) bool { return v.Type != 0 }}
		if !truthy(arg) {
			return notCond{l}, nil
		}
		return l, nil
	case "$type":
		return compileType(arg)
	case "$regex":
		return compileRegexOp(arg, d)
	case "$options":
		return nil, nil
	case "$not":
		return c.compileNot(arg)
	case "$elemMatch":
		return c.compileElemMatch(arg)
	case "$size":
		n, ok := intValue(arg)
		if !ok || !isWhole(arg) || n < 0 {
			return nil, errors.New("takes a whole number, zero or more")
		}
		return leaf{pred: func(v bson.RawValue) bool {
			return v.Type == bson.TypeArray && int64(len(arrayValues(v))) == n
		}}, nil
	case "$all":
		return c.compileAll(arg)
	case "$mod":
		return compileMod(arg)
	}
	if _, ok := refused[op]; ok {
		return nil, unsupported(op)
	}
	return nil, unknown()
}

// truthy is the server's trueValue: false, zero, null and undefined are
// false, anything else true.
func truthy(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeBoolean:
		return v.Boolean()
	case bson.TypeNull, bson.TypeUndefined:
		return false
	case bson.TypeInt32, bson.TypeInt64, bson.TypeDouble, bson.TypeDecimal128:
		n, ok := intValue(v)
		return !ok || n != 0 || !isWhole(v)
	}
	return true
}

// isWhole reports whether a number has no fractional part.
func isWhole(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeInt32, bson.TypeInt64:
		return true
	case bson.TypeDouble:
		f := v.Double()
		return f == float64(int64(f))
	case bson.TypeDecimal128:
		b, exp, err := v.Decimal128().BigInt()
		if err != nil {
			return false
		}
		f := float64FromDecimal(b.String(), exp)
		return f == float64(int64(f))
	}
	return false
}

func float64FromDecimal(digits string, exp int) float64 {
	f, _ := strconv.ParseFloat(digits+"e"+strconv.Itoa(exp), 64)
	return f
}
