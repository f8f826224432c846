package adaptive

import "github.com/VictoriaMetrics/metrics"

// Each Controller has its own metrics.Set, registered from New to Stop: two
// controllers in one process (tests start several gateways) keep their own
// series, and a stopped one's series are gone.

// addMetrics adds the controller's gauges to c.set. The concurrency
// limiters add theirs when they are built.
func (c *Controller) addMetrics() {
	signals := []struct {
		name string
		f    func(s *Signals) float64
	}{
		{"cpu", func(s *Signals) float64 { return s.CPU }},
		{"memory", func(s *Signals) float64 { return s.Memory }},
		{"scheduler", func(s *Signals) float64 { return s.Scheduler }},
		{"inflight", func(s *Signals) float64 { return s.Inflight }},
		{"upstream_errors", func(s *Signals) float64 { return s.UpstreamErrors }},
		{"upstream_latency", func(s *Signals) float64 { return s.UpstreamLatency }},
	}
	for _, sig := range signals {
		c.set.NewGauge(`sentinel_adaptive_signal{signal="`+sig.name+`"}`, func() float64 {
			return c.locked(func() float64 { return sig.f(&c.signals) })
		})
	}
	pressures := []struct {
		scope string
		f     func() float64
	}{
		{"local", func() float64 { return c.local }},
		{"cluster", c.clusterPressure},
		{"effective", func() float64 { return c.effective }},
	}
	for _, p := range pressures {
		c.set.NewGauge(`sentinel_adaptive_pressure{scope="`+p.scope+`"}`, func() float64 { return c.locked(p.f) })
	}
	c.set.NewGauge(`sentinel_adaptive_forwarded_share`, func() float64 {
		return c.locked(func() float64 { return c.signals.ForwardedShare })
	})
	c.set.NewGauge(`sentinel_adaptive_mode`, func() float64 { return float64(c.Policy().Mode) })
	c.set.NewGauge(`sentinel_adaptive_multiplier`, func() float64 { return c.Policy().Multiplier })
	c.set.NewGauge(`sentinel_adaptive_live_pods`, func() float64 { return float64(c.LivePods()) })
	c.set.NewGauge(`sentinel_adaptive_recent_pods`, func() float64 { return float64(c.RecentPods()) })
	c.set.NewGauge(`sentinel_adaptive_suspect_pods`, func() float64 { return float64(c.SuspectPods()) })
}

// locked returns f() read under c.mu.
func (c *Controller) locked(f func() float64) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return f()
}

// modeTransitions returns the counter of one transition.
func (c *Controller) modeTransitions(from, to Mode) *metrics.Counter {
	return c.set.GetOrCreateCounter(`sentinel_adaptive_mode_transitions_total{from="` + from.String() + `",to="` + to.String() + `"}`)
}

// addMetrics adds the limiter's series for its upstream to set. A limiter
// that a reload replaced must have left set first (removeMetrics): the two
// share the names.
func (c *ConcurrencyLimiter) addMetrics(set *metrics.Set) {
	upstream := `upstream="` + c.name + `"`
	named := func(name string) string {
		c.series = append(c.series, name)
		return name
	}
	set.NewGauge(named(`sentinel_concurrency_limit{`+upstream+`}`), c.Limit)
	set.NewGauge(named(`sentinel_concurrency_inflight{`+upstream+`}`), func() float64 { return float64(c.Inflight()) })
	c.drops = set.NewCounter(named(`sentinel_concurrency_backoffs_total{` + upstream + `}`))
	c.cuts = set.NewCounter(named(`sentinel_concurrency_congestion_cuts_total{` + upstream + `}`))
	c.rebases = set.NewCounter(named(`sentinel_concurrency_rebaselines_total{` + upstream + `}`))
	for _, p := range []Priority{PriorityFree, PriorityStandard, PriorityPremium} {
		for r, reason := range []string{"concurrency", "queue_timeout"} {
			c.shedMetrics[p][r] = set.NewCounter(named(`sentinel_shed_total{` + upstream + `,plan="` + p.String() + `",reason="` + reason + `"}`))
		}
	}
}

// removeMetrics takes the limiter's series out of set. The limiter still
// serves the requests that hold it; their counts are no longer exported.
func (c *ConcurrencyLimiter) removeMetrics(set *metrics.Set) {
	for _, name := range c.series {
		set.UnregisterMetric(name)
	}
}
