package fullsync

import (
	"slices"
	"sync"
	"time"

	"github.com/mongoferry/mongoferry/pkg/engine/sink"
)

// Status is a snapshot of a full copy's progress.
type Status struct {
	// Stage is what the copy is doing: planning <ns>, copying, building
	// indexes, done.
	Stage      string            `json:"stage"`
	Namespaces []NamespaceStatus `json:"namespaces"`
	// EstimatedDocuments is the source's document count when planned.
	EstimatedDocuments int64 `json:"estimatedDocuments"`
	// Documents and Bytes are on the target, this run and earlier ones,
	// written by every process that shares the copy (fullSync.workers):
	// the task's figures, in each of its processes.
	Documents int64 `json:"documents"`
	Bytes     int64 `json:"bytes"`
	// CopiedThisRun and CopiedBytesThisRun are what this process wrote
	// in this run: its own share.
	CopiedThisRun      int64   `json:"copiedThisRun"`
	CopiedBytesThisRun int64   `json:"copiedBytesThisRun"`
	Percent            float64 `json:"percent"`
	// DocsPerSecond and BytesPerSecond are the task's rate in this run:
	// what this process wrote and the ranges other processes finished,
	// over the time since this process started its copy.
	DocsPerSecond  float64 `json:"docsPerSecond"`
	BytesPerSecond float64 `json:"bytesPerSecond"`
	// ETASeconds is the estimated time left at that rate, -1 when
	// unknown.
	ETASeconds        float64 `json:"etaSeconds"`
	Ranges            int     `json:"ranges"`
	RangesDone        int     `json:"rangesDone"`
	Overwritten       int64   `json:"overwritten"`
	Skipped           int64   `json:"skipped"`
	Retries           int64   `json:"retries"`
	BufferedBytes     int64   `json:"bufferedBytes"`
	PeakBufferedBytes int64   `json:"peakBufferedBytes"`
	// MaxBytes is cache.maxBytes: the ceiling on document bytes in memory
	// anywhere in the copy. QueueBudgetBytes is the part of it queued
	// documents (BufferedBytes) may take; the rest is one batch per reader
	// (its cursor buffer) and per writer (its encoded request).
	MaxBytes         int64     `json:"maxBytes"`
	QueueBudgetBytes int64     `json:"queueBudgetBytes"`
	StartedAt        time.Time `json:"startedAt"`
	// FirstDocumentAt is when this run wrote its first document to the
	// target (zero before).
	FirstDocumentAt time.Time `json:"firstDocumentAt,omitzero"`
	// ElapsedSeconds is the copy's duration (planning, copying and index
	// builds), frozen once it is done.
	ElapsedSeconds float64 `json:"elapsedSeconds"`
}

// NamespaceStatus is one namespace's copy progress.
type NamespaceStatus struct {
	NS                 string  `json:"ns"`
	Target             string  `json:"target"`
	EstimatedDocuments int64   `json:"estimatedDocuments"`
	Documents          int64   `json:"documents"`
	Bytes              int64   `json:"bytes"`
	Percent            float64 `json:"percent"`
	Ranges             int     `json:"ranges"`
	RangesDone         int     `json:"rangesDone"`
	Done               bool    `json:"done"`
	// DocsPerSecond is this namespace's copy rate in this run, from its
	// first written batch to now (or to its last range).
	DocsPerSecond float64 `json:"docsPerSecond"`
	// ETASeconds is the estimated time left for this namespace at its own
	// rate: 0 once done, -1 while unknown (nothing written yet this run).
	ETASeconds float64 `json:"etaSeconds"`
}

type progress struct {
	mu       sync.Mutex
	stage    string
	started  time.Time
	finished time.Time
	ns       map[string]*nsProgress
	thisRun  int64
	bytesRun int64
	// othersRun and othersBytes are the ranges other processes finished
	// during this run.
	othersRun, othersBytes int64
	over                   int64
	skipped                int64
	retries                int64
	// firstWrite is when this run wrote its first batch.
	firstWrite time.Time
}

type nsProgress struct {
	target                 string
	estimated, docs, bytes int64
	// inFlightDocs counts documents of unfinished ranges already written.
	inFlightDocs, inFlightBytes int64
	ranges, rangesDone          int
	// thisRun counts documents written by this run, from firstWrite
	// until finished; othersRun those of ranges other processes finished
	// during it.
	thisRun, othersRun int64
	firstWrite, finish time.Time
}

func newProgress() *progress { return &progress{ns: map[string]*nsProgress{}, stage: "starting"} }

func (p *progress) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started = time.Now()
}

func (p *progress) setStage(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stage = s
	if s == "done" && p.finished.IsZero() {
		p.finished = time.Now()
	}
}

// startOnce starts the clock unless it runs.
func (p *progress) startOnce() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started.IsZero() {
		p.started = time.Now()
	}
}

// ensureNamespace adds ns unless it is counted already.
func (p *progress) ensureNamespace(ns, target string, estimated int64, ranges int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ns[ns] == nil {
		p.ns[ns] = &nsProgress{target: target, estimated: estimated, ranges: ranges}
	}
}

