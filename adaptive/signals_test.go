package adaptive

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestForwardedShare(t *testing.T) {
	for _, c := range []struct {
		started, forwarded int64
		want               float64
	}{
		{0, 0, 0},
		{100, 0, 0},
		{100, 25, 0.25},
		{100, 100, 1},
		{3, 5, 1}, // answers of requests started in an earlier sample
		{0, 2, 1},
	} {
		assert.Equal(t, c.want, forwardedShare(c.started, c.forwarded), "started %d, forwarded %d", c.started, c.forwarded)
	}
}

// burn keeps every core busy until ctx ends, so that the process's own CPU
// signal reads high.
func burn(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for ctx.Err() == nil {
				for i := range 10000 {
					x += i
				}
			}
			_ = x
		}()
	}
	return &wg
}

// A gateway busy answering requests itself (a refused flood) must not read
// its own work as pressure: its CPU and scheduler signals count only in
// proportion to the requests it forwards. The same CPU with forwarded
// requests does count, which shows the test can fail.
func TestOwnAnswersDoNotRaisePressure(t *testing.T) {
	c := newTestController(t, Config{})
	c.host = newHostSampler()
	ctx, cancel := context.WithCancel(context.Background())
	defer burn(ctx).Wait()
	defer cancel()

	// Requests come; every one is answered by the gateway (none reaches
	// ObserveUpstream).
	c.sample(time.Now())
	for range 20 {
		time.Sleep(50 * time.Millisecond)
		for range 200 {
			c.RequestStarted(0)
			c.RequestFinished(0)
		}
		c.sample(time.Now())
		st := c.State()
		require.Zero(t, st.Signals.CPU, "the CPU of refusing is not pressure")
		require.Zero(t, st.Signals.Scheduler)
		require.Zero(t, st.Signals.ForwardedShare)
		require.Equal(t, Normal, st.Mode)
	}

	// The same CPU while every request is forwarded.
	var cpu float64
	for range 40 {
		time.Sleep(50 * time.Millisecond)
		for range 200 {
			c.RequestStarted(0)
			c.ObserveUpstream(0, time.Now(), time.Millisecond, OK)
			c.RequestFinished(0)
		}
		c.sample(time.Now())
		if cpu = c.State().Signals.CPU; cpu > 0.1 {
			break
		}
	}
	assert.Greater(t, cpu, 0.1, "forwarded work keeps its CPU signal")
	assert.Equal(t, 1.0, c.State().Signals.ForwardedShare)
}
