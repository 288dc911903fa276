package progress

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
)

// Line prints the newest progress of verify.Run to w at a fixed
// interval.
type Line struct {
	w     io.Writer
	mode  config.VerifyMode
	index map[string]int
	n     int
	began time.Time
	mu    sync.Mutex
	ns    string
	pass  string
	done  int64
	total int64
}

// NewLine returns a Line for verifying colls in mode.
func NewLine(w io.Writer, colls []catalog.Collection, mode config.VerifyMode) *Line {
	p := &Line{w: w, mode: mode, index: make(map[string]int, len(colls)), n: len(colls), began: time.Now()}
	for i, c := range colls {
		p.index[c.Source.String()] = i + 1
	}
	return p
}

// Update is the verify.Options.Progress callback.
func (p *Line) Update(ns, pass string, done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ns != p.ns || pass != p.pass {
		p.ns, p.pass, p.done, p.total = ns, pass, 0, 0
	}
	p.done, p.total = max(p.done, done), max(p.total, total)
}

// Start prints a line every interval until the returned stop is called.
func (p *Line) Start(interval time.Duration) (stop func()) {
	ticker := time.NewTicker(interval)
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-quit:
				return
			case <-ticker.C:
				p.print()
			}
		}
	}()
	return func() {
		ticker.Stop()
		close(quit)
		<-finished
	}
}

func (p *Line) print() {
	fmt.Fprint(p.w, p.text(time.Since(p.began)))
}

// text is the progress line after elapsed, or nothing before the first
// namespace.
func (p *Line) text(elapsed time.Duration) string {
	p.mu.Lock()
	ns, pass, done, total := p.ns, p.pass, p.done, p.total
	p.mu.Unlock()
	if ns == "" {
		return ""
	}
	docs := fmt.Sprintf("%d documents", done)
	if total > 0 {
		docs = fmt.Sprintf("%d of about %d documents", done, total)
	}
	switch {
	case p.mode == config.VerifyCount || pass == verify.PassCount:
		docs = "counting documents"
	case pass == verify.PassHash:
		docs = "hashing source and target: " + docs
	case pass == verify.PassDiff:
		docs = "the hashes differ; reading both sides again to list the documents that differ: " + docs
	case pass == verify.PassSampleIDs:
		docs = "picking the sample from the source's _ids: " + docs
	case pass == verify.PassSample:
		docs = "comparing sampled documents: " + docs
	}
	return fmt.Sprintf("verify: %s (%d of %d): %s, %s elapsed\n", ns, p.index[ns], p.n, docs, elapsed.Round(time.Second))
}
