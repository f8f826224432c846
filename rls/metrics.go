package rls

import "github.com/VictoriaMetrics/metrics"

// Every ShouldRateLimit call is counted once by its outcome, and every
// descriptor once by its decision.
var (
	callsOK            = metrics.NewCounter(`sentinel_rls_requests_total{result="ok"}`)
	callsOverLimit     = metrics.NewCounter(`sentinel_rls_requests_total{result="over_limit"}`)
	callsInvalid       = metrics.NewCounter(`sentinel_rls_requests_total{result="invalid"}`)
	callsUnauth        = metrics.NewCounter(`sentinel_rls_requests_total{result="unauthenticated"}`)
	callsUnavailable   = metrics.NewCounter(`sentinel_rls_requests_total{result="unavailable"}`)
	callsUnknownDomain = metrics.NewCounter(`sentinel_rls_requests_total{result="unknown_domain"}`)

	descOK        = metrics.NewCounter(`sentinel_rls_descriptors_total{decision="ok"}`)
	descOverLimit = metrics.NewCounter(`sentinel_rls_descriptors_total{decision="over_limit"}`)
	descShadowed  = metrics.NewCounter(`sentinel_rls_descriptors_total{decision="shadowed"}`)
	descNoLimit   = metrics.NewCounter(`sentinel_rls_descriptors_total{decision="no_limit"}`)

	callDuration = metrics.NewHistogram(`sentinel_rls_request_duration_seconds`)
)
