package adaptive

import (
	"math"

	"github.com/VictoriaMetrics/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Priority orders requests for admission: higher is admitted first.
type Priority uint8

const (
	PriorityFree Priority = iota // FREE and anonymous
	PriorityStandard
	PriorityPremium
)

// PriorityOf maps a plan name to its priority; unknown and empty plans are
// FREE.
func PriorityOf(plan string) Priority {
	switch plan {
	case "PREMIUM":
		return PriorityPremium
	case "STANDARD":
		return PriorityStandard
	}
	return PriorityFree
}

func (p Priority) String() string {
	switch p {
	case PriorityPremium:
		return "PREMIUM"
	case PriorityStandard:
		return "STANDARD"
	}
	return "FREE"
}

// ConcurrencyLimiter bounds the requests in flight to one upstream from this
// pod. The limit adapts like Netflix's Gradient2: it compares a short-term
// average of the latency with a long-term one (the no-load latency it has
// learned); when the short one rises, the limit shrinks by their ratio, and
// otherwise it grows by a queue allowance of about √limit. Admission is by
// priority: PREMIUM may fill the whole limit, STANDARD and FREE only their
// shares of it, so FREE is shed first and PREMIUM always has room.
type ConcurrencyLimiter struct {
	name     string
	cfg      ConcurrencyConfig
	limit    atomic.Uint64 // float64 bits
	inflight atomic.Int64
	slot     chan struct{}   // a Release wakes one waiter
	waiting  [3]atomic.Int32 // requests waiting for a slot, by priority

	mu      sync.Mutex // guards the gradient state; updates are skipped when busy
	short   float64    // seconds, EWMA over ~10 samples
	long    float64    // seconds, EWMA with a time constant of longWindow
	last    time.Time  // of the last update
	samples int64

	shed        [3][2]atomic.Int64     // by priority, by reason (0 limit, 1 queue timeout)
	shedMetrics [3][2]*metrics.Counter // sentinel_shed_total{upstream,plan,reason}
}

func newConcurrencyLimiter(name string, cfg ConcurrencyConfig) *ConcurrencyLimiter {
	c := &ConcurrencyLimiter{name: name, cfg: cfg, slot: make(chan struct{}, 1)}
	c.limit.Store(math.Float64bits(float64(cfg.InitialLimit)))
	for _, p := range []Priority{PriorityFree, PriorityStandard, PriorityPremium} {
		for r, reason := range []string{"concurrency", "queue_timeout"} {
			c.shedMetrics[p][r] = metrics.GetOrCreateCounter(`sentinel_shed_total{upstream="` + name +
				`",plan="` + p.String() + `",reason="` + reason + `"}`)
		}
	}
	return c
}

// Ticket is one admitted request; Release it when the upstream answered.
type Ticket struct{ c *ConcurrencyLimiter }

// Limit is the current concurrency limit.
func (c *ConcurrencyLimiter) Limit() float64 { return math.Float64frombits(c.limit.Load()) }

// Inflight is the number of admitted requests not yet released.
func (c *ConcurrencyLimiter) Inflight() int64 { return c.inflight.Load() }

func (c *ConcurrencyLimiter) capFor(p Priority) int64 {
	l := c.Limit()
	switch p {
	case PriorityPremium:
		return int64(l)
	case PriorityStandard:
		return max(1, int64(l*c.cfg.StandardShare))
	}
	return max(1, int64(l*c.cfg.FreeShare))
}

func (c *ConcurrencyLimiter) tryAcquire(p Priority) bool {
	// A freed slot goes to a waiting request of higher priority first.
	for q := p + 1; q <= PriorityPremium; q++ {
		if c.waiting[q].Load() > 0 {
			return false
		}
	}
	limit := c.capFor(p)
	for {
		n := c.inflight.Load()
		if n >= limit {
			return false
		}
		if c.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Acquire admits a request of priority p, or reports false when it must be
// shed: FREE at once, PREMIUM and STANDARD after waiting at most
// queue_timeout for a slot. Admission without waiting allocates nothing.
func (c *ConcurrencyLimiter) Acquire(p Priority) (Ticket, bool) {
	if c.tryAcquire(p) {
		return Ticket{c}, true
	}
	if p == PriorityFree {
		c.shed[p][0].Add(1)
		c.shedMetrics[p][0].Inc()
		return Ticket{}, false
	}
	c.waiting[p].Add(1)
	defer c.waiting[p].Add(-1)
	t := time.NewTimer(c.cfg.QueueTimeout)
	defer t.Stop()
	for {
		select {
		case <-c.slot:
			if c.tryAcquire(p) {
				return Ticket{c}, true
			}
		case <-t.C:
			if c.tryAcquire(p) {
				return Ticket{c}, true
			}
			c.shed[p][1].Add(1)
			c.shedMetrics[p][1].Inc()
			return Ticket{}, false
		}
	}
}

// Release ends an admitted request and feeds its latency to the limit. A
// failed request counts as twice its latency. The zero Ticket does nothing.
func (t Ticket) Release(latency time.Duration, failed bool) {
	c := t.c
	if c == nil {
		return
	}
	c.inflight.Add(-1)
	select {
	case c.slot <- struct{}{}:
	default:
	}
	if failed {
		latency *= 2
	}
	if !c.mu.TryLock() {
		return // another release is updating: skip this sample
	}
	c.update(latency.Seconds(), time.Now())
	c.mu.Unlock()
}

// update runs the gradient step (under mu).
func (c *ConcurrencyLimiter) update(rtt float64, now time.Time) {
	c.samples++
	if c.samples == 1 {
		c.short, c.long, c.last = rtt, rtt, now
		return
	}
	dt := now.Sub(c.last)
	c.last = now
	c.short += (rtt - c.short) * 0.1
	// The baseline moves with time, not with samples: a 10× spike of
	// requests must not teach it the overloaded latency within a second.
	c.long += (rtt - c.long) * min(1, float64(dt)/float64(longWindow))
	if c.long > c.short { // the latency fell: the baseline follows at once
		c.long = c.short
	}
	limit := c.Limit()
	gradient := max(0.5, min(1, tolerance*c.long/c.short))
	next := limit*gradient + math.Sqrt(limit)
	if inflight := float64(c.inflight.Load()); inflight < limit/2 && next > limit {
		next = limit // not using the room we have: do not grow
	}
	next = limit*0.8 + next*0.2
	next = max(float64(c.cfg.MinLimit), min(float64(c.cfg.MaxLimit), next))
	c.limit.Store(math.Float64bits(next))
}

// Gradient parameters: latency up to tolerance × the baseline is no
// congestion; the baseline forgets with a time constant of longWindow.
const (
	tolerance  = 1.2
	longWindow = 5 * time.Minute
)

// shedCount returns the requests shed so far, by priority and reason.
func (c *ConcurrencyLimiter) shedCount(p Priority, queue bool) int64 {
	r := 0
	if queue {
		r = 1
	}
	return c.shed[p][r].Load()
}
