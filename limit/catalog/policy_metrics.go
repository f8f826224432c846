package catalog

import (
	"github.com/VictoriaMetrics/metrics"
)

// maxPolicyLabels bounds the policies that get a label value of their own;
// further ones are counted as policy="other". The names come from the
// configuration file only, so the bound is a guard against a generated
// file, not against clients.
const maxPolicyLabels = 200

// PolicyCounters count the decisions of one limit of one policy.
type PolicyCounters struct {
	// Allowed: the limit passed the request (a later limit may still
	// refuse it); Blocked: the limit refused it; ShadowBlocked: it would
	// have, in shadow mode.
	Allowed, Blocked, ShadowBlocked *metrics.Counter
}

// policyCounters returns the counters of the limit label of the policy
// name, the i-th of its file.
func policyCounters(name, label string, i int) *PolicyCounters {
	if i >= maxPolicyLabels {
		name = labelOther
	}
	series := func(decision string) *metrics.Counter {
		return metrics.GetOrCreateCounter(`sentinel_limit_policy_decisions_total{policy="` + EscapeLabel(name) +
			`",limit="` + EscapeLabel(label) + `",decision="` + decision + `"}`)
	}
	return &PolicyCounters{Allowed: series("allowed"), Blocked: series("blocked"), ShadowBlocked: series("shadow_blocked")}
}
