package e2e

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// fieldCase is one bad value for one field of the task model.
type fieldCase struct {
	path  []string // JSON names from the top, a list of structs as "name[]"
	value string   // YAML for the field
	what  string
}

// fieldCases returns, for every field of the task model (config.Task, by
// its JSON names), a value of the wrong type and, for numbers, a negative
// one; and for each mapping, an unknown key. A field added to the model is
// covered without editing the test.
func fieldCases() []fieldCase {
	var out []fieldCase
	for _, f := range testutil.ModelFields(reflect.TypeFor[config.Task]()) {
		p := f.Path
		list := strings.HasSuffix(p[len(p)-1], "[]")
		switch f.Kind {
		case reflect.Struct:
			if !list {
				out = append(out, fieldCase{p, "7", "a number for a mapping"})
			}
			out = append(out, fieldCase{append(slices.Clone(p), "noSuchField"), "1", "an unknown key"})
		case reflect.Slice:
			out = append(out, fieldCase{p, "7", "a number for a list"})
		case reflect.String:
			out = append(out, fieldCase{p, "{a: 1}", "a mapping for a string"})
		case reflect.Bool:
			out = append(out, fieldCase{p, "maybe", "a word for true or false"})
		case reflect.Int:
			out = append(out, fieldCase{p, "many", "a word for a number"}, fieldCase{p, "-1", "a negative number"})
		}
	}
	return out
}

// yaml renders a valid task with one field set to value (nested mappings
// in flow style, a list of mappings for "name[]").
func (c fieldCase) yaml(src, dst string) string {
	v := c.value
	for i := len(c.path) - 1; i >= 0; i-- {
		name, list := strings.CutSuffix(c.path[i], "[]")
		switch {
		case i == len(c.path)-1:
			v = name + ": " + v
		case list:
			v = name + ": [{" + v + "}]"
		default:
			v = name + ": {" + v + "}"
		}
	}
	top, _, _ := strings.Cut(v, ":")
	base := map[string]string{
		"name":   "name: bad-field",
		"mode":   "mode: full",
		"source": fmt.Sprintf("source: {uri: %q}", src),
		"target": fmt.Sprintf("target: {uri: %q}", dst),
	}
	var b strings.Builder
	for _, k := range []string{"name", "mode", "source", "target"} {
		if k == top {
			// Merge into the endpoint's own mapping, keeping its uri.
			if k == "source" || k == "target" {
				uri := map[string]string{"source": src, "target": dst}[k]
				inner := strings.TrimSuffix(strings.TrimPrefix(v, k+": {"), "}")
				if strings.HasPrefix(v, k+": {") && !strings.HasPrefix(inner, "uri:") {
					fmt.Fprintf(&b, "%s: {uri: %q, %s}\n", k, uri, inner)
					continue
				}
			}
			b.WriteString(v + "\n")
			continue
		}
		b.WriteString(base[k] + "\n")
	}
	if _, ok := base[top]; !ok {
		b.WriteString(v + "\n")
	}
	return b.String()
}

// pattern matches the field's path in a message: its names in order, with
// an optional list index after a list.
func (c fieldCase) pattern() *regexp.Regexp {
	parts := make([]string, len(c.path))
	for i, p := range c.path {
		name, list := strings.CutSuffix(p, "[]")
		parts[i] = regexp.QuoteMeta(name)
		if list {
			parts[i] += `(\[\d+\])?`
		}
	}
	return regexp.MustCompile(`(^|\W)` + strings.Join(parts, `\.`) + `\b`)
}

// TestBadInputEveryField runs `ferry run` on a task file with one field of
// the task model wrong, for every field: a value of the wrong type, a
// negative number, an unknown key in every mapping. Each must exit 1 with a
// message naming the field, and write nothing to the target.
func TestBadInputEveryField(t *testing.T) {
	bin := ferryBinary(t)
	src, dst := testserver.Start(t), testserver.Start(t)
	servers := map[string]*mongo.Client{"source": src.MustClient(t), "target": dst.MustClient(t)}
	before := databases(t, servers)
	cases := fieldCases()
	for _, c := range cases {
		name := strings.Join(c.path, ".") + ": " + c.what
		t.Run(name, func(t *testing.T) {
			yaml := c.yaml(src.URI, dst.URI)
			_, stderr, code := runFerry(t, bin, writeFile(t, yaml), nil)
			if code != 1 {
				t.Errorf("exit code %d, want 1\ntask:\n%s\nstderr:\n%s", code, yaml, stderr)
			}
			if !c.pattern().MatchString(stderr) {
				t.Errorf("the message does not name %s\ntask:\n%s\nstderr:\n%s", strings.Join(c.path, "."), yaml, stderr)
			}
		})
	}
	if after := databases(t, servers); !reflect.DeepEqual(before, after) {
		t.Errorf("databases changed from %v to %v", before, after)
	}
	t.Logf("%d cases over the task model", len(cases))
}
