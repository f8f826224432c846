package upstream

import (
	"context"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBreakerStateMachine(t *testing.T) {
	var changes []int32
	b := newBreaker(BreakerConfig{Failures: 3, OpenFor: time.Second, HalfOpenRequests: 2},
		func(to int32) { changes = append(changes, to) })
	sec := int64(time.Second)
	now := int64(1000 * sec)

	// closed: failures below the threshold, then a success resets the count.
	for range 2 {
		ok, trial := b.admit(now)
		require.True(t, ok)
		require.Zero(t, trial)
		b.record(true, trial, now)
	}
	b.record(false, 0, now)
	b.record(true, 0, now)
	b.record(true, 0, now)
	assert.Equal(t, stateClosed, b.state.Load())
	b.record(true, 0, now) // third in a row
	assert.Equal(t, stateOpen, b.state.Load())

	// open: refuses until open_for has passed.
	ok, _ := b.admit(now + sec - 1)
	assert.False(t, ok)
	assert.False(t, b.mayAdmit(now+sec-1))
	assert.True(t, b.mayAdmit(now+sec))

	// half-open: two trials, no third; both succeed → closed.
	ok1, t1 := b.admit(now + sec)
	ok2, t2 := b.admit(now + sec)
	ok3, _ := b.admit(now + sec)
	require.True(t, ok1)
	require.True(t, ok2)
	assert.False(t, ok3)
	assert.Equal(t, stateHalfOpen, b.state.Load())
	require.NotZero(t, t1)
	b.record(false, t1, now+sec)
	assert.Equal(t, stateHalfOpen, b.state.Load())
	b.record(false, t2, now+sec)
	assert.Equal(t, stateClosed, b.state.Load())

	// again open, then a failed trial opens it again.
	for range 3 {
		b.record(true, 0, now+2*sec)
	}
	require.Equal(t, stateOpen, b.state.Load())
	_, t3 := b.admit(now + 3*sec)
	require.NotZero(t, t3)
	b.record(true, t3, now+3*sec)
	assert.Equal(t, stateOpen, b.state.Load())
	ok, _ = b.admit(now + 3*sec + 1)
	assert.False(t, ok, "open_for counts from the failed trial")

	// A stale trial from an earlier half-open spell does not count.
	_, t4 := b.admit(now + 4*sec)
	b.record(false, t3, now+4*sec)
	assert.Equal(t, stateHalfOpen, b.state.Load())
	b.record(false, t4, now+4*sec)
	b.record(false, t4, now+4*sec) // second trial slot never used: one success is not enough
	assert.Equal(t, stateClosed, b.state.Load())

	assert.Equal(t, []int32{stateOpen, stateHalfOpen, stateClosed, stateOpen, stateHalfOpen, stateOpen, stateHalfOpen, stateClosed}, changes)
}

func TestBreakerThroughThePool(t *testing.T) {
	b, other := startBackend(t), startBackend(t)
	b.status.Store(500)
	_, p := testPool(t, func(c *PoolConfig) {
		c.Breaker = BreakerConfig{Failures: 3, OpenFor: 50 * time.Millisecond, HalfOpenRequests: 1}
		c.Passive.Failures = 1000
	}, b.URL, other.URL)
	tg := p.target(b.URL)
	transitions := func(to string) uint64 {
		return metrics.GetOrCreateCounter(`sentinel_upstream_breaker_transitions_total{upstream="` + p.name +
			`",target="` + b.URL + `",to="` + to + `"}`).Get()
	}
	state := metrics.GetOrCreateGauge(`sentinel_upstream_breaker_state{upstream="`+p.name+`",target="`+b.URL+`"}`, nil)

	for i := 0; b.hits.Load() < 3; i++ {
		require.Less(t, i, 6, "round robin reaches the failing target every other request")
		_, _, err := get(t, p, "/")
		require.NoError(t, err)
	}
	assert.Equal(t, stateOpen, tg.breaker.state.Load())
	assert.EqualValues(t, 2, state.Get())
	hits := b.hits.Load()
	for range 4 {
		addr, code, err := get(t, p, "/")
		require.NoError(t, err)
		require.Equal(t, 200, code)
		require.Equal(t, other.addr, addr, "an open breaker refuses: the other target serves")
	}

	// half-open → open: the trial fails.
	require.Eventually(t, func() bool {
		_, code, err := get(t, p, "/")
		return err == nil && code == 500
	}, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, hits+1, b.hits.Load(), "exactly one trial")
	assert.Equal(t, stateOpen, tg.breaker.state.Load())

	// half-open → closed: the trial succeeds.
	b.status.Store(200)
	require.Eventually(t, func() bool {
		addr, code, err := get(t, p, "/")
		return err == nil && code == 200 && addr == b.addr
	}, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, stateClosed, tg.breaker.state.Load())
	assert.EqualValues(t, 0, state.Get())
	assert.EqualValues(t, 2, transitions("open"))
	assert.EqualValues(t, 2, transitions("half_open"))
	assert.EqualValues(t, 1, transitions("closed"))
}

func TestPassiveEjectionAndReprobe(t *testing.T) {
	good, bad := startBackend(t), startBackend(t)
	bad.status.Store(502)
	s, p := testPool(t, func(c *PoolConfig) {
		c.Passive = PassiveConfig{Failures: 3, EjectFor: 40 * time.Millisecond}
	}, good.URL, bad.URL)
	s.Start(context.Background())
	tg := p.target(bad.URL)
	ejections := metrics.GetOrCreateCounter(`sentinel_upstream_ejections_total{upstream="` + p.name + `",target="` + bad.URL + `"}`)
	healthy := metrics.GetOrCreateGauge(`sentinel_upstream_target_healthy{upstream="`+p.name+`",target="`+bad.URL+`"}`, nil)

	for range 6 { // round robin: three of them reach the bad target
		_, _, err := get(t, p, "/")
		require.NoError(t, err)
	}
	require.NotZero(t, tg.ejectedUntil.Load(), "three failures in a row eject")
	assert.EqualValues(t, 1, ejections.Get())
	assert.EqualValues(t, 0, healthy.Get())

	// While ejected, everything goes to the good target.
	for range 4 {
		addr, _, err := get(t, p, "/")
		require.NoError(t, err)
		require.Equal(t, good.addr, addr)
	}
	// The TCP re-probe passes (the bad target still listens), so it comes
	// back on probation, and its first failure ejects it again.
	require.Eventually(t, func() bool { return tg.ejectedUntil.Load() == 0 }, 5*time.Second, time.Millisecond)
	for i := 0; tg.ejectedUntil.Load() == 0; i++ {
		require.Less(t, i, 2, "round robin reaches the bad target within two requests")
		_, _, err := get(t, p, "/")
		require.NoError(t, err)
	}
	assert.EqualValues(t, 2, ejections.Get())

	// Fixed: re-admitted, and successes keep it in.
	bad.status.Store(200)
	require.Eventually(t, func() bool {
		addr, _, _ := get(t, p, "/")
		return addr == bad.addr
	}, 5*time.Second, time.Millisecond)
	for range 10 {
		_, code, err := get(t, p, "/")
		require.NoError(t, err)
		require.Equal(t, 200, code)
	}
	assert.Zero(t, tg.ejectedUntil.Load())
	assert.EqualValues(t, 1, healthy.Get())
}

func TestPassiveReprobeFailsWhileTargetIsDown(t *testing.T) {
	good, down := startBackend(t), startBackend(t)
	s, p := testPool(t, func(c *PoolConfig) {
		c.Passive = PassiveConfig{Failures: 1, EjectFor: 30 * time.Millisecond}
	}, good.URL, down.URL)
	s.Start(context.Background())
	down.stop()
	tg := p.target(down.URL)
	require.Eventually(t, func() bool {
		_, _, err := get(t, p, "/")
		require.NoError(t, err, "a refused connection is retried on the good target")
		return tg.ejectedUntil.Load() != 0
	}, 5*time.Second, time.Millisecond)
	// Several re-probe rounds fail (connection refused) and keep it out.
	first := tg.ejectedUntil.Load()
	require.Eventually(t, func() bool { return tg.ejectedUntil.Load() > first+int64(60*time.Millisecond) }, 5*time.Second, time.Millisecond)
	for range 10 {
		addr, _, err := get(t, p, "/")
		require.NoError(t, err)
		require.Equal(t, good.addr, addr)
	}
	down.restart(t)
	require.Eventually(t, func() bool { return tg.ejectedUntil.Load() == 0 }, 5*time.Second, time.Millisecond)
}

func TestEjectionExpiresWithoutStart(t *testing.T) {
	b, other := startBackend(t), startBackend(t)
	b.status.Store(502)
	_, p := testPool(t, func(c *PoolConfig) {
		c.Passive = PassiveConfig{Failures: 2, EjectFor: 20 * time.Millisecond}
	}, b.URL, other.URL)
	for i := 0; p.target(b.URL).ejectedUntil.Load() == 0; i++ {
		require.Less(t, i, 4)
		_, _, err := get(t, p, "/")
		require.NoError(t, err)
	}
	for range 4 {
		addr, _, err := get(t, p, "/")
		require.NoError(t, err)
		require.Equal(t, other.addr, addr)
	}
	b.status.Store(200)
	require.Eventually(t, func() bool {
		addr, code, err := get(t, p, "/")
		return err == nil && code == 200 && addr == b.addr
	}, 5*time.Second, time.Millisecond)
}
