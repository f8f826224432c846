package catalog

import (
	"sync"

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
	for i, limit := range cp.Labels {
		var c [3]*metrics.Counter
		for j, d := range decisions {
			name := seriesName(u.label, limit, d)
			r.holders[name]++
			c[j] = metrics.GetOrCreateCounter(name)
		}
		out[i] = &PolicyCounters{Allowed: c[0], Blocked: c[1], ShadowBlocked: c[2]}
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
	for _, limit := range cp.Labels {
		for _, d := range decisions {
			name := seriesName(u.label, limit, d)
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
