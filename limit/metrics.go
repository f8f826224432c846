package limit

import (
	"sync"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Metrics of every Limiter in the process: the rate_limit_* names that
// rate-limiter dashboards commonly expect, and Sentinel's own
// sentinel_limit_*; see docs/metrics.md.
var (
	storeErrors       = metrics.NewCounter(`rate_limit_errors_total`)
	decisionLatency   = latencySet.NewPrometheusHistogramExt(`rate_limit_latency_ms`, latencyBucketsMS)
	storeCallsOK      = metrics.NewCounter(`sentinel_limit_store_calls_total{result="ok"}`)
	storeCallsError   = metrics.NewCounter(`sentinel_limit_store_calls_total{result="error"}`)
	storeCallsTimeout = metrics.NewCounter(`sentinel_limit_store_calls_total{result="timeout"}`)
	storeCallsSkipped = metrics.NewCounter(`sentinel_limit_store_calls_total{result="breaker_open"}`)
	leaseSize         = metrics.NewPrometheusHistogramExt(`sentinel_limit_lease_size`, []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 1024})
	localHits         = metrics.NewCounter(`sentinel_limit_local_hits_total`)
	expiredPermits    = metrics.NewCounter(`sentinel_limit_expired_permits_total`)
	returnedPermits   = metrics.NewCounter(`sentinel_limit_returned_permits_total`)
	reportedUsed      = metrics.NewCounter(`sentinel_limit_redated_permits_total`)
	reportedOwn       = metrics.NewCounter(`sentinel_limit_fallback_permits_reported_total`)
	lateReturns       = metrics.NewCounter(`sentinel_limit_late_lease_returns_total`)
	cachedDenials     = metrics.NewCounter(`sentinel_limit_cached_denials_total`)
	repeatsSpared     = metrics.NewCounter(`sentinel_limit_request_id_repeats_total{result="spared"}`)
	repeatsCounted    = metrics.NewCounter(`sentinel_limit_request_id_repeats_total{result="counted"}`)
	fallbackLocal     = metrics.NewCounter(`sentinel_limit_fallback_decisions_total{policy="local"}`)
	fallbackOpen      = metrics.NewCounter(`sentinel_limit_fallback_decisions_total{policy="open"}`)
	fallbackClosed    = metrics.NewCounter(`sentinel_limit_fallback_decisions_total{policy="closed"}`)
	// Refusals of the local policy: the pod's share of the limit is spent,
	// or the store's last answer left too little (Limiter.fallbackRoom).
	fallbackDeniedShare  = metrics.NewCounter(`sentinel_limit_fallback_denials_total{reason="local_share"}`)
	fallbackDeniedAnswer = metrics.NewCounter(`sentinel_limit_fallback_denials_total{reason="last_answer"}`)
	// Store grants returned at once because the pod keeps to its local
	// share for a window after deciding locally (Limiter.keepShare).
	recoveryTrims   = metrics.NewCounter(`sentinel_limit_recovery_trimmed_permits_total`)
	breakerOpenings = metrics.NewCounter(`sentinel_limit_breaker_openings_total`)
	_               = metrics.NewGauge(`sentinel_limit_breaker_state`, func() float64 { return float64(maxBreakerState()) })
	_               = metrics.NewGauge(`sentinel_limit_local_buckets`, func() float64 { return float64(totalBuckets()) })
)

// latencyBucketsMS are the upper bounds of rate_limit_latency_ms: a local
// decision takes well under 0.01 ms, a store call about 0.1 to 1 ms.
var latencyBucketsMS = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100}

// live holds the Limiters of the process for the gauges (tests build many).
var live sync.Map // *Limiter → struct{}

func maxBreakerState() int32 {
	st := breakerClosed
	live.Range(func(k, _ any) bool {
		st = max(st, k.(*Limiter).breakerState())
		return true
	})
	return st
}

// breakerChanged counts the openings of node i's breaker.
func (l *Limiter) breakerChanged(i int, to int32) {
	if to != breakerOpen {
		return
	}
	breakerOpenings.Inc()
	if name := l.nodeName(i); name != "" {
		l.nodeMetrics(i)
		metrics.GetOrCreateCounter(`sentinel_limit_node_breaker_openings_total{node="` + catalog.EscapeLabel(name) + `"}`).Inc()
	}
}

// nodeName names node i of the store ("" when the store has one node that
// it does not name, or no node i).
func (l *Limiter) nodeName(i int) string {
	if l.nodes == nil {
		return ""
	}
	return l.nodes.NodeName(i)
}

// nodeMetrics registers the per-node series of node i once it has a name:
// its breaker state, the worst among the process's limiters (a reload
// builds a new limiter over the same store), and its openings.
func (l *Limiter) nodeMetrics(i int) {
	name := l.nodeName(i)
	if name == "" {
		return
	}
	label := `{node="` + catalog.EscapeLabel(name) + `"}`
	metrics.GetOrCreateGauge(`sentinel_limit_node_breaker_state`+label, func() float64 {
		st := breakerClosed
		live.Range(func(k, _ any) bool {
			o := k.(*Limiter)
			for j := range o.breakers {
				if o.nodeName(j) == name {
					st = max(st, o.breakers[j].state.Load())
				}
			}
			return true
		})
		return float64(st)
	})
	metrics.GetOrCreateCounter(`sentinel_limit_node_breaker_openings_total` + label)
	metrics.GetOrCreateCounter(`sentinel_limit_node_store_failures_total` + label)
}

// nodeFailed counts a store call for a key of node i that failed or timed
// out (not one the breaker skipped).
func (l *Limiter) nodeFailed(i int) {
	if name := l.nodeName(i); name != "" {
		l.nodeMetrics(i)
		metrics.GetOrCreateCounter(`sentinel_limit_node_store_failures_total{node="` + catalog.EscapeLabel(name) + `"}`).Inc()
	}
}

func totalBuckets() int {
	n := 0
	live.Range(func(k, _ any) bool {
		n += k.(*Limiter).table.len()
		return true
	})
	return n
}

// countRepeat counts an answer to a call with a request ID seen before:
// spared within its allowance, counted as a new request past it.
func countRepeat(res *store.LeaseResult) {
	switch {
	case res.Duplicate:
		repeatsSpared.Inc()
	case res.Repeated:
		repeatsCounted.Inc()
	}
}
