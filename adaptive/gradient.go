package adaptive

import (
	"math"
	"time"
)

// How the concurrency limit reads congestion.
//
// A backend is congested when it queues: past its capacity, every request
// more in flight waits behind the others, so the latency grows with the
// requests in flight (for a backend that keeps its throughput, at most in
// proportion to them: Little's law). A slower endpoint, a mix that shifts
// toward slow requests, or the gateway's own CPU saturation also raise the
// latency, but not because more requests are in flight; shedding does not
// bring such latency down, it only refuses requests the backend would
// serve. So the limiter keeps, for each route (its resource), a baseline:
// the route's latency when it was healthy and the requests in flight then.
// A route's short-term latency counts as congestion only when it exceeds
// the route's threshold (rtt_tolerance × its baseline, at least the
// baseline + rtt_slack + the gateway's scheduling delay) and the requests
// in flight explain it: at the throughput the backend has shown, a queue of
// that many requests could add that much. Latency that rose further is the
// route's new cost: the baseline is re-measured there and nothing is cut.
//
// The limit is cut at most once per round trip, by the ratio of the
// latency to the threshold (at most by half), never below what the
// upstream recently served with healthy latency (the learned floor); it
// grows by about √limit per answer while the requests use at least half of
// it and the latency is healthy, and unused headroom is trimmed slowly.

// Route is a ConcurrencyLimiter's key for one route's latency baseline.
// Route 0 is shared by the requests of no known route.
type Route uint8

// maxRoutes bounds the baselines of one limiter: resources past it share
// route 0. A baseline is per resource, so the routes of a configuration
// bound their number, not the requests.
const maxRoutes = 64

// routeCost is what the limiter learned of one route (under mu).
type routeCost struct {
	samples int64
	short   float64 // seconds, EWMA over ~10 of the route's answers
	shortN  float64 // requests in flight at their admission, over the same answers
	base    float64 // seconds: the route's latency while healthy
	// rate is the most requests in flight per second of the route's
	// latency seen since the baseline (shortN ÷ short): for a single
	// route, the throughput the backend has shown it can give. A queue
	// keeps latency ≤ requests in flight ÷ that throughput.
	rate float64
	// learning counts the answers during which the baseline follows the
	// short-term averages, after the first answer or a re-measure: the
	// averages lag a step change, and judged while they catch up, a
	// slower route would look like a growing queue.
	learning int
	// burstUntil (unix nanos) ends the last burst of admissions (see
	// burst).
	burstUntil int64
}

// Route returns the key of resource's latency baseline, the same for every
// call with the same resource; proxy calls it once per route when it
// builds a route table.
func (c *ConcurrencyLimiter) Route(resource string) Route {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.routeIDs[resource]; ok {
		return r
	}
	if len(c.routeIDs) >= maxRoutes-1 {
		return 0
	}
	r := Route(len(c.routeIDs) + 1)
	c.routeIDs[resource] = r
	return r
}

// observe adds one answer of the route that took rtt seconds, admitted
// with n requests in flight and leaving end in flight. It returns the
// route's short-term latency over its threshold (above 1: congestion), the
// short-term average of the requests in flight that goes with it, and
// whether the baseline was re-measured.
func (rc *routeCost) observe(rtt, n, end, tolerance, slack float64, now int64) (ratio, inflight float64, rebased bool) {
	if rc.samples++; rc.samples == 1 {
		rc.short, rc.shortN, rc.learning = rtt, n, learnAnswers
	} else {
		rc.burst(end, tolerance, slack, now)
		rc.short += (rtt - rc.short) * 0.1
		rc.shortN += (n - rc.shortN) * 0.1
	}
	rate := rc.shortN / max(rc.short, minRTT)
	if rc.learning > 0 {
		rc.learning--
		rc.base, rc.rate = rc.short, rate
	}
	inBurst := now < rc.burstUntil
	if !inBurst {
		rc.rate = max(rc.rate, rate)
	}
	threshold := max(tolerance*rc.base, rc.base+slack)
	switch {
	case rc.learning > 0:
	case rc.short <= threshold:
		rc.base = min(rc.base, rc.short)
	case rc.short > tolerance*rc.shortN/rc.rate+slack:
		// More latency than the requests in flight can queue at the
		// throughput the backend has shown: the route costs more now (or
		// the backend is slow for reasons this pod's concurrency does not
		// change). Unless a burst explains it (see burst).
		if inBurst {
			return 0, rc.shortN, false
		}
		rc.base, rc.rate, rc.learning = rc.short, rate, learnAnswers
		threshold = max(tolerance*rc.base, rc.base+slack)
		rebased = true
	}
	return rc.short / threshold, rc.shortN, rebased
}

