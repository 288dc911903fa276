package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestObservabilityDoc: docs/observability.md lists every panel of the
// dashboard under its title, with its queries as they are.
func TestObservabilityDoc(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	_, d := readDashboard(t)
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		i := strings.Index(doc, "\n### "+p.Title+"\n")
		if i < 0 {
			t.Errorf("docs/observability.md has no section ### %s", p.Title)
			continue
		}
		section := doc[i+1:]
		if j := strings.Index(section[4:], "\n##"); j >= 0 {
			section = section[:j+4]
		}
		for _, tg := range p.Targets {
			if !strings.Contains(section, tg.Expr) {
				t.Errorf("docs/observability.md ### %s does not show the query %s", p.Title, tg.Expr)
			}
		}
	}
}
