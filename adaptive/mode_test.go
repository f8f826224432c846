package adaptive

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testConfig() *Config {
	var c Config
	c.SetDefaults()
	return &c
}

// run feeds pressure p for d in 100ms steps and returns the transitions.
func run(m *machine, now *time.Time, p float64, d time.Duration) []Transition {
	var out []Transition
	for end := now.Add(d); now.Before(end); {
		*now = now.Add(100 * time.Millisecond)
		if tr, ok := m.step(*now, p, 100, 100*time.Millisecond); ok {
			out = append(out, tr)
		}
	}
	return out
}

func TestModeThresholdsEscalateAtOnce(t *testing.T) {
	now := time.Unix(1000, 0)
	m := newMachine(testConfig(), now)
	assert.Empty(t, run(m, &now, 0.3, time.Second))
	assert.Equal(t, Normal, m.mode)
	assert.Equal(t, 1.0, m.multiplier, "Normal mode keeps the configured limits exactly")
	run(m, &now, 0.6, 100*time.Millisecond)
	assert.Equal(t, Moderate, m.mode)
	assert.InDelta(t, 0.4, m.multiplier, 1e-9)
	assert.False(t, m.policy().Strict, "leases shrink near a limit on their own")
	run(m, &now, 0.8, 100*time.Millisecond)
	assert.Equal(t, Aggressive, m.mode)
	assert.True(t, m.policy().BlockFree && m.policy().HeavyOff && m.policy().Strict)
	run(m, &now, 0.95, 100*time.Millisecond)
	assert.Equal(t, Critical, m.mode)
	assert.True(t, m.policy().PremiumOnly && m.policy().CacheOnly)
}

func TestModeLeavesCriticalOnlyAfterHold(t *testing.T) {
	now := time.Unix(1000, 0)
	m := newMachine(testConfig(), now)
	run(m, &now, 0.95, time.Second)
	require.Equal(t, Critical, m.mode)
	// Below the critical threshold but above exit_critical 0.7: stays.
	assert.Empty(t, run(m, &now, 0.8, 10*time.Second))
	assert.Equal(t, Critical, m.mode)
	// Under 0.7 for 4.9s: stays; a blip back up restarts the hold.
	run(m, &now, 0.6, 4800*time.Millisecond)
	run(m, &now, 0.75, 100*time.Millisecond)
	run(m, &now, 0.6, 4800*time.Millisecond)
	assert.Equal(t, Critical, m.mode)
	trs := run(m, &now, 0.6, 300*time.Millisecond)
	require.Len(t, trs, 1)
	assert.Equal(t, Aggressive, trs[0].To, "one step down at a time")
}

func TestModeMinimumDwell(t *testing.T) {
	c := testConfig()
	c.MinDwell = 3 * time.Second
	now := time.Unix(1000, 0)
	m := newMachine(c, now)
	run(m, &now, 0.6, 100*time.Millisecond)
	require.Equal(t, Moderate, m.mode)
	// Low pressure at once: the exit hold (1s) passes, the dwell (3s) not yet.
	run(m, &now, 0.1, 2800*time.Millisecond)
	assert.Equal(t, Moderate, m.mode)
	run(m, &now, 0.1, 300*time.Millisecond)
	assert.Equal(t, Normal, m.mode)
}

func TestModeRampUp(t *testing.T) {
	c := testConfig()
	c.RampUp = 4 * time.Second
	now := time.Unix(1000, 0)
	m := newMachine(c, now)
	run(m, &now, 0.8, 3*time.Second)
	require.Equal(t, Aggressive, m.mode)
	require.InDelta(t, 0.2, m.multiplier, 1e-9)
	for m.mode != Moderate {
		run(m, &now, 0.6, 100*time.Millisecond)
	}
	assert.LessOrEqual(t, m.multiplier, 0.25, "limits do not jump back at once")
	prev := m.multiplier
	for range 30 {
		run(m, &now, 0.6, 100*time.Millisecond)
		assert.GreaterOrEqual(t, m.multiplier, prev)
		prev = m.multiplier
	}
	run(m, &now, 0.6, 2*time.Second)
	assert.InDelta(t, 0.4, m.multiplier, 1e-9, "Moderate's own multiplier once the ramp is over")
	for m.mode != Normal {
		run(m, &now, 0.0, 100*time.Millisecond)
	}
	assert.Equal(t, 1.0, m.multiplier, "Normal mode: the configured limits, exactly")
}

func TestModeSpikePrediction(t *testing.T) {
	now := time.Unix(1000, 0)
	m := newMachine(testConfig(), now)
	step := func(m *machine, p, rate float64) {
		now = now.Add(100 * time.Millisecond)
		m.step(now, p, rate, 100*time.Millisecond)
	}
	for range 100 {
		step(m, 0.6, 1000)
	}
	require.Equal(t, Moderate, m.mode)
	require.InDelta(t, 0.4, m.multiplier, 1e-9)
	step(m, 0.6, 2000) // 2× the average in Moderate mode: cut ahead of the pressure
	assert.True(t, m.spiking)
	assert.InDelta(t, 0.32, m.multiplier, 1e-9)
	// In Normal mode a spike does not touch the limits, whatever the
	// pressure below Moderate.
	for _, p := range []float64{0.1, 0.45} {
		m2 := newMachine(testConfig(), now)
		for range 100 {
			step(m2, p, 1000)
		}
		step(m2, p, 3000)
		assert.False(t, m2.spiking)
		assert.Equal(t, 1.0, m2.multiplier)
	}
}

func TestModeNoFlappingOnNoise(t *testing.T) {
	now := time.Unix(1000, 0)
	m := newMachine(testConfig(), now)
	r := rand.New(rand.NewPCG(1, 2))
	var trs []Transition
	for range 600 { // one minute of noise of ±0.04 around the Moderate threshold
		now = now.Add(100 * time.Millisecond)
		if tr, ok := m.step(now, 0.5+(r.Float64()-0.5)*0.08, 100, 100*time.Millisecond); ok {
			trs = append(trs, tr)
		}
	}
	assert.LessOrEqual(t, len(trs), 1, "transitions: %v", trs)
}

func TestScoreSaturatedUpstreamIsNotDiluted(t *testing.T) {
	w := testConfig().Weights
	s := Signals{CPU: 0.1, Memory: 0.0, UpstreamLatency: 1}
	p := score(s, w)
	assert.GreaterOrEqual(t, p, 0.9, "a saturated upstream with an idle gateway must reach Critical")
	assert.Less(t, score(Signals{CPU: 0.2, Memory: 0.1, Inflight: 0.1}, w), 0.5)
}

func TestConfigValidation(t *testing.T) {
	c := testConfig()
	c.Thresholds = Thresholds{Moderate: 0.8, Aggressive: 0.75, Critical: 0.9}
	assert.ErrorContains(t, c.Validate(), "adaptive.thresholds")
	c = testConfig()
	c.Weights.CPU = -1
	assert.ErrorContains(t, c.Validate(), "adaptive.weights.cpu")
	assert.NoError(t, testConfig().Validate())
}

// TestCPUIsTheProcesssOwn: an idle gateway reads little CPU pressure even
// when the host is busy (other test binaries run beside this one).
func TestCPUIsTheProcesssOwn(t *testing.T) {
	h := newHostSampler()
	now := time.Now()
	_, err := h.cpuLoad(now)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	v, err := h.cpuLoad(time.Now())
	require.NoError(t, err)
	if !h.cgroupCPU {
		assert.Less(t, v, 0.5, "a sleeping process is not under CPU pressure")
	}
}