// burst notes a burst of admissions: an answer that leaves more than twice
// the route's usual requests in flight while its latency is still healthy,
// so that the requests in flight rose before any latency could raise them.
// The backend answers a burst in an order of its own (new connections,
// its scheduler): requests admitted early in it can come back after most
// of it, slower than their place in the queue explains, and requests
// admitted late come back fast, as if the backend gave more throughput
// than it can. Until the burst has drained (two round trips, or the
// requests in flight at the throughput shown), its answers neither raise
// the throughput the route has shown nor re-measure the baseline: taken as
// the route's new cost, a congested backend's queue would be left
// unprotected, its latency never looking unhealthy again. They still count
// as congestion when the requests in flight explain them. A slower route
// raises the latency first and the requests in flight after it, so it is
// no burst.
func (rc *routeCost) burst(end, tolerance, slack float64, now int64) {
	if end <= 2*rc.shortN+2 || rc.short > max(tolerance*rc.base, rc.base+slack) {
		return
	}
	drain := max(2*rc.short, end/max(rc.rate, 1))
	rc.burstUntil = max(rc.burstUntil, now+int64(min(drain, maxBurst.Seconds())*1e9))
}

// sample runs the gradient step for one successful answer of route r
// (under mu): rtt seconds, admitted with admitted requests in flight,
// inflight in flight when it ended (itself included).
//
// The limit never shrinks on latency below the learned floor: the most
// requests in flight (a route's short-term average, the one its latency
// goes with) while the latency was healthy; it decays with a half-life of
// floorHalfLife. Backpressure and failures may take it
// lower, down to min_limit.
func (c *ConcurrencyLimiter) sample(r Route, rtt, admitted, inflight float64, now time.Time) {
	c.samples++
	if c.samples == 1 {
		c.short, c.last, c.floorAt = rtt, now, now
	}
	dt := now.Sub(c.last)
	c.last = now
	c.short += (rtt - c.short) * 0.1
	c.shortBits.Store(math.Float64bits(c.short))
	ratio, n, rebased := c.routes[r].observe(rtt, admitted, inflight, c.cfg.RTTTolerance, c.slack(), now.UnixNano())
	if rebased {
		c.rebases.Inc()
	}
	if ratio > 0 { // 0: no evidence either way (see burst)
		c.congest += (ratio - c.congest) * 0.1
	}
	floor := c.decayFloor(now)
	if ratio > 0 && ratio <= 1 && n > floor {
		c.floor, floor = n, n
	}
	c.floorBits.Store(math.Float64bits(floor))
	limit := c.Limit()
	switch {
	case c.congest > 1:
		c.congestedUntil.Store(now.Add(congestionHold).UnixNano())
		if c.cutDue(now) {
			c.cuts.Inc()
			c.store(max(limit*max(0.5, 1/c.congest), min(limit, floor)))
		}
	case inflight < limit/2:
		// Not using the room it has: no evidence for more, and the unused
		// headroom is trimmed (time constant trimTau) down to twice the
		// learned floor, so that a sudden flood finds a limit near what
		// the upstream really serves.
		if next := max(limit*math.Exp(-float64(dt)/float64(trimTau)), 2*floor); next < limit {
			c.store(next)
		}
	case ratio > 0:
		c.store(limit + 0.2*math.Sqrt(limit))
	}
}

// slack is rtt_slack plus the gateway's own scheduling delay: a busy
// gateway adds that much to every round trip without any backend queueing.
func (c *ConcurrencyLimiter) slack() float64 {
	s := c.cfg.RTTSlack.Seconds()
	if c.gatewayDelay != nil {
		s += time.Duration(c.gatewayDelay.Load()).Seconds()
	}
	return s
}

// cutDue reports whether a multiplicative cut may happen now, and if so
// takes it: at most one per short-term round trip (at least minDropGap),
// the time a cut takes to show in the latency; a burst of 503s from one
// overload counts once.
func (c *ConcurrencyLimiter) cutDue(now time.Time) bool {
	gap := max(minDropGap, time.Duration(c.short*float64(time.Second)))
	if now.Sub(c.lastCut) < gap {
		return false
	}
	c.lastCut = now
	return true
}

// drop shrinks the limit by backoffRatio after the upstream pushed back or
// failed (under mu), at most once per round trip.
func (c *ConcurrencyLimiter) drop(now time.Time) {
	if !c.cutDue(now) {
		return
	}
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

// Gradient parameters: a cut or a drop happens at most once per
// max(minDropGap, round trip); a drop multiplies the limit by backoffRatio;
// the learned floor halves every floorHalfLife.
const (
	backoffRatio  = 0.9
	minDropGap    = 5 * time.Millisecond
	minSampleGap  = 200 * time.Microsecond
	floorHalfLife = 30 * time.Second
	trimTau       = 10 * time.Second
	floorAgeStep  = 100 * time.Millisecond // the floor is aged in steps, not on every answer
	// congestionHold is how long the priority shares apply after the last
	// sign of congestion.
	congestionHold = time.Second
	// learnAnswers is how many answers a route's baseline follows its
	// short-term averages (EWMAs over ~10) after a step: three of their
	// time constants.
	learnAnswers = 30
	// maxBurst bounds how long a burst of admissions is waited out.
	maxBurst = 5 * time.Second
	// minRTT bounds the latency a rate is computed from.
	minRTT = 1e-6
)
