package adaptive

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Priority orders requests for admission: higher is admitted first.
type Priority uint8

const (
	PriorityFree Priority = iota // FREE and anonymous
	PriorityStandard
	PriorityPremium
)

// planNames are the plan names of the priorities, as limit spells them
// (limit.PlanFree, limit.PlanStandard, limit.PlanPremium). adaptive does not
// import limit; a test of the main package checks that the two agree.
var planNames = [...]string{PriorityFree: "FREE", PriorityStandard: "STANDARD", PriorityPremium: "PREMIUM"}

// PriorityOf maps a plan name to its priority; unknown and empty plans are
// FREE.
func PriorityOf(plan string) Priority {
	for p := PriorityPremium; p > PriorityFree; p-- {
		if planNames[p] == plan {
			return p
		}
	}
	return PriorityFree
}

// String returns the plan name of the priority (the plan label of metrics).
func (p Priority) String() string {
	if int(p) < len(planNames) {
		return planNames[p]
	}
	return planNames[PriorityFree]
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

	mu       sync.Mutex // guards the gradient state; OK samples are skipped when busy
	short    float64    // seconds, EWMA over ~10 samples
	long     float64    // seconds, EWMA with a time constant of longWindow
	last     time.Time  // of the last update
	samples  int64
	floor    float64   // learned floor (see sample)
	floorAt  time.Time // when floor was last aged
	lastDrop time.Time
	drops    *metrics.Counter

	shortBits      atomic.Uint64 // short, readable without mu
	congestedUntil atomic.Int64  // unix nanos: the shares apply until then (see capFor)
	floorBits      atomic.Uint64 // floor, readable without mu
	sampledAt      atomic.Int64  // unix nanos of the last OK sample taken

	shed        [3][2]atomic.Int64     // by priority, by reason (0 limit, 1 queue timeout)
	shedMetrics [3][2]*metrics.Counter // sentinel_shed_total{upstream,plan,reason}
	series      []string               // the names addMetrics registered
}

// newConcurrencyLimiter builds the limiter of one upstream. It serves no
// request before addMetrics has given it its series.
func newConcurrencyLimiter(name string, cfg ConcurrencyConfig) *ConcurrencyLimiter {
	c := &ConcurrencyLimiter{name: name, cfg: cfg, slot: make(chan struct{}, 1)}
	c.limit.Store(math.Float64bits(float64(cfg.InitialLimit)))
	return c
}

// Ticket is one admitted request; Release it when the upstream answered.
type Ticket struct{ c *ConcurrencyLimiter }

// Limit is the current concurrency limit.
func (c *ConcurrencyLimiter) Limit() float64 { return math.Float64frombits(c.limit.Load()) }

// Inflight is the number of admitted requests not yet released.
func (c *ConcurrencyLimiter) Inflight() int64 { return c.inflight.Load() }

