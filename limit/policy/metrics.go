package policy

import (
	"github.com/VictoriaMetrics/metrics"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
)

// maxPolicyLabels bounds the policies that get a label value of their own;
// further ones are counted as policy="other". The names come from the
// configuration file only, so the bound is a guard against a generated
// file, not against clients.
const maxPolicyLabels = 200

// Counters count the decisions of one limit of one policy.
type Counters struct {
	// Allowed: the limit passed the request (a later limit may still
	// refuse it); Blocked: the limit refused it; ShadowBlocked: it would
	// have, in shadow mode.
	Allowed, Blocked, ShadowBlocked *metrics.Counter
}

// policyCounters returns the counters of the limit label of the policy
// name, the i-th of its file.
func policyCounters(name, label string, i int) *Counters {
	if i >= maxPolicyLabels {
		name = "other"
	}
	series := func(decision string) *metrics.Counter {
		return metrics.GetOrCreateCounter(`sentinel_limit_policy_decisions_total{policy="` + catalog.EscapeLabel(name) +
			`",limit="` + catalog.EscapeLabel(label) + `",decision="` + decision + `"}`)
	}
	return &Counters{Allowed: series("allowed"), Blocked: series("blocked"), ShadowBlocked: series("shadow_blocked")}
}

// Count counts one decision of the limit: allowed, or refused (in shadow
// mode or not). A nil Counters (a limit that is not a policy's) counts
// nothing.
func (c *Counters) Count(allowed, shadow bool) {
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
