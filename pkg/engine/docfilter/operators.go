package docfilter

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// arrayArg reads an operator's array argument.
func arrayArg(arg bson.RawValue) ([]bson.RawValue, error) {
	arr, ok := arg.ArrayOK()
	if !ok {
		return nil, fmt.Errorf("takes an array, not %s", arg.Type)
	}
	return arr.Values()
}

// compileIn reads the list of $in or $nin.
func compileIn(arg bson.RawValue) (inSet, error) {
	vals, err := arrayArg(arg)
	if err != nil {
		return inSet{}, err
	}
	var set inSet
	for i, v := range vals {
		switch v.Type {
		case bson.TypeRegex:
			p, o := v.Regex()
			r, err := compileRegex(p, o)
			if err != nil {
				return inSet{}, fmt.Errorf("%d: %w", i, err)
			}
			set.regexes = append(set.regexes, r)
		case bson.TypeUndefined:
			return inSet{}, fmt.Errorf("%d: cannot compare with undefined; use null", i)
		default:
			if _, ok := isOperatorDoc(v); ok {
				return inSet{}, fmt.Errorf("%d: cannot hold an operator; list plain values", i)
			}
			set.values = append(set.values, v)
		}
	}
	return set, nil
}

// typeCodes maps the $type aliases to BSON types ("number" is all four
// numeric types).
var typeCodes = map[string][]bson.Type{
	"double": {bson.TypeDouble}, "string": {bson.TypeString}, "object": {bson.TypeEmbeddedDocument},
	"array": {bson.TypeArray}, "binData": {bson.TypeBinary}, "undefined": {bson.TypeUndefined},
	"objectId": {bson.TypeObjectID}, "bool": {bson.TypeBoolean}, "date": {bson.TypeDateTime},
	"null": {bson.TypeNull}, "regex": {bson.TypeRegex}, "dbPointer": {bson.TypeDBPointer},
	"javascript": {bson.TypeJavaScript}, "symbol": {bson.TypeSymbol},
	"javascriptWithScope": {bson.TypeCodeWithScope}, "int": {bson.TypeInt32},
	"timestamp": {bson.TypeTimestamp}, "long": {bson.TypeInt64}, "decimal": {bson.TypeDecimal128},
	"minKey": {bson.TypeMinKey}, "maxKey": {bson.TypeMaxKey},
	"number": {bson.TypeInt32, bson.TypeInt64, bson.TypeDouble, bson.TypeDecimal128},
}

// compileType reads $type: an alias, a type number, or an array of them.
func compileType(arg bson.RawValue) (cond, error) {
	vals := []bson.RawValue{arg}
	if arg.Type == bson.TypeArray {
		var err error
		if vals, err = arrayArg(arg); err != nil {
			return nil, err
		}
		if len(vals) == 0 {
			return nil, errors.New("takes at least one type")
		}
	}
	set := map[bson.Type]bool{}
	for _, v := range vals {
		if s, ok := v.StringValueOK(); ok {
			ts, ok := typeCodes[s]
			if !ok {
				return nil, fmt.Errorf("unknown type name %q; use a name such as \"string\", \"number\" or \"objectId\"", s)
			}
			for _, t := range ts {
				set[t] = true
			}
			continue
		}
		n, ok := intValue(v)
		if !ok || !isWhole(v) || (n != -1 && n != 127 && (n < 1 || n > 19)) {
			return nil, fmt.Errorf("%s is not a BSON type; use a type name or number (1 to 19, -1, 127)", v)
		}
		set[bson.Type(byte(n))] = true
	}
	return leaf{pred: func(v bson.RawValue) bool { return v.Type != 0 && set[v.Type] }, expand: true}, nil
}

// compileRegexOp reads {$regex: pattern, $options: flags}.
func compileRegexOp(arg bson.RawValue, d bson.Raw) (cond, error) {
	var pattern, flags string
	switch arg.Type {
	case bson.TypeString:
		pattern = arg.StringValue()
	case bson.TypeRegex:
		pattern, flags = arg.Regex()
	default:
		return nil, fmt.Errorf("takes a string or a regular expression, not %s", arg.Type)
	}
	if o, err := d.LookupErr("$options"); err == nil {
		s, ok := o.StringValueOK()
		if !ok {
			return nil, errors.New("$options takes a string")
		}
		if flags != "" && s != "" {
			return nil, errors.New("options given twice; put them either in the regular expression or in $options")
		}
		if s != "" {
			flags = s
		}
	}
	r, err := compileRegex(pattern, flags)
	if err != nil {
		return nil, err
	}
	return leaf{pred: r.matches, expand: true}, nil
}

