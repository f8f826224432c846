package limit

import (
	"sync"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Metrics of every Limiter in the process: the rate_limit_* names that
// rate-limiter dashboards commonly expect, and Sentinel's own
// sentinel_limit_*; see docs/metrics.md.
var (
	storeErrors       = metrics.NewCounter(`rate_limit_errors_total`)
	storeCallsOK      = metrics.NewCounter(`sentinel_limit_store_calls_total{result="ok"}`)
	storeCallsError   = metrics.NewCounter(`sentinel_limit_store_calls_total{result="error"}`)
	storeCallsTimeout = metrics.NewCounter(`sentinel_limit_store_calls_total{result="timeout"}`)
	storeCallsSkipped = metrics.NewCounter(`sentinel_limit_store_calls_total{result="breaker_open"}`)
	leaseSize         = metrics.NewPrometheusHistogramExt(`sentinel_limit_lease_size`, []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 1024})
	localHits         = metrics.NewCounter(`sentinel_limit_local_hits_total`)
	expiredPermits    = metrics.NewCounter(`sentinel_limit_expired_permits_total`)
	returnedPermits   = metrics.NewCounter(`sentinel_limit_returned_permits_total`)
	reportedUsed      = metrics.NewCounter(`sentinel_limit_redated_permits_total`)
	reportedUnleased  = metrics.NewCounter(`sentinel_limit_fallback_permits_reported_total`)
	lateReturns       = metrics.NewCounter(`sentinel_limit_late_lease_returns_total`)
	storeAnswersLate  = metrics.NewCounter(`sentinel_limit_store_answers_late_total`)
	cachedDenials     = metrics.NewCounter(`sentinel_limit_cached_denials_total`)
	repeatsSpared     = metrics.NewCounter(`sentinel_limit_request_id_repeats_total{result="spared"}`)
	repeatsCounted    = metrics.NewCounter(`sentinel_limit_request_id_repeats_total{result="counted"}`)
	fallbackLocal     = metrics.NewCounter(`sentinel_limit_fallback_decisions_total{policy="local"}`)
	fallbackOpen      = metrics.NewCounter(`sentinel_limit_fallback_decisions_total{policy="open"}`)
	fallbackClosed    = metrics.NewCounter(`sentinel_limit_fallback_decisions_total{policy="closed"}`)
	// Permits the local policy let through on keys the store had never
	// answered on this pod: nothing told it whether their clients ask more
	// than the limit (docs/leases.md, which bound holds).
	fallbackUnanswered = metrics.NewCounter(`sentinel_limit_fallback_unanswered_grants_total`)
	// Refusals of the local policy: the pod's share of the limit is spent,
	// or the store's last answer left too little (Limiter.fallbackRoom).
	fallbackDeniedShare  = metrics.NewCounter(`sentinel_limit_fallback_denials_total{reason="local_share"}`)
	fallbackDeniedAnswer = metrics.NewCounter(`sentinel_limit_fallback_denials_total{reason="last_answer"}`)
	// Store grants returned at once because the pod keeps to its local
	// share for a window after deciding locally (Limiter.keepShare).
	recoveryTrims = metrics.NewCounter(`sentinel_limit_recovery_trimmed_permits_total`)
	// slightGrants counts the store grants the local share did not count
	// (see Limiter.useLocally).
	slightGrants = metrics.NewCounter(`sentinel_limit_share_slight_grants_total`)
	_            = metrics.NewGauge(`sentinel_limit_local_buckets`, func() float64 { return float64(totalBuckets()) })
)

// live holds the Limiters of the process for the gauges (tests build many).
var live sync.Map // *Limiter → struct{}

func totalBuckets() int {
	n := 0
	seen := map[*bucketTable]bool{} // a reload's limiter shares its predecessor's
	live.Range(func(k, _ any) bool {
		if t := k.(*Limiter).table; !seen[t] {
			seen[t] = true
			n += t.len()
		}
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
