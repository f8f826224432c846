package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newTestController(t *testing.T, cfg Config, upstreams ...string) *Controller {
	t.Helper()
	c, err := New(provisioned(cfg), Options{PodID: "p", Upstreams: upstreams})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	return c
}

// inflightOnly is a config whose pressure is the in-flight signal alone.
func inflightOnly(moderate float64) Config {
	return Config{
		Weights:     Weights{Inflight: 1},
		Thresholds:  Thresholds{Moderate: moderate, Aggressive: 0.85, Critical: 0.95},
		MaxInflight: 100,
	}
}

// TestStageAppliesThresholdsLive: with 60% of max_inflight in flight, a
// moderate threshold of 0.7 keeps Normal mode; staged down to 0.5, the next
// samples enter Moderate.
func TestStageAppliesThresholdsLive(t *testing.T) {
	c := newTestController(t, inflightOnly(0.7))
	c.host = newHostSampler()
	for range 60 {
		c.RequestStarted(0)
	}
	now := time.Now()
	for range 20 {
		now = now.Add(100 * time.Millisecond)
		c.sample(now)
	}
	require.Equal(t, Normal, c.Policy().Mode)

	u, err := c.Stage(provisioned(inflightOnly(0.5)), nil)
	require.NoError(t, err)
	c.sample(now.Add(100 * time.Millisecond))
	assert.Equal(t, Normal, c.Policy().Mode, "nothing changes before Commit")
	u.Commit()
	c.sample(now.Add(200 * time.Millisecond))
	assert.Equal(t, Moderate, c.Policy().Mode)
}

// TestStageKeepsRestartKeys: the keys that need a restart keep their
// running values, whatever the staged config says.
func TestStageKeepsRestartKeys(t *testing.T) {
	c := newTestController(t, Config{})
	off := false
	next := Config{Enabled: &off, SampleInterval: time.Second, ClusterInterval: time.Second, PressureTTL: 5 * time.Second,
		Concurrency: ConcurrencyConfig{Enabled: &off}, MinDwell: 7 * time.Second}
	u, err := c.Stage(provisioned(next), nil)
	require.NoError(t, err)
	u.Commit()
	got := c.tune.Load()
	assert.True(t, *got.Enabled)
	assert.True(t, *got.Concurrency.Enabled)
	assert.Equal(t, 100*time.Millisecond, got.SampleInterval)
	assert.Equal(t, 500*time.Millisecond, got.ClusterInterval)
	assert.Equal(t, 3*time.Second, got.PressureTTL)
	assert.Equal(t, 7*time.Second, got.MinDwell, "a live key applies")
}

// TestStageLimitersFollowUpstreams: an unchanged upstream keeps its
// limiter, a changed bound or a new upstream gets a new one with its
// series, a removed upstream's series are unregistered.
func TestStageLimitersFollowUpstreams(t *testing.T) {
	c := newTestController(t, Config{}, "keep", "bound", "gone")
	keep, bound := c.Concurrency("keep"), c.Concurrency("bound")
	_, ok := keep.Acquire(PriorityPremium, 0)
	require.True(t, ok)

	next := Config{Concurrency: ConcurrencyConfig{Upstreams: map[string]ConcurrencyBounds{"bound": {MaxLimit: 50}}}}
	u, err := c.Stage(provisioned(next), []string{"keep", "bound", "new"})
	require.NoError(t, err)
	assert.Same(t, keep, u.Concurrency("keep"))
	assert.NotSame(t, bound, u.Concurrency("bound"))
	assert.Same(t, bound, c.Concurrency("bound"), "nothing changes before Commit")
	u.Commit()

	assert.Same(t, keep, c.Concurrency("keep"))
	assert.EqualValues(t, 1, c.Concurrency("keep").Inflight(), "the kept limiter keeps its requests in flight")
	assert.EqualValues(t, 50, c.Concurrency("bound").Limit(), "the new bound applies: initial_limit capped at max_limit")
	assert.Nil(t, c.Concurrency("gone"))
	names := c.set.ListMetricNames()
	assert.Contains(t, names, `sentinel_concurrency_limit{upstream="new"}`)
	assert.Contains(t, names, `sentinel_concurrency_limit{upstream="bound"}`)
	assert.NotContains(t, names, `sentinel_concurrency_limit{upstream="gone"}`)
	assert.Equal(t, 1, exposed(`sentinel_concurrency_limit{upstream="bound"} 50`), "the new limiter's series, once")
	assert.Contains(t, c.State().Upstreams, "new")
}

// TestStageInvalidChangesNothing: an invalid section is refused whole, by
// the validation that runs before anything is staged.
func TestStageInvalidChangesNothing(t *testing.T) {
	c := newTestController(t, Config{}, "api")
	l := c.Concurrency("api")
	bad := Config{Thresholds: Thresholds{Moderate: 0.9, Aggressive: 0.8, Critical: 0.95}}
	bad.SetDefaults()
	err := bad.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "adaptive.thresholds")
	assert.Same(t, l, c.Concurrency("api"))
	assert.Equal(t, 0.5, c.tune.Load().Thresholds.Moderate)
}

func TestLiveKeys(t *testing.T) {
	for key, live := range map[string]bool{
		"thresholds.moderate": true, "weights.cpu": true, "exit_hold": true, "concurrency.max_limit": true,
		"concurrency.upstreams": true, "enabled": false, "sample_interval": false, "cluster_interval": false,
		"pressure_ttl": false, "concurrency.enabled": false,
	} {
		assert.Equal(t, live, Live(key), key)
	}
}

// provisioned fills cfg's defaults and validates it, as loading the
// configuration does before New or Stage sees the section.
func provisioned(cfg Config) Config {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	return cfg
}
