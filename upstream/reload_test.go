package upstream

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reloadConfig is a pool config with short timings for reload tests.
func reloadConfig(targets ...string) PoolConfig {
	return PoolConfig{
		Targets:             targets,
		Timeout:             2 * time.Second,
		ConnectTimeout:      time.Second,
		MaxIdleConnDuration: 200 * time.Millisecond,
		Passive:             PassiveConfig{Failures: 1, EjectFor: time.Minute},
		Breaker:             BreakerConfig{Failures: 1000, OpenFor: time.Minute},
	}
}

func startedSet(t *testing.T, cfg Config) *Set {
	t.Helper()
	s, err := New(provisioned(t, cfg))
	require.NoError(t, err)
	s.retireGrace = 20 * time.Millisecond
	s.Start(context.Background())
	t.Cleanup(s.Stop)
	return s
}

func registered(name string) bool {
	return slices.Contains(metrics.ListMetricNames(), name)
}

// TestStageKeepsUnchangedPool: an unchanged pool is the same object with
// its state (an ejected target stays ejected); a changed one is new, and
// the old one is closed once committed.
func TestStageKeepsUnchangedPool(t *testing.T) {
	good, bad, other := startBackend(t), startBackend(t), startBackend(t)
	bad.status.Store(500)
	keep, change := poolName(t), poolName(t)
	cfg := Config{keep: reloadConfig(good.URL, bad.URL), change: reloadConfig(other.URL)}
	s := startedSet(t, cfg)
	kept, changed := s.Pool(keep), s.Pool(change)
	for range 4 {
		_, _, _ = get(t, kept, "/")
	}
	require.NotZero(t, kept.target(bad.URL).ejectedUntil.Load(), "the failing target is ejected")
	_, _, err := get(t, changed, "/") // a connection to keep alive
	require.NoError(t, err)
	require.Equal(t, 1, changed.targets[0].hc.ConnsCount())

	next := Config{keep: reloadConfig(good.URL, bad.URL), change: reloadConfig(other.URL)}
	pc := next[change]
	pc.Timeout = 3 * time.Second
	next[change] = pc
	u, err := s.Stage(provisioned(t, next))
	require.NoError(t, err)
	assert.Equal(t, []string{keep}, u.Kept)
	assert.Equal(t, []string{change}, u.Replaced)
	assert.Same(t, kept, u.Pool(keep), "the unchanged pool is kept")
	assert.NotSame(t, changed, u.Pool(change))
	assert.Same(t, changed, s.Pool(change), "nothing changes before Commit")
	u.Commit()

	assert.Same(t, kept, s.Pool(keep))
	assert.NotZero(t, kept.target(bad.URL).ejectedUntil.Load(), "the kept pool's ejection stays")
	assert.True(t, kept.watched.Load(), "the kept pool is still watched")
	assert.True(t, s.Pool(change).watched.Load(), "the new pool is watched")
	require.Eventually(t, func() bool { return !changed.watched.Load() && changed.targets[0].hc.ConnsCount() == 0 },
		5*time.Second, 10*time.Millisecond, "the replaced pool is closed")
	addr, code, err := get(t, s.Pool(change), "/")
	require.NoError(t, err)
	assert.Equal(t, 200, code)
	assert.Equal(t, other.addr, addr)
}

