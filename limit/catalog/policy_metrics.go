package catalog

import (
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// maxPolicyLabels bounds the policies that get a label value of their own;
// further ones are counted as policy="other". The names come from the
// configuration file and the admin API only, so the bound is a guard
// against a generated file, not against clients.
const maxPolicyLabels = 200

// otherPolicy is the label value of the policies past maxPolicyLabels.
const otherPolicy = "other"

// PolicyCounters count the decisions of one limit of one policy.
type PolicyCounters struct {
	// Allowed: the limit passed the request (a later limit may still
	// refuse it); Blocked: the limit refused it; ShadowBlocked: it would
	// have, in shadow mode.
	Allowed, Blocked, ShadowBlocked *metrics.Counter
	// The cost of a metered limit (nil for the others): reserved at
	// admission, settled (what the answers cost), returned (reserved
	// beyond what they cost) and overdrawn (what they cost beyond).
	Reserved, Settled, Returned, Overdrawn *metrics.Counter
	// SlotsInUse are a concurrency limit's slots this pod's requests hold
	// (nil for the others).
	SlotsInUse *metrics.Gauge
	// The waits of a limit with max_wait (nil for the others): requests
	// admitted after a wait, timed out, refused at once (the wait could
	// not end in time, or the queue was full); waiting now; how long the
	// admitted ones waited.
	WaitAdmitted, WaitTimedOut, WaitRefused *metrics.Counter
	Waiting                                 *metrics.Gauge
	WaitSeconds                             *metrics.PrometheusHistogram
}

// waitBuckets are the upper bounds of the wait histograms, in seconds: 1 ms
// to max_wait's bound.
var waitBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// waitResults are the values of sentinel_limit_waits_total's result label.
var waitResults = [3]string{"admitted", "timed_out", "refused"}

// Slot counts a slot taken (+1) or given back (-1).
func (c *PolicyCounters) Slot(d float64) {
	if c != nil && c.SlotsInUse != nil {
		c.SlotsInUse.Add(d)
	}
}

// costKinds are the values of sentinel_cost_total's kind label.
var costKinds = [4]string{"reserved", "settled", "returned", "overdrawn"}

// Reserve counts n reserved. A nil Counters or a limit that counts
// requests counts nothing.
func (c *PolicyCounters) Reserve(n int64) {
	if c != nil && c.Reserved != nil {
		c.Reserved.Add(int(n))
	}
}

// Settle counts a settlement: actual, what the answer cost, and diff, the
// reservation less it (returned when positive, overdrawn when negative).
func (c *PolicyCounters) Settle(actual, diff int64) {
	if c == nil || c.Settled == nil {
		return
	}
	c.Settled.Add(int(actual))
	if diff > 0 {
		c.Returned.Add(int(diff))
	} else if diff < 0 {
		c.Overdrawn.Add(int(-diff))
	}
}

// decisions are the values of the decision label.
var decisions = [3]string{"allowed", "blocked", "shadow_blocked"}

// seriesRegistry keeps the decision series of the policies that exist:
// those of a compiled PolicySet not yet released. A series is registered while
// a set holds it and unregistered when the last one is released, so that
// a policy removed by a reload or the admin API leaves no series behind.
// It also hands out the policy label values: a name keeps its value (its
// own or "other") while a set holds it, and a new name gets its own while
// fewer than maxPolicyLabels names have one, so that changing one policy
// never moves another into or out of "other". Several sets may hold one
// name at once (the one that applies and its replacement being compiled;
// several gateways in one test process).
type seriesRegistry struct {
	mu      sync.Mutex
	names   map[string]*nameUse
	own     int            // names with a label value of their own
	holders map[string]int // series name → sets holding it
}

// nameUse is a policy name's label value and the sets that hold it.
type nameUse struct {
	label string
	own   bool // label is the name (a policy may be called "other")
	sets  int
}

var registry = seriesRegistry{names: map[string]*nameUse{}, holders: map[string]int{}}

// acquire registers the series of cp's limits for one more set and
// returns their counters.
func (r *seriesRegistry) acquire(cp *CompiledPolicy) []*PolicyCounters {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := r.names[cp.Name]
	if u == nil {
		u = &nameUse{label: otherPolicy}
		if r.own < maxPolicyLabels {
			u.label, u.own = cp.Name, true
			r.own++
		}
		r.names[cp.Name] = u
	}
	u.sets++
	out := make([]*PolicyCounters, len(cp.Labels))
	for i := range cp.Labels {
		names := limitSeries(cp, i, u.label)
		for _, name := range names {
			r.holders[name]++
		}
		c := func(j int) *metrics.Counter { return metrics.GetOrCreateCounter(names[j]) }
		pc := &PolicyCounters{Allowed: c(0), Blocked: c(1), ShadowBlocked: c(2)}
		j := len(decisions)
		switch m := cp.meteredAt(i); {
		case m != nil && m.Slots > 0:
			pc.SlotsInUse = metrics.GetOrCreateGauge(names[j], nil)
			j++
		case m != nil:
			pc.Reserved, pc.Settled, pc.Returned, pc.Overdrawn = c(j), c(j+1), c(j+2), c(j+3)
			j += len(costKinds)
		}
		if cp.maxWaitAt(i) > 0 {
			pc.WaitAdmitted, pc.WaitTimedOut, pc.WaitRefused = c(j), c(j+1), c(j+2)
			pc.Waiting = metrics.GetOrCreateGauge(names[j+3], nil)
			pc.WaitSeconds = metrics.GetOrCreatePrometheusHistogramExt(names[j+4], waitBuckets)
		}
		out[i] = pc
	}
	return out
}

// release drops one set's hold on cp's series, unregistering those that
// no set holds any more, and frees the name's label value with its last
// set.
func (r *seriesRegistry) release(cp *CompiledPolicy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := r.names[cp.Name]
	if u == nil {
		return
	}
	for i := range cp.Labels {
		for _, name := range limitSeries(cp, i, u.label) {
			if r.holders[name]--; r.holders[name] <= 0 {
				delete(r.holders, name)
				metrics.UnregisterMetric(name)
			}
		}
	}
	if u.sets--; u.sets <= 0 {
		delete(r.names, cp.Name)
		if u.own {
			r.own--
		}
	}
}

// limitSeries are the series of cp's limit i under the policy label
// value label: its decisions, then for a metered limit its costs.
func limitSeries(cp *CompiledPolicy, i int, label string) []string {
	limit := cp.Labels[i]
	names := make([]string, 0, len(decisions)+len(costKinds))
	for _, d := range decisions {
		names = append(names, seriesName(label, limit, d))
	}
	labels := `policy="` + EscapeLabel(label) + `",limit="` + EscapeLabel(limit) + `"`
	m := cp.meteredAt(i)
	switch {
	case m != nil && m.Slots > 0:
		names = append(names, `sentinel_limit_slots_in_use{`+labels+`}`)
	case m != nil:
		for _, k := range costKinds {
			names = append(names, `sentinel_cost_total{`+labels+`,kind="`+k+`"}`)
		}
	}
	if cp.maxWaitAt(i) > 0 {
		for _, r := range waitResults {
			names = append(names, `sentinel_limit_waits_total{`+labels+`,result="`+r+`"}`)
		}
		names = append(names, `sentinel_limit_waiting{`+labels+`}`, `sentinel_limit_wait_duration_seconds{`+labels+`}`)
	}
	return names
}

// seriesName is the series of one decision of one limit of a policy.
func seriesName(policy, limit, decision string) string {
	return `sentinel_limit_policy_decisions_total{policy="` + EscapeLabel(policy) +
		`",limit="` + EscapeLabel(limit) + `",decision="` + decision + `"}`
}

// Count counts one decision of the limit: allowed, or refused (in shadow
// mode or not). A nil Counters (a limit that is not a policy's) counts
// nothing.
func (c *PolicyCounters) Count(allowed, shadow bool) {
	switch {
	case c == nil:
	case allowed:
		c.Allowed.Inc()
	case shadow:
		c.ShadowBlocked.Inc()
	default:
		c.Blocked.Inc()
	}
}

// Wait counts what became of a wait: admitted after waited, timed out, or
// refused at once; and joined (+1) or left (-1) the queue (waiting). A
// nil Counters or a limit without max_wait counts nothing.
func (c *PolicyCounters) Wait(admitted, timedOut, refused bool, waited time.Duration) {
	switch {
	case c == nil || c.WaitAdmitted == nil:
	case admitted:
		c.WaitAdmitted.Inc()
		c.WaitSeconds.Update(waited.Seconds())
	case timedOut:
		c.WaitTimedOut.Inc()
	case refused:
		c.WaitRefused.Inc()
	}
}

// Queued counts a request joining (+1) or leaving (-1) the limit's queue.
func (c *PolicyCounters) Queued(d float64) {
	if c != nil && c.Waiting != nil {
		c.Waiting.Add(d)
	}
}
