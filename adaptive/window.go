package adaptive

import (
	"sync/atomic"
	"time"
)

// ringBuckets is the number of buckets of an upstreamWindow.
const ringBuckets = 10

// upstreamWindow counts upstream answers over the last ringBuckets × width,
// as seed 004's ring of buckets: each bucket covers one width of time and is
// reset when the ring comes round to it. Observe is lock-free.
type upstreamWindow struct {
	width   int64 // nanos
	buckets [ringBuckets]windowBucket
}

type windowBucket struct {
	start   atomic.Int64 // nanos of the bucket's span; stale when too old
	count   atomic.Int64
	failed  atomic.Int64
	latency atomic.Int64 // sum, nanos
	slow    atomic.Int64 // answers slower than the objective
}

func newUpstreamWindow(span time.Duration) *upstreamWindow {
	return &upstreamWindow{width: int64(span) / ringBuckets}
}

// observe records one upstream answer at now.
func (w *upstreamWindow) observe(now int64, latency time.Duration, failed bool, objective time.Duration) {
	start := now - now%w.width
	b := &w.buckets[(now/w.width)%ringBuckets]
	if old := b.start.Load(); old != start && b.start.CompareAndSwap(old, start) {
		b.count.Store(0)
		b.failed.Store(0)
		b.latency.Store(0)
		b.slow.Store(0)
	}
	b.count.Add(1)
	b.latency.Add(int64(latency))
	if failed {
		b.failed.Add(1)
	}
	if latency > objective {
		b.slow.Add(1)
	}
}

// read sums the live buckets: answers, failures, mean latency.
func (w *upstreamWindow) read(now int64) (count, failed int64, mean time.Duration) {
	oldest := now - ringBuckets*w.width
	var lat int64
	for i := range w.buckets {
		b := &w.buckets[i]
		if b.start.Load() <= oldest {
			continue
		}
		count += b.count.Load()
		failed += b.failed.Load()
		lat += b.latency.Load()
	}
	if count > 0 {
		mean = time.Duration(lat / count)
	}
	return count, failed, mean
}
