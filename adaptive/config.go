package adaptive

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
)

// Config is the `adaptive` section.
type Config struct {
	// Enabled switches the whole layer on (default true); false: rate limits
	// only, Normal policy always.
	Enabled *bool `mapstructure:"enabled"`
	// SampleInterval is how often the signals are read. Default 100ms.
	SampleInterval time.Duration `mapstructure:"sample_interval"`
	// ClusterInterval is how often the pod publishes its score to Redis and
	// reads the cluster's average. Default 500ms.
	ClusterInterval time.Duration `mapstructure:"cluster_interval"`
	// PressureTTL is how long a pod's published score counts. Default 3s.
	PressureTTL time.Duration `mapstructure:"pressure_ttl"`
	// Weights of the signals in the pressure score (CPU, memory, scheduler
	// latency, in-flight, upstream errors and upstream latency). They need
	// not sum to 1: the sum is normalised.
	Weights Weights `mapstructure:"weights"`
	// Thresholds of the modes.
	Thresholds Thresholds `mapstructure:"thresholds"`
	// ExitCritical and ExitCriticalHold: leave Critical only after the
	// pressure stayed below ExitCritical for ExitCriticalHold. Defaults 0.7, 5s.
	ExitCritical     float64       `mapstructure:"exit_critical"`
	ExitCriticalHold time.Duration `mapstructure:"exit_critical_hold"`
	// ExitMargin and ExitHold: leave another mode only after the pressure
	// stayed ExitMargin below its threshold for ExitHold. Defaults 0.05, 1s.
	ExitMargin float64       `mapstructure:"exit_margin"`
	ExitHold   time.Duration `mapstructure:"exit_hold"`
	// MinDwell is the least time spent in a mode before stepping down.
	// Default 2s.
	MinDwell time.Duration `mapstructure:"min_dwell"`
	// RampUp is how long limits take to grow back after stepping down.
	// Default 5s.
	RampUp time.Duration `mapstructure:"ramp_up"`
	// SpikeFactor and SpikeCut: a request rate above SpikeFactor × its
	// moving average, while the pressure is elevated, cuts limits by
	// SpikeCut ahead of the pressure. Defaults 1.5, 0.2.
	SpikeFactor float64 `mapstructure:"spike_factor"`
	SpikeCut    float64 `mapstructure:"spike_cut"`
	// MaxInflight is the capacity the in-flight signal is measured against.
	// Default 2000.
	MaxInflight int `mapstructure:"max_inflight"`
	// UpstreamLatencyObjective is the upstream latency that counts as no
	// pressure; 2.25 times it is full pressure. Default 250ms.
	UpstreamLatencyObjective time.Duration `mapstructure:"upstream_latency_objective"`
	// SchedLatencyObjective is the Go scheduler latency (p99) that counts as
	// full pressure. Default 20ms.
	SchedLatencyObjective time.Duration `mapstructure:"sched_latency_objective"`
	// Concurrency configures the per-upstream adaptive concurrency limit.
	Concurrency ConcurrencyConfig `mapstructure:"concurrency"`
}

// Weights of the pressure signals.
type Weights struct {
	CPU             float64 `mapstructure:"cpu"`
	Memory          float64 `mapstructure:"memory"`
	Scheduler       float64 `mapstructure:"scheduler"`
	Inflight        float64 `mapstructure:"inflight"`
	UpstreamErrors  float64 `mapstructure:"upstream_errors"`
	UpstreamLatency float64 `mapstructure:"upstream_latency"`
}

// Thresholds are the pressures at which each mode starts.
type Thresholds struct {
	Moderate   float64 `mapstructure:"moderate"`
	Aggressive float64 `mapstructure:"aggressive"`
	Critical   float64 `mapstructure:"critical"`
}

// ConcurrencyConfig is `adaptive.concurrency`.
type ConcurrencyConfig struct {
	// Enabled (default true) puts a limiter in front of every upstream.
	Enabled *bool `mapstructure:"enabled"`
	// InitialLimit, MinLimit, MaxLimit bound the requests in flight to one
	// upstream from this pod. Defaults 100, 4, 2000. MinLimit is the floor
	// under backpressure; on latency alone the limit also stays above what
	// the upstream recently served with healthy latency (a learned floor).
	InitialLimit int `mapstructure:"initial_limit"`
	MinLimit     int `mapstructure:"min_limit"`
	MaxLimit     int `mapstructure:"max_limit"`
	// Upstreams overrides InitialLimit, MinLimit and MaxLimit per upstream
	// name, e.g. a floor at a backend's known worker count.
	Upstreams map[string]ConcurrencyBounds `mapstructure:"upstreams"`
	// RTTTolerance and RTTSlack: a short-term upstream latency up to
	// max(RTTTolerance × the long-term baseline, baseline + RTTSlack) is
	// not congestion. The slack keeps a gateway's own CPU contention (a few
	// milliseconds on a fast backend) from reading as a drowning backend.
	// Defaults 1.5 (Gradient2's) and 5ms; the gateway's measured scheduling
	// delay is added to the slack.
	RTTTolerance float64       `mapstructure:"rtt_tolerance"`
	RTTSlack     time.Duration `mapstructure:"rtt_slack"`
	// QueueTimeout is the longest a STANDARD request waits for a slot, and
	// the least a PREMIUM one does (PREMIUM waits up to two upstream round
	// trips, at most 1s); FREE and anonymous requests wait this long only
	// while the upstream is not congested (shed at once while it is).
	// Default 10ms.
	QueueTimeout time.Duration `mapstructure:"queue_timeout"`
	// StandardShare and FreeShare are the fractions of the limit that
	// STANDARD and FREE (and anonymous) requests may fill; PREMIUM may fill
	// all of it. Defaults 0.8 and 0.5.
	StandardShare float64 `mapstructure:"standard_share"`
	FreeShare     float64 `mapstructure:"free_share"`
}

