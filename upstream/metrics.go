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
// labels come from the configuration, so their number is bounded.
type targetMetrics struct {
	success, failure, timeout *metrics.Counter
	backpressure              *metrics.Counter
	removalRefused            *metrics.Counter
	healthy, breakerState     *metrics.Gauge
	transitions               [3]*metrics.Counter // indexed by breaker state
	ejections                 *metrics.Counter
}

func newTargetMetrics(pool, target string) *targetMetrics {
	l := `upstream="` + escapeLabel(pool) + `",target="` + escapeLabel(target) + `"`
	m := &targetMetrics{
		success:        metrics.GetOrCreateCounter(`sentinel_upstream_requests_total{` + l + `,outcome="success"}`),
		failure:        metrics.GetOrCreateCounter(`sentinel_upstream_requests_total{` + l + `,outcome="error"}`),
		timeout:        metrics.GetOrCreateCounter(`sentinel_upstream_requests_total{` + l + `,outcome="timeout"}`),
		backpressure:   metrics.GetOrCreateCounter(`sentinel_upstream_requests_total{` + l + `,outcome="backpressure"}`),
		removalRefused: metrics.GetOrCreateCounter(`sentinel_upstream_removals_refused_total{` + l + `}`),
		healthy:        metrics.GetOrCreateGauge(`sentinel_upstream_target_healthy{`+l+`}`, nil),
		breakerState:   metrics.GetOrCreateGauge(`sentinel_upstream_breaker_state{`+l+`}`, nil),
		ejections:      metrics.GetOrCreateCounter(`sentinel_upstream_ejections_total{` + l + `}`),
	}
	for s, name := range stateNames {
		m.transitions[s] = metrics.GetOrCreateCounter(`sentinel_upstream_breaker_transitions_total{` + l + `,to="` + name + `"}`)
	}
	return m
}

func newLatency(pool string) *metrics.PrometheusHistogram {
	return metrics.GetOrCreatePrometheusHistogram(`sentinel_upstream_latency_seconds{upstream="` + escapeLabel(pool) + `"}`)
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