// TestRetiredPoolFinishesInFlight: a request inside a replaced pool
// completes there; the pool closes only after it.
func TestRetiredPoolFinishesInFlight(t *testing.T) {
	oldB, newB := startBackend(t), startBackend(t)
	name := poolName(t)
	s := startedSet(t, Config{name: reloadConfig(oldB.URL)})
	old := s.Pool(name)
	type result struct {
		addr string
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		addr, code, err := get(t, old, "/block")
		done <- result{addr, code, err}
	}()
	require.Eventually(t, func() bool { return old.Pending() == 1 }, 5*time.Second, time.Millisecond)

	u, err := s.Stage(provisioned(t, Config{name: reloadConfig(newB.URL)}))
	require.NoError(t, err)
	u.Commit()
	addr, _, err := get(t, s.Pool(name), "/")
	require.NoError(t, err)
	assert.Equal(t, newB.addr, addr, "new requests go to the new pool")
	time.Sleep(10 * s.retireGrace)
	assert.True(t, old.watched.Load(), "the old pool stays open while a request is in it")

	close(oldB.gate)
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, 200, r.code)
	assert.Equal(t, oldB.addr, r.addr, "the request in flight finished on the old target")
	require.Eventually(t, func() bool { return !old.watched.Load() && old.targets[0].hc.ConnsCount() == 0 },
		5*time.Second, 10*time.Millisecond, "the old pool closes after its last request")
}

// TestStageRemovesAndRenamesSeries: a removed pool's series are
// unregistered once it is retired; a new one has its series.
func TestStageRemovesAndRenamesSeries(t *testing.T) {
	b := startBackend(t)
	before, after := poolName(t), poolName(t)
	s := startedSet(t, Config{before: reloadConfig(b.URL)})
	require.True(t, registered(latencyName(before)))
	targetSeries := `sentinel_upstream_target_healthy{upstream="` + before + `",target="` + b.URL + `"}`
	require.True(t, registered(targetSeries))

	u, err := s.Stage(provisioned(t, Config{after: reloadConfig(b.URL)}))
	require.NoError(t, err)
	assert.Equal(t, []string{after}, u.Added)
	assert.Equal(t, []string{before}, u.Removed)
	u.Commit()
	assert.Nil(t, s.Pool(before))
	assert.Equal(t, []string{after}, s.Names())
	assert.True(t, registered(latencyName(after)), "the new pool has its series")
	require.Eventually(t, func() bool { return !registered(latencyName(before)) && !registered(targetSeries) },
		5*time.Second, 10*time.Millisecond, "the removed pool's series are unregistered")
}

// TestStageInvalidChangesNothing: a bad config is refused whole, by the
// validation that runs before anything is staged.
func TestStageInvalidChangesNothing(t *testing.T) {
	b := startBackend(t)
	name := poolName(t)
	s := startedSet(t, Config{name: reloadConfig(b.URL)})
	p := s.Pool(name)
	bad := Config{name: reloadConfig(b.URL), "extra": reloadConfig("htp://nowhere")}
	bad.SetDefaults()
	err := bad.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "upstreams.extra.targets[0]")
	assert.Same(t, p, s.Pool(name))
	assert.Equal(t, []string{name}, s.Names())
}

// TestAbortUnregistersStagedSeries: an aborted update leaves no series of
// its new pools and no change.
func TestAbortUnregistersStagedSeries(t *testing.T) {
	b := startBackend(t)
	name, extra := poolName(t), poolName(t)
	s := startedSet(t, Config{name: reloadConfig(b.URL)})
	u, err := s.Stage(provisioned(t, Config{name: reloadConfig(b.URL), extra: reloadConfig(b.URL)}))
	require.NoError(t, err)
	require.True(t, registered(latencyName(extra)))
	u.Abort()
	assert.False(t, registered(latencyName(extra)))
	assert.True(t, registered(latencyName(name)), "the running pool's series stay")
	assert.Nil(t, s.Pool(extra))
}

// TestStopClosesRetiringPools: Stop does not wait out a retirement's grace.
func TestStopClosesRetiringPools(t *testing.T) {
	b := startBackend(t)
	name := poolName(t)
	s, err := New(provisioned(t, Config{name: reloadConfig(b.URL)}))
	require.NoError(t, err)
	s.retireGrace = time.Hour
	s.Start(context.Background())
	old := s.Pool(name)
	u, err := s.Stage(provisioned(t, Config{name: reloadConfig(b.URL, startBackend(t).URL)}))
	require.NoError(t, err)
	u.Commit()
	start := time.Now()
	s.Stop()
	assert.Less(t, time.Since(start), time.Second)
	assert.False(t, old.watched.Load())
}
