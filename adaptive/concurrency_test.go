package adaptive

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testConcurrency(initial int) *ConcurrencyLimiter {
	c := testConfig().Concurrency
	c.InitialLimit, c.MinLimit, c.MaxLimit = initial, 4, 1000
	l := newConcurrencyLimiter("api", c, nil)
	l.addMetrics(metrics.NewSet())
	return l
}

// feed runs n successful samples of rtt with inflight requests in flight,
// 1ms apart, and returns the clock.
func feed(l *ConcurrencyLimiter, now time.Time, n int, rtt time.Duration, inflight float64) time.Time {
	for range n {
		now = now.Add(time.Millisecond)
		l.sample(0, rtt.Seconds(), inflight, inflight, now)
	}
	return now
}

func TestConcurrencyShrinksWhenLatencyRises(t *testing.T) {
	l := testConcurrency(10)
	now := time.Unix(1000, 0)
	now = feed(l, now, 500, 50*time.Millisecond, 5) // a backend with 5 workers, at ease
	base := l.Limit()
	// The load doubles: requests queue in the backend, latency doubles
	// with the requests in flight.
	now = feed(l, now, 1000, 100*time.Millisecond, 10)
	assert.Less(t, l.Limit(), base, "the limit shrinks when the upstream queues")
	assert.GreaterOrEqual(t, l.Limit(), 4.9, "but not below what it served with healthy latency (decaying slowly)")
	assert.Zero(t, l.rebases.Get(), "a queue's latency is no new baseline")
	low := l.Limit()
	feed(l, now, 300, 50*time.Millisecond, low)
	assert.Greater(t, l.Limit(), low, "and grows back when the latency recovers")
}

// A burst of 34 requests on a backend with 4 workers (40 ms each) at ease
// with 2 is a queue, though the backend answers the burst in an order of
// its own: the requests admitted last come back first, fast for their
// place, and those admitted first come back last, slow for theirs. Taken
// at face value, that is a backend giving more throughput than it can
// and then a latency the requests in flight do not explain: a new cost,
// which would leave the queue unprotected for good (its latency then
// never looks unhealthy). The burst is waited out instead, and the queue
// that stays after it is cut.
func TestConcurrencyBurstIsNoNewCost(t *testing.T) {
	l := testConcurrency(100)
	start := feed(l, time.Unix(1000, 0), 100, 40*time.Millisecond, 2)
	now := start
	for i := range 34 {
		rtt := time.Duration(i/4+1) * 40 * time.Millisecond
		admitted := float64(34 - i) // the last admitted, first answered
		if i >= 17 {
			admitted = float64(i - 16)
		}
		now = start.Add(rtt)
		l.sample(0, rtt.Seconds(), admitted, 34, now)
	}
	require.Zero(t, l.rebases.Get(), "the burst's order is no new cost")
	// Then every request waits behind the others: 34 in flight, 340 ms.
	for range 200 {
		now = now.Add(10 * time.Millisecond)
		l.sample(0, 0.34, 34, 34, now)
	}
	assert.Zero(t, l.rebases.Get(), "a queue's latency is no new baseline")
	assert.Less(t, l.Limit(), 34.0, "the queue is cut")
}

// A route that becomes slower at the same number of requests in flight
// (or a route whose latency rises further than its requests in flight do)
// costs more; it is not congested: the baseline is re-measured and the
// limit is not cut.
func TestConcurrencySlowerRouteIsNotCongestion(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to float64 // requests in flight before and after
	}{{"same in flight", 10, 10}, {"more in flight than before, not enough to explain it", 2, 20}} {
		t.Run(tc.name, func(t *testing.T) {
			l := testConcurrency(50)
			now := feed(l, time.Unix(1000, 0), 300, time.Millisecond, tc.from)
			feed(l, now, 300, 200*time.Millisecond, tc.to) // 200x the latency
			assert.GreaterOrEqual(t, l.Limit(), tc.to, "room for every request in flight")
			assert.Zero(t, l.cuts.Get())
			assert.NotZero(t, l.rebases.Get(), "the baseline was re-measured")
		})
	}
}

// Each route has its own baseline: a steady mix of a 300 ms route and a
// fast one is no congestion, however the mix shifts.
func TestConcurrencyRoutesHaveTheirOwnBaselines(t *testing.T) {
	l := testConcurrency(50)
	fast, slow := l.Route("fast"), l.Route("slow")
	require.NotEqual(t, fast, slow)
	assert.Equal(t, fast, l.Route("fast"), "one key per resource")
	now := time.Unix(1000, 0)
	for i := range 3000 {
		now = now.Add(time.Millisecond)
		r, rtt := fast, time.Millisecond
		if i%(2+i/1000) == 0 { // the share of slow requests shifts from 1/2 to 1/4
			r, rtt = slow, 300*time.Millisecond
		}
		l.sample(r, rtt.Seconds(), 30, 30, now)
	}
	assert.GreaterOrEqual(t, l.Limit(), 50.0)
	assert.Zero(t, l.cuts.Get())
	assert.Zero(t, l.rebases.Get(), "no baseline needed re-measuring")
}

