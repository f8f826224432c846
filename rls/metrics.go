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

	callDuration = metrics.NewPrometheusHistogramExt(`sentinel_rls_request_duration_seconds`, callBuckets)
)

// callBuckets are Prometheus `le` bounds, so that histogram_quantile reads
// the family: a call decided from local leases takes tens of microseconds, one
// that waits for the store up to limits.store_timeout.
var callBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}
