package limit

import (
	"sync"

	"github.com/VictoriaMetrics/metrics"
)

// Metrics of every Limiter in the process. Names follow seed 002
// (rate_limit_*) and Sentinel's own (sentinel_limit_*); see docs/metrics.md.
var (
	storeErrors       = metrics.NewCounter(`rate_limit_errors_total`)
	decisionLatency   = metrics.NewPrometheusHistogramExt(`rate_limit_latency_ms`, latencyBucketsMS)
	storeCallsOK      = metrics.NewCounter(`sentinel_limit_store_calls_total{result="ok"}`)
	storeCallsError   = metrics.NewCounter(`sentinel_limit_store_calls_total{result="error"}`)
	storeCallsTimeout = metrics.NewCounter(`sentinel_limit_store_calls_total{result="timeout"}`)
	storeCallsSkipped = metrics.NewCounter(`sentinel_limit_store_calls_total{result="breaker_open"}`)
	leaseSize         = metrics.NewPrometheusHistogramExt(`sentinel_limit_lease_size`, []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 1024})
	localHits         = metrics.NewCounter(`sentinel_limit_local_hits_total`)
	expiredPermits    = metrics.NewCounter(`sentinel_limit_expired_permits_total`)
	cachedDenials     = metrics.NewCounter(`sentinel_limit_cached_denials_total`)
	fallbackLocal     = metrics.NewCounter(`sentinel_limit_fallback_decisions_total{policy="local"}`)
	fallbackOpen      = metrics.NewCounter(`sentinel_limit_fallback_decisions_total{policy="open"}`)
	fallbackClosed    = metrics.NewCounter(`sentinel_limit_fallback_decisions_total{policy="closed"}`)
	breakerOpenings   = metrics.NewCounter(`sentinel_limit_breaker_openings_total`)
	_                 = metrics.NewGauge(`sentinel_limit_breaker_state`, func() float64 { return float64(maxBreakerState()) })
	_                 = metrics.NewGauge(`sentinel_limit_local_buckets`, func() float64 { return float64(totalBuckets()) })
)

// latencyBucketsMS are the upper bounds of rate_limit_latency_ms: a local
// decision takes well under 0.01 ms, a store call about 0.1 to 1 ms.
var latencyBucketsMS = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100}

// live holds the Limiters of the process for the gauges (tests build many).
var live sync.Map // *Limiter → struct{}

func maxBreakerState() int32 {
	st := breakerClosed
	live.Range(func(k, _ any) bool {
		st = max(st, k.(*Limiter).breaker.state.Load())
		return true
	})
	return st
}

func totalBuckets() int {
	n := 0
	live.Range(func(k, _ any) bool {
		n += k.(*Limiter).table.len()
		return true
	})
	return n
}

// maxLabelSets bounds the (tenant, resource) label pairs; further pairs are
// counted under tenant="other", resource="other".
const maxLabelSets = 1000

// decisionCounters are the per (tenant, resource) counters of seed 002.
type decisionCounters struct {
	requests, allowed, blocked, shadowBlocked *metrics.Counter
}

type labelKey struct{ tenant, resource string }

var (
	labelMu   sync.RWMutex
	labelSets = map[labelKey]*decisionCounters{}
)

// countersFor returns the counters of a label pair without allocating once
// the pair has been seen.
func countersFor(tenant, resource string) *decisionCounters {
	if tenant == "" {
		tenant = "anonymous"
	}
	if resource == "" {
		resource = "none"
	}
	k := labelKey{tenant, resource}
	labelMu.RLock()
	c := labelSets[k]
	labelMu.RUnlock()
	if c != nil {
		return c
	}
	labelMu.Lock()
	defer labelMu.Unlock()
	if c = labelSets[k]; c != nil {
		return c
	}
	if len(labelSets) >= maxLabelSets {
		k = labelKey{"other", "other"}
		if c = labelSets[k]; c != nil {
			return c
		}
	}
	labels := `{tenant="` + escapeLabel(k.tenant) + `",resource="` + escapeLabel(k.resource) + `"}`
	c = &decisionCounters{
		requests:      metrics.GetOrCreateCounter(`rate_limit_requests_total` + labels),
		allowed:       metrics.GetOrCreateCounter(`rate_limit_allowed_total` + labels),
		blocked:       metrics.GetOrCreateCounter(`rate_limit_blocked_total` + labels),
		shadowBlocked: metrics.GetOrCreateCounter(`rate_limit_shadow_blocked_total` + labels),
	}
	labelSets[k] = c
	return c
}

// escapeLabel keeps label values printable; tenant and resource names are
// validated to [A-Za-z0-9._-], so this only guards the check API's input.
func escapeLabel(s string) string {
	out := []byte(nil)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' || c < 0x20 || c >= 0x7f {
			if out == nil {
				out = []byte(s[:i])
			}
			out = append(out, '_')
			continue
		}
		if out != nil {
			out = append(out, c)
		}
	}
	if out == nil {
		return s
	}
	return string(out)
}