// compileRegex turns a MongoDB (PCRE) regular expression into Go's:
// options i, m and s map to Go's flags, x drops unescaped whitespace and
// # comments, u is the default. Syntax RE2 lacks (look-around,
// back-references) is refused.
func compileRegex(pattern, flags string) (regexMatch, error) {
	var goFlags strings.Builder
	expr := pattern
	for _, f := range flags {
		switch f {
		case 'i', 'm', 's':
			goFlags.WriteRune(f)
		case 'x':
			expr = stripExtended(expr)
		case 'u':
		default:
			return regexMatch{}, fmt.Errorf("regular expression option %q is not supported; use i, m, s, x or u", f)
		}
	}
	if goFlags.Len() > 0 {
		expr = "(?" + goFlags.String() + ")" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return regexMatch{}, fmt.Errorf("regular expression /%s/: %w; rewrite it without look-around or back-references", pattern, err)
	}
	// The server stores options sorted; a regex value compares with them so.
	sorted := []byte(flags)
	slices.Sort(sorted)
	return regexMatch{re: re, pattern: pattern, flags: string(sorted)}, nil
}

// stripExtended removes the whitespace and # comments of an extended
// (x) pattern outside character classes and escapes.
func stripExtended(p string) string {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		ch := p[i]
		switch {
		case ch == '\\' && i+1 < len(p):
			b.WriteByte(ch)
			i++
			b.WriteByte(p[i])
			continue
		case inClass:
			inClass = ch != ']'
		case ch == '[':
			inClass = true
		case ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v':
			continue
		case ch == '#':
			for i < len(p) && p[i] != '\n' {
				i++
			}
			continue
		}
		b.WriteByte(ch)
	}
	return b.String()
}

// compileNot reads $not: a regular expression or an operator document.
func (c *compiler) compileNot(arg bson.RawValue) (cond, error) {
	if arg.Type == bson.TypeRegex {
		p, o := arg.Regex()
		r, err := compileRegex(p, o)
		if err != nil {
			return nil, err
		}
		return notCond{leaf{pred: r.matches, expand: true}}, nil
	}
	d, ok := isOperatorDoc(arg)
	if !ok {
		return nil, errors.New("takes a regular expression or a document of operators such as {$gt: 5}")
	}
	conds, err := c.operators(d)
	if err != nil {
		return nil, err
	}
	return notCond(conds), nil
}

// logicalOps are the operators that make {$elemMatch: {...}} a query on
// the elements' fields even though they start with $.
var logicalOps = map[string]bool{"$and": true, "$or": true, "$nor": true, "$where": true, "$expr": true, "$text": true, "$comment": true, "$jsonSchema": true}

// compileElemMatch reads $elemMatch: operators on each element (the value
// form) or a query on each embedded document (the query form).
func (c *compiler) compileElemMatch(arg bson.RawValue) (cond, error) {
	d, ok := arg.DocumentOK()
	if !ok {
		return nil, errors.New("takes a document")
	}
	if od, ok := isOperatorDoc(arg); ok && !logicalOps[od.Index(0).Key()] {
		conds, err := c.operators(od)
		if err != nil {
			return nil, err
		}
		return leaf{pred: elemMatchValue(conds)}, nil
	}
	q, err := c.document(d, false)
	if err != nil {
		return nil, err
	}
	return leaf{pred: elemMatchDoc(q)}, nil
}

// compileAll reads $all: every listed value (or every $elemMatch) must be
// met; an empty list matches nothing.
func (c *compiler) compileAll(arg bson.RawValue) (cond, error) {
	vals, err := arrayArg(arg)
	if err != nil {
		return nil, err
	}
	if len(vals) == 0 {
		return leaf{pred: func(bson.RawValue) bool { return false }}, nil
	}
	all := make(allCond, 0, len(vals))
	for i, v := range vals {
		if d, ok := isOperatorDoc(v); ok {
			if d.Index(0).Key() != "$elemMatch" {
				return nil, fmt.Errorf("%d: only $elemMatch may be listed in $all", i)
			}
			cd, err := c.compileElemMatch(d.Index(0).Value())
			if err != nil {
				return nil, fmt.Errorf("%d: $elemMatch: %w", i, err)
			}
			all = append(all, cd)
			continue
		}
		cds, err := c.fieldValue(v)
		if err != nil {
			return nil, fmt.Errorf("%d: %w", i, err)
		}
		all = append(all, cds...)
	}
	return all, nil
}

// allCond holds when every part holds, each on its own values.
type allCond []cond

func (a allCond) onPath(doc bson.Raw, p path) bool {
	for _, c := range a {
		if !c.onPath(doc, p) {
			return false
		}
	}
	return true
}

func (a allCond) onValue(v bson.RawValue) bool {
	for _, c := range a {
		if !c.onValue(v) {
			return false
		}
	}
	return true
}

// compileMod reads $mod: [divisor, remainder], both truncated to
// integers as the server does; numbers of the document are truncated too.
func compileMod(arg bson.RawValue) (cond, error) {
	vals, err := arrayArg(arg)
	if err != nil {
		return nil, err
	}
	if len(vals) != 2 {
		return nil, errors.New("takes [divisor, remainder]")
	}
	div, ok1 := intValue(vals[0])
	rem, ok2 := intValue(vals[1])
	if !ok1 || !ok2 {
		return nil, errors.New("takes two finite numbers: [divisor, remainder]")
	}
	if div == 0 {
		return nil, errors.New("divisor cannot be 0")
	}
	return leaf{pred: func(v bson.RawValue) bool {
		n, ok := intValue(v)
		return ok && n%div == rem
	}, expand: true}, nil
}
