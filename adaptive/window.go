package adaptive

import (
	"sync/atomic"
	"time"
)

// ringBuckets is the number of buckets of an upstreamWindow's ring.
const ringBuckets = 10

// stripes is the number of stripes of the counters every request writes
// (the requests in flight, the upstream window): a request writes the
// stripe of its connection.
const stripes = 8

// stripeOf is the stripe of connection conn.
func stripeOf(conn uint64) int { return int(conn % stripes) }

// upstreamWindow counts upstream answers over the last ringBuckets × width,
// in a ring of buckets (as Alibaba Sentinel's LeapArray): each bucket covers one width of time and is
// reset when the ring comes round to it. Observe is lock-free.
type upstreamWindow struct {
	width int64 // nanos
	// One ring per stripe (see stripeOf): the answers of one time span are
	// counted on as many cache lines, so that cores answering requests of
	// different connections do not write one line.
	rings [stripes][ringBuckets]windowBucket
}

type windowBucket struct {
	start   atomic.Int64 // nanos of the bucket's span; stale when too old
	count   atomic.Int64 // answers of the upstream (OK, Backpressure, Failed)
	failed  atomic.Int64
	pushed  atomic.Int64 // Backpressure answers
	ok      atomic.Int64
	latency atomic.Int64 // sum over OK answers, nanos
}

func newUpstreamWindow(span time.Duration) *upstreamWindow {
	return &upstreamWindow{width: int64(span) / ringBuckets}
}

// observe records one upstream answer at now in stripe i's ring.
func (w *upstreamWindow) observe(i int, now int64, latency time.Duration, r Result) {
	start := now - now%w.width
	b := &w.rings[i][(now/w.width)%ringBuckets]
	if old := b.start.Load(); old != start && b.start.CompareAndSwap(old, start) {
		b.count.Store(0)
		b.failed.Store(0)
		b.pushed.Store(0)
		b.ok.Store(0)
		b.latency.Store(0)
	}
	b.count.Add(1)
	switch r {
	case Failed:
		b.failed.Add(1)
		return
	case Backpressure:
		b.pushed.Add(1)
		return
	}
	// Only answers that did the work say how long the work takes: a shed or
	// a refused connection answers fast and would hide a slow upstream.
	b.ok.Add(1)
	b.latency.Add(int64(latency))
}

// windowSums are an upstreamWindow's live buckets added up.
type windowSums struct {
	count, failed, pushed, ok int64
	mean                      time.Duration // of OK answers
}

// read sums the live buckets.
func (w *upstreamWindow) read(now int64) windowSums {
	oldest := now - ringBuckets*w.width
	var s windowSums
	var lat int64
	for r := range w.rings {
		for i := range w.rings[r] {
			b := &w.rings[r][i]
			if b.start.Load() <= oldest {
				continue
			}
			s.count += b.count.Load()
			s.failed += b.failed.Load()
			s.pushed += b.pushed.Load()
			s.ok += b.ok.Load()
			lat += b.latency.Load()
		}
	}
	if s.ok > 0 {
		s.mean = time.Duration(lat / s.ok)
	}
	return s
}