// ConcurrencyBounds is `adaptive.concurrency.upstreams.NAME`; zero fields
// keep the section's value.
type ConcurrencyBounds struct {
	InitialLimit int `mapstructure:"initial_limit"`
	MinLimit     int `mapstructure:"min_limit"`
	MaxLimit     int `mapstructure:"max_limit"`
}

// For returns the section with upstream's bounds applied, without the
// other upstreams' (Upstreams is nil): one limiter's configuration.
func (cc ConcurrencyConfig) For(upstream string) ConcurrencyConfig {
	b := cc.Upstreams[upstream]
	cc.Upstreams = nil
	confutil.SetDefault(&b.InitialLimit, cc.InitialLimit)
	confutil.SetDefault(&b.MinLimit, cc.MinLimit)
	confutil.SetDefault(&b.MaxLimit, cc.MaxLimit)
	cc.InitialLimit, cc.MinLimit, cc.MaxLimit = b.InitialLimit, b.MinLimit, b.MaxLimit
	cc.InitialLimit = max(cc.MinLimit, min(cc.MaxLimit, cc.InitialLimit))
	return cc
}

// SetDefaults fills the zero values.
func (c *Config) SetDefaults() {
	if c.Enabled == nil {
		t := true
		c.Enabled = &t
	}
	confutil.SetDefault(&c.SampleInterval, 100*time.Millisecond)
	confutil.SetDefault(&c.ClusterInterval, 500*time.Millisecond)
	confutil.SetDefault(&c.PressureTTL, 3*time.Second)
	if c.Weights == (Weights{}) {
		c.Weights = Weights{CPU: 0.30, Memory: 0.20, Scheduler: 0.10, Inflight: 0.15, UpstreamErrors: 0.10, UpstreamLatency: 0.15}
	}
	confutil.SetDefault(&c.Thresholds.Moderate, 0.5)
	confutil.SetDefault(&c.Thresholds.Aggressive, 0.75)
	confutil.SetDefault(&c.Thresholds.Critical, 0.9)
	confutil.SetDefault(&c.ExitCritical, 0.7)
	confutil.SetDefault(&c.ExitCriticalHold, 5*time.Second)
	confutil.SetDefault(&c.ExitMargin, 0.05)
	confutil.SetDefault(&c.ExitHold, time.Second)
	confutil.SetDefault(&c.MinDwell, 2*time.Second)
	confutil.SetDefault(&c.RampUp, 5*time.Second)
	confutil.SetDefault(&c.SpikeFactor, 1.5)
	confutil.SetDefault(&c.SpikeCut, 0.2)
	confutil.SetDefault(&c.MaxInflight, 2000)
	confutil.SetDefault(&c.UpstreamLatencyObjective, 250*time.Millisecond)
	confutil.SetDefault(&c.SchedLatencyObjective, 20*time.Millisecond)
	cc := &c.Concurrency
	if cc.Enabled == nil {
		t := true
		cc.Enabled = &t
	}
	confutil.SetDefault(&cc.InitialLimit, 100)
	confutil.SetDefault(&cc.MinLimit, 4)
	confutil.SetDefault(&cc.RTTTolerance, 1.5)
	confutil.SetDefault(&cc.RTTSlack, 5*time.Millisecond)
	confutil.SetDefault(&cc.MaxLimit, 2000)
	confutil.SetDefault(&cc.QueueTimeout, 10*time.Millisecond)
	confutil.SetDefault(&cc.StandardShare, 0.8)
	confutil.SetDefault(&cc.FreeShare, 0.5)
}

// On reports whether the layer is enabled.
func (c *Config) On() bool { return c.Enabled == nil || *c.Enabled }

// Validate checks the section; errors name the YAML key. The error joins one
// line per bad key.
func (c *Config) Validate() error {
	return errors.Join(c.validateModes(), c.validateWeights(), c.validateTimes(), c.validateConcurrency())
}