// capFor is the part of the limit priority p may fill. The shares apply
// once the requests in flight reach what the upstream is known to serve
// with healthy latency (the learned floor), or while it is congested (its
// latency over the threshold, or a back-off within congestionHold): below
// that, the limit is there for everyone, and FREE is not shed for a burst
// the upstream can serve; above it, a flood of FREE cannot crowd PREMIUM
// out before the latency shows it.
func (c *ConcurrencyLimiter) capFor(p Priority, inflight, now int64) int64 {
	l := c.Limit()
	if p == PriorityPremium {
		return int64(l)
	}
	if float64(inflight) < math.Float64frombits(c.floorBits.Load()) && now >= c.congestedUntil.Load() {
		return int64(l)
	}
	switch p {
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
	var now int64 // read once, and only when a share may apply
	if p != PriorityPremium {
		now = time.Now().UnixNano()
	}
	for {
		n := c.inflight.Load()
		if n >= c.capFor(p, n, now) {
			return false
		}
		if c.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// queueTimeout is how long a request of priority p may wait for a slot:
// queue_timeout, and for PREMIUM at least two short-term round trips (up to
// a second), the time in which the requests in flight free their slots
// when the upstream is slow.
func (c *ConcurrencyLimiter) queueTimeout(p Priority) time.Duration {
	d := c.cfg.QueueTimeout
	if p == PriorityPremium {
		rtt := time.Duration(math.Float64frombits(c.shortBits.Load()) * float64(time.Second))
		d = max(d, min(2*rtt, time.Second))
	}
	return d
}

// Acquire admits a request of priority p, or reports false when it must be
// shed: PREMIUM and STANDARD after waiting for a slot (see queueTimeout),
// FREE at once while the upstream is congested, else after waiting
// queue_timeout too (a burst on a healthy upstream is served, not shed).
// Admission without waiting allocates nothing.
func (c *ConcurrencyLimiter) Acquire(p Priority) (Ticket, bool) {
	if c.tryAcquire(p) {
		return Ticket{c}, true
	}
	if p == PriorityFree && time.Now().UnixNano() < c.congestedUntil.Load() {
		c.shed[p][0].Add(1)
		c.shedMetrics[p][0].Inc()
		return Ticket{}, false
	}
	c.waiting[p].Add(1)
	defer c.waiting[p].Add(-1)
	if c.tryAcquire(p) { // a slot freed before the release could see us waiting
		return Ticket{c}, true
	}
	t := time.NewTimer(c.queueTimeout(p))
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

// Result is what one upstream answer tells the adaptive layer. The proxy
// sorts every answer once; only OK, Backpressure and Failed are the
// upstream's, and Ignored answers (a request the client broke, an answer the
// gateway gave itself) never reach a signal.
type Result uint8

const (
	// Ignored says nothing about the upstream.
	Ignored Result = iota
	// OK is an answer of a working upstream: its latency is a sample.
	OK
	// Backpressure is the upstream shedding load (503, 429).
	Backpressure
	// Failed is the upstream failing (connection, timeout, other 5xx).
	Failed
)

// Release ends an admitted request with the upstream's result and latency
// (from sending the request to its answer, without the time it waited for
// a slot). OK feeds the gradient; Backpressure and Failed shrink the limit
// multiplicatively, at most once per round trip; Ignored only frees the
// slot. end is when the answer came (the caller's clock read, reused). The
// zero Ticket does nothing.
func (t Ticket) Release(end time.Time, latency time.Duration, r Result) {
	c := t.c
	if c == nil {
		return
	}
	inflight := c.inflight.Add(-1) + 1 // in flight when this one ended, itself included
	if c.waiting[PriorityFree].Load() > 0 || c.waiting[PriorityStandard].Load() > 0 || c.waiting[PriorityPremium].Load() > 0 {
		select { // wake a waiter
		case c.slot <- struct{}{}:
		default:
		}
	}
	switch r {
	case OK:
		// At most one sample per minSampleGap: under tens of thousands of
		// answers a second the gradient needs no more, and the skipped
		// ones cost one atomic load instead of the lock and the math.
		if end.UnixNano()-c.sampledAt.Load() < int64(minSampleGap) || !c.mu.TryLock() {
			return
		}
		c.sampledAt.Store(end.UnixNano())
		c.sample(latency.Seconds(), float64(inflight), end)
	case Backpressure, Failed:
		c.mu.Lock() // a drop is never skipped
		c.drop(end)
	default:
		return
	}
	c.mu.Unlock()
}

// sample runs the gradient step for one successful answer (under mu).
//
// Congestion is a short-term latency above both tolerance × the long-term
// baseline and the baseline plus rtt_slack. The slack is what tells the
// gateway's own congestion from the backend's: on a busy gateway a fast
// backend's round trip grows from microseconds to a few milliseconds of
// scheduling, a ratio that would read as a drowning backend and collapse the
// limit, while a backend that queues adds at least a service time.
//
// The limit never shrinks on latency below the learned floor: the most
// requests the upstream has recently served at once with healthy latency
// (it decays with a half-life of floorHalfLife). Backpressure and failures
// may take it lower, down to min_limit.
func (c *ConcurrencyLimiter) sample(rtt, inflight float64, now time.Time) {
	c.samples++
	if c.samples == 1 {
		c.short, c.long, c.last, c.floorAt = rtt, rtt, now, now
		c.shortBits.Store(math.Float64bits(rtt))
		return
	}
	dt := now.Sub(c.last)
	c.last = now
	c.short += (rtt - c.short) * 0.1
	c.shortBits.Store(math.Float64bits(c.short))
	// The baseline moves with time, not with samples: a 10× spike of
	// requests must not teach it the overloaded latency within a second.
	c.long += (rtt - c.long) * min(1, float64(dt)/float64(longWindow))
	if c.long > c.short { // the latency fell: the baseline follows at once
		c.long = c.short
	}
	threshold := max(c.cfg.RTTTolerance*c.long, c.long+c.cfg.RTTSlack.Seconds())
	floor := c.decayFloor(now)
	if rtt <= threshold && inflight > floor {
		c.floor, floor = inflight, inflight
	}
	c.floorBits.Store(math.Float64bits(floor))
	limit := c.Limit()
	var next float64
	if c.short > threshold {
		c.congestedUntil.Store(now.Add(congestionHold).UnixNano())
	}
	if c.short <= threshold {
		if inflight < limit/2 {
			// Not using the room it has: no evidence for more, and the
			// unused headroom is trimmed (time constant trimTau) down to
			// twice the learned floor, so that a sudden flood finds a
			// limit near what the upstream really serves.
			next = max(limit*math.Exp(-float64(dt)/float64(trimTau)), 2*floor)
			if next >= limit {
				return
			}
		} else {
			next = limit + 0.2*math.Sqrt(limit)
		}
	} else {
		// Congested: shrink toward the level where the latency meets the
		// threshold. (Gradient2 adds a √limit queue allowance here too; it
		// holds the backend's queue, and so its latency, above the
		// threshold for as long as the overload lasts.)
		gradient := max(0.5, threshold/c.short)
		next = limit * (0.8 + 0.2*gradient)
		next = max(next, min(limit, floor))
	}
	c.store(next)
}

// drop shrinks the limit after the upstream pushed back or failed (under
// mu): by backoffRatio, once per short-term round trip, so that a burst of
// 503s from one overload counts once.
func (c *ConcurrencyLimiter) drop(now time.Time) {
	gap := max(minDropGap, time.Duration(c.short*float64(time.Second)))
	if now.Sub(c.lastDrop) < gap {
		return
	}
	c.lastDrop = now
	c.congestedUntil.Store(now.Add(congestionHold).UnixNano())
	c.drops.Inc()
	c.store(c.Limit() * backoffRatio)
}

// decayFloor ages the learned floor to now and returns it.
func (c *ConcurrencyLimiter) decayFloor(now time.Time) float64 {
	if dt := now.Sub(c.floorAt); dt >= floorAgeStep {
		c.floor *= math.Exp2(-float64(dt) / float64(floorHalfLife))
		c.floorAt = now
	}
	return c.floor
}

func (c *ConcurrencyLimiter) store(next float64) {
	next = max(float64(c.cfg.MinLimit), min(float64(c.cfg.MaxLimit), next))
	c.limit.Store(math.Float64bits(next))
}

// Gradient parameters: the baseline forgets with a time constant of
// longWindow; a drop multiplies the limit by backoffRatio, at most once per
// max(minDropGap, round trip); the learned floor halves every floorHalfLife.
const (
	longWindow    = 5 * time.Minute
	backoffRatio  = 0.9
	minDropGap    = 5 * time.Millisecond
	minSampleGap  = 200 * time.Microsecond
	floorHalfLife = 30 * time.Second
	trimTau       = 10 * time.Second
	floorAgeStep  = 100 * time.Millisecond // the floor is aged in steps, not on every answer
	// congestionHold is how long the priority shares apply after the last
	// sign of congestion.
	congestionHold = time.Second
)

// shedCount returns the requests shed so far, by priority and reason.
func (c *ConcurrencyLimiter) shedCount(p Priority, queue bool) int64 {
	r := 0
	if queue {
		r = 1
	}
	return c.shed[p][r].Load()
}
