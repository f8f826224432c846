package limit

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
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
	redatedPermits    = metrics.NewCounter(`sentinel_limit_redated_permits_total`)
	reportedPermits   = metrics.NewCounter(`sentinel_limit_fallback_permits_reported_total`)
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
	// Store grants given back at once because the pod keeps to its local
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
		metrics.GetOrCreateCounter(`sentinel_limit_node_breaker_openings_total{node="` + escapeLabel(name) + `"}`).Inc()
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
	label := `{node="` + escapeLabel(name) + `"}`
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
		metrics.GetOrCreateCounter(`sentinel_limit_node_store_failures_total{node="` + escapeLabel(name) + `"}`).Inc()
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

// maxLabelSets bounds the (tenant, resource) label pairs as a last resort
// (tenants created through the API are not bounded by the configuration);
// further pairs are counted under tenant="other", resource="other".
const maxLabelSets = 10000

// Label values of the per (tenant, resource) counters. A tenant is labelled by
// its ID and a resource by its name only while some catalog knows them (a
// tenant of config.yaml or the API; a resource of a rule or a route); any
// other name is labelOther, so that names sent to the check API cannot
// create series.
const (
	labelAnonymous = "anonymous" // requests without a known tenant
	labelNone      = "none"      // requests without a resource
	labelOther     = "other"     // names no catalog knows
)

// decisionCounters are the rate_limit_* counters of one (tenant, resource).
type decisionCounters struct {
	requests, allowed, blocked, shadowBlocked *metrics.Counter
	names                                     [4]string // for unregistering
}

type labelKey struct{ tenant, resource string }

// knownNames are the tenants and resources that get their own label values.
type knownNames struct {
	tenants, resources map[string]struct{}
}

var (
	labelMu   sync.RWMutex // guards labelSets; writers also hold knownMu
	labelSets = map[labelKey]*decisionCounters{}

	knownMu     sync.Mutex // serializes updates of known
	knownByCat  = map[*Catalog]knownNames{}
	known       atomic.Pointer[knownNames] // the union of knownByCat
	labelsFreed = metrics.NewCounter(`sentinel_limit_label_sets_freed_total`)
	_           = metrics.NewGauge(`sentinel_limit_label_sets`, func() float64 {
		labelMu.RLock()
		defer labelMu.RUnlock()
		return float64(len(labelSets))
	})
)

// labelsFor maps a request's tenant and resource to their label values
// without allocating.
func labelsFor(tenant, resource string) labelKey {
	k := known.Load()
	switch {
	case tenant == "":
		tenant = labelAnonymous
	case k == nil:
		tenant = labelOther
	default:
		if _, ok := k.tenants[tenant]; !ok {
			tenant = labelOther
		}
	}
	switch {
	case resource == "":
		resource = labelNone
	case k == nil:
		resource = labelOther
	default:
		if _, ok := k.resources[resource]; !ok {
			resource = labelOther
		}
	}
	return labelKey{tenant, resource}
}

// countersFor returns the counters of a request's (tenant, resource). It
// allocates nothing once the label pair has been used.
func countersFor(tenant, resource string) *decisionCounters {
	k := labelsFor(tenant, resource)
	// Fast path: the pair has its counters.
	labelMu.RLock()
	c := labelSets[k]
	labelMu.RUnlock()
	if c != nil {
		return c
	}
	// Slow path: the first request of this pair.
	knownMu.Lock()
	defer knownMu.Unlock()
	k = labelsFor(tenant, resource) // known may have changed meanwhile
	labelMu.Lock()
	defer labelMu.Unlock()
	if c = labelSets[k]; c != nil {
		return c
	}
	if len(labelSets) >= maxLabelSets {
		k = labelKey{labelOther, labelOther}
		if c = labelSets[k]; c != nil {
			return c
		}
	}
	labels := `{tenant="` + escapeLabel(k.tenant) + `",resource="` + escapeLabel(k.resource) + `"}`
	c = &decisionCounters{names: [4]string{
		`rate_limit_requests_total` + labels, `rate_limit_allowed_total` + labels,
		`rate_limit_blocked_total` + labels, `rate_limit_shadow_blocked_total` + labels,
	}}
	c.requests = metrics.GetOrCreateCounter(c.names[0])
	c.allowed = metrics.GetOrCreateCounter(c.names[1])
	c.blocked = metrics.GetOrCreateCounter(c.names[2])
	c.shadowBlocked = metrics.GetOrCreateCounter(c.names[3])
	labelSets[k] = c
	return c
}

// setKnownLabels records the tenants and resources that cat names, then
// unregisters the counters of every pair that no catalog names any more (a
// deleted tenant, the last rule of a resource). A request that still holds
// such counters increments a counter no longer exported, which is harmless.
func setKnownLabels(cat *Catalog, names knownNames) {
	knownMu.Lock()
	defer knownMu.Unlock()
	knownByCat[cat] = names
	updateKnownLocked()
}

// forgetLabels drops what cat names (Catalog.Close).
func forgetLabels(cat *Catalog) {
	knownMu.Lock()
	defer knownMu.Unlock()
	delete(knownByCat, cat)
	updateKnownLocked()
}

// updateKnownLocked publishes the union of knownByCat and frees the label
// sets it no longer backs (knownMu held).
func updateKnownLocked() {
	union := knownNames{tenants: map[string]struct{}{}, resources: map[string]struct{}{}}
	for _, n := range knownByCat {
		maps.Copy(union.tenants, n.tenants)
		maps.Copy(union.resources, n.resources)
	}
	known.Store(&union)
	labelMu.Lock()
	defer labelMu.Unlock()
	for k, c := range labelSets {
		if labelKnown(union.tenants, k.tenant, labelAnonymous) && labelKnown(union.resources, k.resource, labelNone) {
			continue
		}
		delete(labelSets, k)
		for _, n := range c.names {
			metrics.UnregisterMetric(n)
		}
		labelsFreed.Inc()
	}
}

// labelKnown reports whether a label value is still backed: a known name, or
// one of the fixed values.
func labelKnown(set map[string]struct{}, v, fixed string) bool {
	if v == fixed || v == labelOther {
		return true
	}
	_, ok := set[v]
	return ok
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
