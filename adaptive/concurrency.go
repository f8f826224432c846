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

// planNames are the plan names of the priorities, as the catalog spells them
// (catalog.PlanFree, catalog.PlanStandard, catalog.PlanPremium). adaptive does not
// import limit/catalog; a test of the main package checks that the two agree.
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
// pod. The limit adapts to the upstream's congestion, which it reads from
// latency the way Netflix's Gradient2 and Envoy's adaptive concurrency do,
// but against a baseline per route and only where the requests in flight
// explain the rise (gradient.go). Admission is by priority: PREMIUM may
// fill the whole limit, STANDARD and FREE only their shares of it, so FREE
// is shed first and PREMIUM always has room.
type ConcurrencyLimiter struct {
	name     string
	cfg      ConcurrencyConfig
	limit    atomic.Uint64 // float64 bits
	inflight atomic.Int64
	slot     chan struct{}   // a Release wakes one waiter
	waiting  [3]atomic.Int32 // requests waiting for a slot, by priority
	// gatewayDelay is the gateway's own scheduling delay (nanoseconds, the
	// controller's latest sample; nil: none), which no upstream causes.
	gatewayDelay *atomic.Int64

	mu       sync.Mutex // guards the gradient state; OK samples are skipped when busy
	short    float64    // seconds, EWMA over ~10 samples of every route
	last     time.Time  // of the last update
	samples  int64
	congest  float64   // the routes' latency over their thresholds, EWMA over ~10 samples
	floor    float64   // learned floor (see sample)
	floorAt  time.Time // when floor was last aged
	lastCut  time.Time // of the last multiplicative cut (latency or back-off)
	routeIDs map[string]Route
	routes   [maxRoutes]routeCost
	drops    *metrics.Counter
	cuts     *metrics.Counter
	rebases  *metrics.Counter

	shortBits      atomic.Uint64 // short, readable without mu
	congestedUntil atomic.Int64  // unix nanos: the shares apply until then (see capFor)
	floorBits      atomic.Uint64 // floor, readable without mu
	sampledAt      atomic.Int64  // unix nanos of the last OK sample taken

	shed        [3][2]atomic.Int64     // by priority, by reason (0 limit, 1 queue timeout)
	shedMetrics [3][2]*metrics.Counter // sentinel_shed_total{upstream,plan,reason}
	series      []string               // the names addMetrics registered
}

// newConcurrencyLimiter builds the limiter of one upstream; gatewayDelay
// may be nil. It serves no request before addMetrics has given it its
// series.
func newConcurrencyLimiter(name string, cfg ConcurrencyConfig, gatewayDelay *atomic.Int64) *ConcurrencyLimiter {
	c := &ConcurrencyLimiter{name: name, cfg: cfg, slot: make(chan struct{}, 1), gatewayDelay: gatewayDelay,
		routeIDs: map[string]Route{}}
	c.limit.Store(math.Float64bits(float64(cfg.InitialLimit)))
	return c
}

// Ticket is one admitted request; Release it when the upstream answered.
type Ticket struct {
	c        *ConcurrencyLimiter
	route    Route
	admitted int32 // requests in flight when it was admitted, itself included
	waited   bool  // Acquire found no free slot at once
}

// Waited reports whether the request waited for its slot: Acquire found
// none free at once. A caller that dates the forward by a clock reading
// taken before Acquire must read the clock again then.
func (t Ticket) Waited() bool { return t.waited }

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

// tryAcquire takes a slot for priority p without waiting and returns the
// requests in flight with it, or 0 when there is none.
func (c *ConcurrencyLimiter) tryAcquire(p Priority) int64 {
	// A freed slot goes to a waiting request of higher priority first.
	for q := p + 1; q <= PriorityPremium; q++ {
		if c.waiting[q].Load() > 0 {
			return 0
		}
	}
	var now int64 // read once, and only when a share may apply
	if p != PriorityPremium {
		now = time.Now().UnixNano()
	}
	for {
		n := c.inflight.Load()
		if n >= c.capFor(p, n, now) {
			return 0
		}
		if c.inflight.CompareAndSwap(n, n+1) {
			return n + 1
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

// Acquire admits a request of priority p on route r (see Route), or
// reports false when it must be shed: PREMIUM and STANDARD after waiting
// for a slot (see queueTimeout), FREE at once while the upstream is
// congested, else after waiting queue_timeout too (a burst on a healthy
// upstream is served, not shed). Admission without waiting allocates
// nothing.
func (c *ConcurrencyLimiter) Acquire(p Priority, r Route) (Ticket, bool) {
	if n := c.tryAcquire(p); n > 0 {
		return c.ticket(r, n), true
	}
	if p == PriorityFree && time.Now().UnixNano() < c.congestedUntil.Load() {
		c.shed[p][0].Add(1)
		c.shedMetrics[p][0].Inc()
		return Ticket{}, false
	}
	c.waiting[p].Add(1)
	defer c.waiting[p].Add(-1)
	if n := c.tryAcquire(p); n > 0 { // a slot freed before the release could see us waiting
		return c.waitedTicket(r, n), true
	}
	t := time.NewTimer(c.queueTimeout(p))
	defer t.Stop()
	for {
		select {
		case <-c.slot:
			if n := c.tryAcquire(p); n > 0 {
				return c.waitedTicket(r, n), true
			}
		case <-t.C:
			if n := c.tryAcquire(p); n > 0 {
				return c.waitedTicket(r, n), true
			}
			c.shed[p][1].Add(1)
			c.shedMetrics[p][1].Inc()
			return Ticket{}, false
		}
	}
}

// waitedTicket is ticket for a request that waited for its slot.
func (c *ConcurrencyLimiter) waitedTicket(r Route, inflight int64) Ticket {
	t := c.ticket(r, inflight)
	t.waited = true
	return t
}

func (c *ConcurrencyLimiter) ticket(r Route, inflight int64) Ticket {
	if int(r) >= maxRoutes {
		r = 0
	}
	return Ticket{c: c, route: r, admitted: int32(min(inflight, math.MaxInt32))}
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
		c.sample(t.route, latency.Seconds(), float64(t.admitted), float64(inflight), end)
	case Backpressure, Failed:
		c.mu.Lock() // a drop is never skipped
		c.drop(end)
	default:
		return
	}
	c.mu.Unlock()
}

// shedCount returns the requests shed so far, by priority and reason.
func (c *ConcurrencyLimiter) shedCount(p Priority, queue bool) int64 {
	r := 0
	if queue {
		r = 1
	}
	return c.shed[p][r].Load()
}
