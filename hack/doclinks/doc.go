// Package doclinks checks that every relative link in the repository's
// Markdown files (README.md, docs/*.md, ...) names a file that exists and,
// with a #fragment, a heading of that file; it holds only that test.
package doclinks
