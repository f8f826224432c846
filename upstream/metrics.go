package upstream

import (
	"strings"

	"github.com/VictoriaMetrics/metrics"
)

// Breaker states as exported by sentinel_upstream_breaker_state.
const (
	stateClosed   int32 = 0
	stateHalfOpen int32 = 1
	stateOpen     int32 = 2
)

var stateNames = [...]string{stateClosed: "closed", stateHalfOpen: "half_open", stateOpen: "open"}

// targetMetrics are one target's series, created once at construction; the
// labels come from the configuration, so their number is bounded. names
// lists the series, for unregistering them when the pool is retired.
type targetMetrics struct {
	success, failure, timeout *metrics.Counter
	backpressure              *metrics.Counter
	removalRefused            *metrics.Counter
	healthy, breakerState     *metrics.Gauge
	transitions               [3]*metrics.Counter // indexed by breaker state
	ejections                 *metrics.Counter
	cutIdle, cutTotal         *metrics.Counter // answers cut by body_idle_timeout, body_timeout
	names                     []string
}

func newTargetMetrics(pool, target string) *targetMetrics {
	l := `upstream="` + escapeLabel(pool) + `",target="` + escapeLabel(target) + `"`
	m := &targetMetrics{}
	counter := func(name string) *metrics.Counter {
		m.names = append(m.names, name)
		return metrics.GetOrCreateCounter(name)
	}
	gauge := func(name string) *metrics.Gauge {
		m.names = append(m.names, name)
		return metrics.GetOrCreateGauge(name, nil)
	}
	m.success = counter(`sentinel_upstream_requests_total{` + l + `,outcome="success"}`)
	m.failure = counter(`sentinel_upstream_requests_total{` + l + `,outcome="error"}`)
	m.timeout = counter(`sentinel_upstream_requests_total{` + l + `,outcome="timeout"}`)
	m.backpressure = counter(`sentinel_upstream_requests_total{` + l + `,outcome="backpressure"}`)
	m.removalRefused = counter(`sentinel_upstream_removals_refused_total{` + l + `}`)
	m.healthy = gauge(`sentinel_upstream_target_healthy{` + l + `}`)
	m.breakerState = gauge(`sentinel_upstream_breaker_state{` + l + `}`)
	m.ejections = counter(`sentinel_upstream_ejections_total{` + l + `}`)
	m.cutIdle = counter(`sentinel_upstream_cut_answers_total{` + l + `,reason="body_idle"}`)
	m.cutTotal = counter(`sentinel_upstream_cut_answers_total{` + l + `,reason="body_timeout"}`)
	for s, name := range stateNames {
		m.transitions[s] = counter(`sentinel_upstream_breaker_transitions_total{` + l + `,to="` + name + `"}`)
	}
	return m
}

// latencyName and panicName are a pool's own series.
func latencyName(pool string) string {
	return `sentinel_upstream_latency_seconds{upstream="` + escapeLabel(pool) + `"}`
}

func panicName(pool string) string {
	return `sentinel_upstream_panic_total{upstream="` + escapeLabel(pool) + `"}`
}

func newLatency(pool string) *metrics.PrometheusHistogram {
	return metrics.GetOrCreatePrometheusHistogram(latencyName(pool))
}

// seriesNames lists every series of p: its own and its targets'.
func (p *Pool) seriesNames() []string {
	names := []string{latencyName(p.name), panicName(p.name)}
	for _, t := range p.targets {
		names = append(names, t.m.names...)
	}
	return names
}

// escapeLabel escapes a Prometheus label value.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
