package doclinks

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	// A Markdown link or image: [text](target) or [text](target "title").
	linkRe = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// An HTML anchor a heading may not give: <a id="x"> or <a name="x">.
	htmlAnchorRe = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	codeSpanRe   = regexp.MustCompile("`[^`\n]*`")
)

// TestRelativeLinks fails on a relative link whose file does not exist or
// whose fragment is no heading of that file, naming the file, the line and
// the link.
func TestRelativeLinks(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files := markdownFiles(t, root)
	if len(files) < 5 {
		t.Fatalf("found %d Markdown files under %s: is the repository root right?", len(files), root)
	}
	anchors := map[string]map[string]bool{}
	for _, file := range files {
		for i, line := range proseLines(t, file) {
			for _, m := range linkRe.FindAllStringSubmatch(line, -1) {
				if problem := check(file, m[1], anchors); problem != "" {
					rel, _ := filepath.Rel(root, file)
					t.Errorf("%s:%d: link %s: %s", rel, i+1, m[1], problem)
				}
			}
		}
	}
}

// check returns what is wrong with one link target of file, or "".
func check(file, target string, anchors map[string]map[string]bool) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, frag, _ := strings.Cut(target, "#")
	dest := file
	if path != "" {
		dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
		if _, err := os.Stat(dest); err != nil {
			return "no such file"
		}
	}
	if frag == "" || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	if anchors[dest] == nil {
		anchors[dest] = headingAnchors(dest)
	}
	if !anchors[dest][frag] {
		return "no heading #" + frag + " in " + filepath.Base(dest)
	}
	return ""
}

// markdownFiles lists the .md files under root, leaving out bin/ (the
// shared build assets) and dot directories.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || p == filepath.Join(root, "bin")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// proseLines returns the file's lines with fenced code blocks blanked and
// code spans removed, so that code that looks like a link is not taken
// for one; line numbers are kept.
func proseLines(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
			continue
		}
		lines[i] = codeSpanRe.ReplaceAllString(l, "")
	}
	return lines
}

// headingAnchors returns the fragments GitHub gives the file's headings
// (a repeated heading gets -1, -2, ...) and its HTML anchors.
func headingAnchors(file string) map[string]bool {
	out := map[string]bool{}
	b, err := os.ReadFile(file)
	if err != nil {
		return out
	}
	seen := map[string]int{}
	fenced := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
		}
		for _, m := range htmlAnchorRe.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		if fenced || !strings.HasPrefix(l, "#") {
			continue
		}
		slug := slugify(strings.TrimLeft(l, "#"))
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// slugify is GitHub's heading fragment: lower case, letters, digits,
// '-' and '_' kept, spaces turned into '-', everything else dropped.
func slugify(heading string) string {
	var sb strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			sb.WriteRune(r)
		case r == ' ':
			sb.WriteRune('-')
		}
	}
	return sb.String()
}