func (p *progress) addNamespace(ns, target string, estimated int64, ranges int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ns[ns] = &nsProgress{target: target, estimated: estimated, ranges: ranges}
}

func (p *progress) batchWritten(ns string, docs, bytes int64, res sink.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.ns[ns]
	n.inFlightDocs += docs
	n.inFlightBytes += bytes
	if n.firstWrite.IsZero() {
		n.firstWrite = time.Now()
	}
	if p.firstWrite.IsZero() {
		p.firstWrite = n.firstWrite
	}
	n.thisRun += docs
	p.thisRun += docs
	p.bytesRun += bytes
	p.over += res.Overwritten
	p.skipped += res.Skipped
	p.retries += int64(res.Retries)
}

// otherDone counts a range another process finished during this run:
// done, and part of the task's rate.
func (p *progress) otherDone(ns string, docs, bytes int64) {
	p.mu.Lock()
	if n := p.ns[ns]; n != nil {
		n.othersRun += docs
		if n.firstWrite.IsZero() {
			n.firstWrite = p.started
		}
		p.othersRun += docs
		p.othersBytes += bytes
	}
	p.mu.Unlock()
	p.rangeDone(ns, docs, bytes, true)
}

// rangeDone moves a finished range's documents from in flight to done;
// earlier=true for ranges this process did not write (an earlier run's,
// or another process's).
func (p *progress) rangeDone(ns string, docs, bytes int64, earlier bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.ns[ns]
	if n == nil {
		return
	}
	n.rangesDone++
	n.docs += docs
	n.bytes += bytes
	if n.rangesDone == n.ranges {
		n.finish = time.Now()
	}
	if !earlier {
		n.inFlightDocs -= docs
		n.inFlightBytes -= bytes
	}
}

func (p *progress) snapshot() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Status{Stage: p.stage, StartedAt: p.started, ETASeconds: -1,
		CopiedThisRun: p.thisRun, CopiedBytesThisRun: p.bytesRun, Overwritten: p.over, Skipped: p.skipped, Retries: p.retries, FirstDocumentAt: p.firstWrite}
	if !p.started.IsZero() {
		end := p.finished
		if end.IsZero() {
			end = time.Now()
		}
		s.ElapsedSeconds = end.Sub(p.started).Seconds()
	}
	for name, n := range p.ns {
		docs, bytes := n.docs+n.inFlightDocs, n.bytes+n.inFlightBytes
		ns := NamespaceStatus{NS: name, Target: n.target, EstimatedDocuments: n.estimated,
			Documents: docs, Bytes: bytes, Ranges: n.ranges, RangesDone: n.rangesDone,
			Done: n.rangesDone == n.ranges}
		ns.Percent = percent(docs, n.estimated, ns.Done)
		ns.DocsPerSecond, ns.ETASeconds = n.rate(docs)
		s.Namespaces = append(s.Namespaces, ns)
		s.EstimatedDocuments += n.estimated
		s.Documents += docs
		s.Bytes += bytes
		s.Ranges += n.ranges
		s.RangesDone += n.rangesDone
	}
	slices.SortFunc(s.Namespaces, func(a, b NamespaceStatus) int {
		switch {
		case a.NS < b.NS:
			return -1
		case a.NS > b.NS:
			return 1
		}
		return 0
	})
	s.Percent = percent(s.Documents, s.EstimatedDocuments, s.Ranges > 0 && s.RangesDone == s.Ranges)
	if s.ElapsedSeconds > 0 {
		s.DocsPerSecond = float64(p.thisRun+p.othersRun) / s.ElapsedSeconds
		s.BytesPerSecond = float64(p.bytesRun+p.othersBytes) / s.ElapsedSeconds
		if left := s.EstimatedDocuments - s.Documents; s.DocsPerSecond > 0 && left >= 0 {
			s.ETASeconds = float64(left) / s.DocsPerSecond
		}
	}
	return s
}

// rate returns the namespace's documents per second in this run and the
// seconds left at that rate (0 when done, -1 when unknown); docs is what
// is on the target so far.
func (n *nsProgress) rate(docs int64) (perSecond, eta float64) {
	if n.ranges > 0 && n.rangesDone == n.ranges {
		eta = 0
	} else {
		eta = -1
	}
	if n.firstWrite.IsZero() {
		return 0, eta
	}
	end := n.finish
	if end.IsZero() {
		end = time.Now()
	}
	if secs := end.Sub(n.firstWrite).Seconds(); secs > 0 {
		perSecond = float64(n.thisRun+n.othersRun) / secs
	}
	if left := n.estimated - docs; eta < 0 && perSecond > 0 {
		eta = float64(max(left, 0)) / perSecond
	}
	return perSecond, eta
}

// percent is done/total capped below 100 until the work is really done:
// estimates drift while the source changes.
func percent(done, total int64, finished bool) float64 {
	if finished {
		return 100
	}
	if total <= 0 {
		return 0
	}
	return min(100*float64(done)/float64(total), 99.9)
}
