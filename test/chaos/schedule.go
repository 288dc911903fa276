package chaos

import (
	"math/rand/v2"
	"time"
)

// Kind is a fault the harness injects.
type Kind string

// The fault kinds. The first three need a task that is starting, so each
// begins a new epoch (a new task on a new database); WindowLost ends one.
const (
	KillPlanning   Kind = "worker SIGKILL while planning"
	KillCopy       Kind = "worker SIGKILL while copying"
	KillIndexes    Kind = "worker SIGKILL while building indexes"
	KillReplay     Kind = "worker SIGKILL during replay"
	KillCheckpoint Kind = "worker SIGKILL at a checkpoint save"
	SourceRestart  Kind = "source SIGKILL and restart"
	TargetRestart  Kind = "target SIGKILL and restart"
	Latency        Kind = "latency and jitter"
	Bandwidth      Kind = "bandwidth limit"
	Reset          Kind = "connection resets"
	HalfOpen       Kind = "half-open (silent) connections"
	Partition      Kind = "partition longer than the driver's timeouts"
	WindowLost     Kind = "outage past the oplog window"
)

// Kinds lists every fault kind in the order the report prints them.
var Kinds = []Kind{KillPlanning, KillCopy, KillIndexes, KillReplay, KillCheckpoint,
	SourceRestart, TargetRestart, Latency, Bandwidth, Reset, HalfOpen, Partition, WindowLost}

// startsEpoch reports whether the fault needs a task that is starting.
func (k Kind) startsEpoch() bool {
	return k == KillPlanning || k == KillCopy || k == KillIndexes
}

// isKill reports whether the fault kills the worker while it runs.
func (k Kind) isKill() bool {
	return k.startsEpoch() || k == KillReplay || k == KillCheckpoint
}

// Fault is one scheduled fault: its kind, the moment it strikes (after the
// cycle starts), how long it lasts, which server's link or process it hits,
// and a size parameter (latency, bandwidth) drawn from the same seed.
type Fault struct {
	Kind     Kind
	Delay    time.Duration
	Duration time.Duration
	// Source is true when the fault hits the source side, else the target.
	Source bool
	// Param is the latency in ms (Latency), the jitter being Param/2, or
	// the rate in KB/s (Bandwidth), or the reset delay in ms (Reset).
	Param int64
}

// Schedule returns n faults drawn from seed: the kinds come in shuffled
// rounds of every kind, so that each kind is injected about n/len(Kinds)
// times; the moments, durations and sides are random.
func Schedule(seed uint64, n int) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0x6368616f73))
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	out := make([]Fault, 0, n)
	for len(out) < n {
		round := append([]Kind(nil), Kinds...)
		rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		for _, k := range round {
			if len(out) == n {
				break
			}
			f := Fault{Kind: k, Source: rng.IntN(2) == 0, Delay: ms(300, 2500)}
			switch k {
			case KillPlanning, KillCopy, KillIndexes:
				f.Delay = ms(0, 150)
			case SourceRestart, TargetRestart:
				f.Duration = ms(200, 3000)
			case Latency:
				f.Duration, f.Param = ms(2000, 6000), int64(100+rng.IntN(700))
			case Bandwidth:
				f.Duration, f.Param = ms(2000, 6000), int64(8+rng.IntN(56))
			case Reset:
				f.Duration, f.Param = ms(1000, 4000), int64(rng.IntN(300))
			case HalfOpen:
				f.Duration = ms(3000, 9000)
			case Partition:
				// The worker's clients give up server selection and
				// connecting after 10s (conn.Options.ConnectTimeout).
				f.Duration = ms(12000, 18000)
			}
			out = append(out, f)
		}
	}
	return out
}
