package progress

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
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
func (p *Line) Update(ns string, done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ns != p.ns {
		p.ns, p.done, p.total = ns, 0, 0
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
	p.mu.Lock()
	ns, done, total := p.ns, p.done, p.total
	p.mu.Unlock()
	if ns == "" {
		return
	}
	var docs string
	switch {
	case p.mode == config.VerifyCount:
		docs = "counting documents"
	case total > 0:
		docs = fmt.Sprintf("%d of about %d documents read", done, total)
	default:
		docs = fmt.Sprintf("%d documents read", done)
	}
	fmt.Fprintf(p.w, "verify: %s (%d of %d): %s, %s elapsed\n",
		ns, p.index[ns], p.n, docs, time.Since(p.began).Round(time.Second))
}
