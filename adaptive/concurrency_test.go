package adaptive

import (
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testConcurrency(initial int) *ConcurrencyLimiter {
	c := testConfig().Concurrency
	c.InitialLimit, c.MinLimit, c.MaxLimit = initial, 4, 1000
	l := newConcurrencyLimiter("api", c)
	l.addMetrics(metrics.NewSet())
	return l
}

// feed runs n successful samples of rtt with inflight requests in flight,
// 1ms apart, and returns the clock.
func feed(l *ConcurrencyLimiter, now time.Time, n int, rtt time.Duration, inflight float64) time.Time {
	for range n {
		now = now.Add(time.Millisecond)
		l.sample(rtt.Seconds(), inflight, now)
	}
	return now
}

func TestConcurrencyShrinksWhenLatencyRises(t *testing.T) {
	l := testConcurrency(10)
	now := time.Unix(1000, 0)
	now = feed(l, now, 500, 50*time.Millisecond, 5) // a backend with 5 workers, at ease
	base := l.Limit()
	// The load doubles: requests queue in the backend, latency doubles.
	now = feed(l, now, 300, 100*time.Millisecond, 10)
	assert.Less(t, l.Limit(), base, "the limit shrinks when the upstream queues")
	assert.GreaterOrEqual(t, l.Limit(), 4.9, "but not below what it served with healthy latency (decaying slowly)")
	// The backend slows down for good: the learned floor decays and the
	// limit goes lower.
	held := l.Limit()
	now = feed(l, now.Add(2*time.Minute), 300, 400*time.Millisecond, 10)
	assert.Less(t, l.Limit(), held)
	low := l.Limit()
	feed(l, now, 300, 50*time.Millisecond, low)
	assert.Greater(t, l.Limit(), low, "and grows back when the latency recovers")
}

// A busy gateway in front of a fast backend sees round trips grow from
// microseconds to milliseconds of its own scheduling: that is not the
// backend's congestion, and the limit must not collapse.
func TestConcurrencyIgnoresGatewayNoise(t *testing.T) {
	l := testConcurrency(100)
	now := time.Unix(1000, 0)
	now = feed(l, now, 100, 200*time.Microsecond, 10)
	for i := range 5000 {
		rtt := time.Duration(1+i%4) * time.Millisecond // 5-20× the idle baseline
		now = now.Add(100 * time.Microsecond)
		l.sample(rtt.Seconds(), 64, now)
	}
	assert.GreaterOrEqual(t, l.Limit(), 100.0)
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
		l.sample((500 * time.Microsecond).Seconds(), inflight, now)
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
		tk, ok := l.Acquire(PriorityPremium)
		require.True(t, ok)
		tk.Release(time.Now(), time.Hour, Ignored)
	}
	assert.Equal(t, 100.0, l.Limit())
	assert.Zero(t, l.Inflight())
	assert.Zero(t, l.samples)
	tk, _ := l.Acquire(PriorityPremium)
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
		_, ok := l.Acquire(PriorityFree)
		require.True(t, ok)
	}
	_, ok := l.Acquire(PriorityFree)
	assert.False(t, ok, "past the floor, FREE has its share only")
	_, ok = l.Acquire(PriorityPremium)
	assert.True(t, ok)
}

func TestConcurrencyShedsFreeFirst(t *testing.T) {
	l := testConcurrency(10)
	l.congestedUntil.Store(time.Now().Add(time.Hour).UnixNano()) // the upstream is congested
	var ts []Ticket
	for {
		tk, ok := l.Acquire(PriorityFree)
		if !ok {
			break
		}
		ts = append(ts, tk)
	}
	assert.Len(t, ts, 5, "FREE fills its 50% share only")
	std := 0
	for {
		tk, ok := l.Acquire(PriorityStandard)
		if !ok {
			break
		}
		ts = append(ts, tk)
		std++
	}
	assert.Equal(t, 3, std, "STANDARD fills up to 80%")
	prem := 0
	for {
		tk, ok := l.Acquire(PriorityPremium)
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
		_, ok := l.Acquire(PriorityPremium)
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
	_, ok := l.Acquire(PriorityFree)
	assert.False(t, ok, "a FREE arrival does not take the slot a PREMIUM request waits for")
	assert.False(t, l.tryAcquire(PriorityStandard), "nor a STANDARD one")
	assert.True(t, l.tryAcquire(PriorityPremium))
	l.waiting[PriorityPremium].Store(0)
	assert.True(t, l.tryAcquire(PriorityFree))
}