// Route keys are bounded: resources past maxRoutes share route 0.
func TestConcurrencyRouteKeysAreBounded(t *testing.T) {
	l := testConcurrency(50)
	seen := map[Route]bool{}
	for i := range 2 * maxRoutes {
		seen[l.Route(strconv.Itoa(i))] = true
	}
	assert.Len(t, seen, maxRoutes)
	assert.Equal(t, Route(0), l.Route("another"))
}

// A busy gateway in front of a fast backend sees round trips grow from
// microseconds to milliseconds of its own scheduling while more requests
// pile up in it: that is not the backend's congestion, and the limit must
// not collapse. The scheduling delay the controller measures is what tells
// them apart; without it the same samples read as a queue.
func TestConcurrencyIgnoresGatewayNoise(t *testing.T) {
	for _, tc := range []struct {
		delay time.Duration
		cut   bool
	}{{40 * time.Millisecond, false}, {0, true}} {
		l := testConcurrency(100)
		var d atomic.Int64
		d.Store(int64(tc.delay))
		l.gatewayDelay = &d
		now := feed(l, time.Unix(1000, 0), 100, time.Millisecond, 10)
		for i := range 5000 {
			// 10-40x the idle latency, with 40x the requests in flight
			rtt := time.Duration(10*(1+i%4)) * time.Millisecond
			now = now.Add(100 * time.Microsecond)
			l.sample(0, rtt.Seconds(), 400, 400, now)
		}
		if tc.cut {
			assert.Less(t, l.Limit(), 100.0, "without the gateway's delay: read as a queue")
		} else {
			assert.GreaterOrEqual(t, l.Limit(), 100.0, "gateway delay %v", tc.delay)
		}
	}
}

// After a collapse (here: the backend shed hard for a while), a healthy,
// saturating load brings the limit back to what it uses within a few
// hundred answers.
func TestConcurrencyRecoversAfterCollapse(t *testing.T) {
	l := testConcurrency(100)
	now := time.Unix(1000, 0)
	for range 100 {
		now = now.Add(time.Second)
		l.drop(now)
	}
	require.Equal(t, 4.0, l.Limit(), "at min_limit")
	for i := 0; l.Limit() < 64; i++ {
		require.Less(t, i, 1000, "recovered within 1000 answers (limit %.1f)", l.Limit())
		inflight := min(64, l.Limit())
		now = now.Add(100 * time.Microsecond)
		l.sample(0, (500 * time.Microsecond).Seconds(), inflight, inflight, now)
	}
}

// A burst of 503s from one overload shrinks the limit once per round trip,
// not once per answer.
func TestConcurrencyBackpressureShrinksOncePerRoundTrip(t *testing.T) {
	l := testConcurrency(100)
	now := feed(l, time.Unix(1000, 0), 10, 20*time.Millisecond, 10)
	before := l.Limit()
	for range 50 {
		now = now.Add(100 * time.Microsecond)
		l.drop(now)
	}
	assert.InDelta(t, before*backoffRatio, l.Limit(), 1e-9)
	l.drop(now.Add(25 * time.Millisecond))
	assert.InDelta(t, before*backoffRatio*backoffRatio, l.Limit(), 1e-9)
}

// Answers that say nothing about the upstream (Ignored) free their slot and
// move nothing; backpressure shrinks the limit.
func TestConcurrencyReleaseResults(t *testing.T) {
	l := testConcurrency(100)
	for range 100 {
		tk, ok := l.Acquire(PriorityPremium, 0)
		require.True(t, ok)
		tk.Release(time.Now(), time.Hour, Ignored)
	}
	assert.Equal(t, 100.0, l.Limit())
	assert.Zero(t, l.Inflight())
	assert.Zero(t, l.samples)
	tk, _ := l.Acquire(PriorityPremium, 0)
	tk.Release(time.Now(), 0, Backpressure)
	assert.Less(t, l.Limit(), 100.0)
}

// Up to what a healthy upstream is known to serve, the limit is there for
// every plan: no FREE request is shed for a burst the upstream can serve.
// Past it, the shares apply.
func TestConcurrencySharesPastTheLearnedFloor(t *testing.T) {
	l := testConcurrency(10)
	feed(l, time.Now(), 20, time.Millisecond, 8) // served 8 at once, healthy
	for range 8 {
		_, ok := l.Acquire(PriorityFree, 0)
		require.True(t, ok)
	}
	_, ok := l.Acquire(PriorityFree, 0)
	assert.False(t, ok, "past the floor, FREE has its share only")
	_, ok = l.Acquire(PriorityPremium, 0)
	assert.True(t, ok)
}

