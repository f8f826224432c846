package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testConcurrency(initial int) *ConcurrencyLimiter {
	c := testConfig().Concurrency
	c.InitialLimit, c.MinLimit, c.MaxLimit = initial, 4, 1000
	return newConcurrencyLimiter("api", c)
}

func TestConcurrencyShrinksWhenLatencyRises(t *testing.T) {
	l := testConcurrency(100)
	hold := func(n int, latency time.Duration, rounds int) {
		for range rounds {
			var ts []Ticket
			for range n {
				tk, ok := l.Acquire(PriorityPremium)
				if !ok {
					break
				}
				ts = append(ts, tk)
			}
			for _, tk := range ts {
				tk.Release(latency, false)
			}
		}
	}
	hold(80, 10*time.Millisecond, 50) // learn the no-load latency under real use
	base := l.Limit()
	assert.GreaterOrEqual(t, base, 100.0)
	hold(80, 100*time.Millisecond, 50) // the upstream slows down ×10
	assert.Less(t, l.Limit(), base/2, "the limit shrinks when latency rises")
	low := l.Limit()
	hold(int(low), 10*time.Millisecond, 200)
	assert.Greater(t, l.Limit(), low, "and grows back when it recovers")
}

func TestConcurrencyShedsFreeFirst(t *testing.T) {
	l := testConcurrency(10)
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
	ts[0].Release(time.Millisecond, false)
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