// validateModes checks the thresholds, the exits and the spike cut.
func (c *Config) validateModes() error {
	var errs []error
	t := c.Thresholds
	if !(0 < t.Moderate && t.Moderate < t.Aggressive && t.Aggressive < t.Critical && t.Critical < 1) {
		errs = append(errs, fmt.Errorf("adaptive.thresholds: moderate %v, aggressive %v, critical %v must increase strictly within (0, 1)",
			t.Moderate, t.Aggressive, t.Critical))
	}
	if !(0 < c.ExitCritical && c.ExitCritical < t.Critical) {
		errs = append(errs, fmt.Errorf("adaptive.exit_critical: %v must be in (0, thresholds.critical %v)", c.ExitCritical, t.Critical))
	}
	if c.ExitMargin < 0 || c.ExitMargin >= t.Moderate {
		errs = append(errs, fmt.Errorf("adaptive.exit_margin: %v must be in [0, thresholds.moderate)", c.ExitMargin))
	}
	if c.SpikeFactor <= 1 {
		errs = append(errs, fmt.Errorf("adaptive.spike_factor: %v must be > 1", c.SpikeFactor))
	}
	if c.SpikeCut < 0 || c.SpikeCut >= 1 {
		errs = append(errs, fmt.Errorf("adaptive.spike_cut: %v must be in [0, 1)", c.SpikeCut))
	}
	errs = append(errs, confutil.AtLeastOne("adaptive.max_inflight", c.MaxInflight))
	return errors.Join(errs...)
}

// validateWeights checks the signal weights.
func (c *Config) validateWeights() error {
	var errs []error
	w := c.Weights
	for _, f := range []struct {
		k string
		v float64
	}{{"cpu", w.CPU}, {"memory", w.Memory}, {"scheduler", w.Scheduler}, {"inflight", w.Inflight},
		{"upstream_errors", w.UpstreamErrors}, {"upstream_latency", w.UpstreamLatency}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			errs = append(errs, fmt.Errorf("adaptive.weights.%s: %v must be a finite number >= 0", f.k, f.v))
		}
	}
	if !(w.CPU+w.Memory+w.Scheduler+w.Inflight+w.UpstreamErrors+w.UpstreamLatency > 0) {
		errs = append(errs, errors.New("adaptive.weights: all zero; at least one weight must be > 0"))
	}
	return errors.Join(errs...)
}

// validateTimes checks the durations.
func (c *Config) validateTimes() error {
	var errs []error
	for _, d := range []struct {
		k string
		v time.Duration
	}{{"sample_interval", c.SampleInterval}, {"cluster_interval", c.ClusterInterval}, {"pressure_ttl", c.PressureTTL},
		{"exit_critical_hold", c.ExitCriticalHold}, {"exit_hold", c.ExitHold}, {"min_dwell", c.MinDwell},
		{"ramp_up", c.RampUp}, {"upstream_latency_objective", c.UpstreamLatencyObjective},
		{"sched_latency_objective", c.SchedLatencyObjective}, {"concurrency.queue_timeout", c.Concurrency.QueueTimeout}} {
		errs = append(errs, confutil.Positive("adaptive."+d.k, d.v))
	}
	if c.SampleInterval > 0 && c.SampleInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("adaptive.sample_interval: %v is shorter than 10ms", c.SampleInterval))
	}
	if c.PressureTTL <= c.ClusterInterval {
		errs = append(errs, fmt.Errorf("adaptive.pressure_ttl: %v must be longer than adaptive.cluster_interval %v", c.PressureTTL, c.ClusterInterval))
	}
	return errors.Join(errs...)
}

// validateConcurrency checks the concurrency section.
func (c *Config) validateConcurrency() error {
	var errs []error
	cc := c.Concurrency
	if !(1 <= cc.MinLimit && cc.MinLimit <= cc.InitialLimit && cc.InitialLimit <= cc.MaxLimit) {
		errs = append(errs, fmt.Errorf("adaptive.concurrency: min_limit %d <= initial_limit %d <= max_limit %d must hold, all >= 1",
			cc.MinLimit, cc.InitialLimit, cc.MaxLimit))
	}
	for _, name := range slices.Sorted(maps.Keys(cc.Upstreams)) {
		b, u := cc.Upstreams[name], cc.For(name)
		if b.MinLimit < 0 || b.MaxLimit < 0 || b.InitialLimit < 0 || u.MinLimit > u.MaxLimit {
			errs = append(errs, fmt.Errorf("adaptive.concurrency.upstreams.%s: min_limit %d <= max_limit %d must hold, all >= 0",
				name, u.MinLimit, u.MaxLimit))
		}
	}
	if cc.RTTTolerance < 1 || math.IsNaN(cc.RTTTolerance) || math.IsInf(cc.RTTTolerance, 0) {
		errs = append(errs, fmt.Errorf("adaptive.concurrency.rtt_tolerance: %v must be a finite number >= 1", cc.RTTTolerance))
	}
	if cc.RTTSlack < 0 {
		errs = append(errs, fmt.Errorf("adaptive.concurrency.rtt_slack: %v must not be negative", cc.RTTSlack))
	}
	if !(0 < cc.FreeShare && cc.FreeShare <= cc.StandardShare && cc.StandardShare <= 1) {
		errs = append(errs, fmt.Errorf("adaptive.concurrency: free_share %v <= standard_share %v must hold within (0, 1]", cc.FreeShare, cc.StandardShare))
	}
	return errors.Join(errs...)
}