func TestConcurrencyShedsFreeFirst(t *testing.T) {
	l := testConcurrency(10)
	l.congestedUntil.Store(time.Now().Add(time.Hour).UnixNano()) // the upstream is congested
	var ts []Ticket
	for {
		tk, ok := l.Acquire(PriorityFree, 0)
		if !ok {
			break
		}
		ts = append(ts, tk)
	}
	assert.Len(t, ts, 5, "FREE fills its 50% share only")
	std := 0
	for {
		tk, ok := l.Acquire(PriorityStandard, 0)
		if !ok {
			break
		}
		ts = append(ts, tk)
		std++
	}
	assert.Equal(t, 3, std, "STANDARD fills up to 80%")
	prem := 0
	for {
		tk, ok := l.Acquire(PriorityPremium, 0)
		if !ok {
			break
		}
		ts = append(ts, tk)
		prem++
	}
	assert.Equal(t, 2, prem, "PREMIUM keeps the rest")
	assert.EqualValues(t, 1, l.shedCount(PriorityFree, false))
	assert.EqualValues(t, 1, l.shedCount(PriorityPremium, true), "PREMIUM waited for a slot, then was shed")
	// A release lets a waiting PREMIUM request in.
	done := make(chan bool)
	go func() {
		_, ok := l.Acquire(PriorityPremium, 0)
		done <- ok
	}()
	ts[0].Release(time.Now(), time.Millisecond, OK)
	require.True(t, <-done)
}

func TestPriorityOf(t *testing.T) {
	assert.Equal(t, PriorityPremium, PriorityOf("PREMIUM"))
	assert.Equal(t, PriorityStandard, PriorityOf("STANDARD"))
	assert.Equal(t, PriorityFree, PriorityOf("FREE"))
	assert.Equal(t, PriorityFree, PriorityOf(""))
}

func TestConcurrencyWaitingPremiumGoesFirst(t *testing.T) {
	l := testConcurrency(10)
	l.waiting[PriorityPremium].Store(1) // a PREMIUM request waits for a slot
	_, ok := l.Acquire(PriorityFree, 0)
	assert.False(t, ok, "a FREE arrival does not take the slot a PREMIUM request waits for")
	assert.False(t, l.tryAcquire(PriorityStandard) > 0, "nor a STANDARD one")
	assert.True(t, l.tryAcquire(PriorityPremium) > 0)
	l.waiting[PriorityPremium].Store(0)
	assert.True(t, l.tryAcquire(PriorityFree) > 0)
}

// A queue is read as a queue even after the gateway's own delay made a
// higher in-flight count look healthy for a while: what explains a route's
// latency is the throughput the backend has shown, which that delay does
// not change.
func TestConcurrencyQueueAfterGatewayDelay(t *testing.T) {
	l := testConcurrency(20)
	var d atomic.Int64
	l.gatewayDelay = &d
	now := feed(l, time.Unix(1000, 0), 100, 40*time.Millisecond, 2) // 2 in flight, 40 ms: 50/s
	d.Store(int64(60 * time.Millisecond))                           // a busy gateway: 40+5+60 ms is healthy
	now = feed(l, now, 300, 90*time.Millisecond, 9)                 // 9 in flight at 90 ms: the backend's 100/s
	d.Store(0)
	before := l.cuts.Get()
	feed(l, now, 1000, 200*time.Millisecond, 20) // 20 in flight queue at 100/s: 200 ms
	assert.Zero(t, l.rebases.Get(), "the queue is no new baseline")
	assert.Greater(t, l.cuts.Get(), before, "the limit is cut")
}

// TestTicketWaited: a slot taken at once is no wait; one taken after all
// were busy is, so that the proxy dates the forward after the wait.
func TestTicketWaited(t *testing.T) {
	l := testConcurrency(4)
	var held []Ticket
	for range 4 {
		tk, ok := l.Acquire(PriorityPremium, 0)
		require.True(t, ok)
		assert.False(t, tk.Waited(), "a free slot")
		held = append(held, tk)
	}
	done := make(chan Ticket)
	go func() {
		tk, ok := l.Acquire(PriorityPremium, 0)
		assert.True(t, ok)
		done <- tk
	}()
	require.Eventually(t, func() bool { return l.waiting[PriorityPremium].Load() == 1 }, 5*time.Second, time.Millisecond)
	held[0].Release(time.Now(), time.Millisecond, OK)
	assert.True(t, (<-done).Waited(), "admitted after every slot was busy")
}
