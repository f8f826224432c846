package rls

import (
	"strings"
	"sync"

	"github.com/VictoriaMetrics/metrics"
)

// maxDetailed bounds the descriptor series of one detailed_metric rule:
// envoyproxy/ratelimit makes one per distinct descriptor, so a client that
// varies a value could create series without end; past the bound the
// descriptors count under descriptor="_other".
const maxDetailed = 100

// otherDescriptor is the descriptor label past maxDetailed.
const otherDescriptor = "_other"

// Rule decisions, the rls_rule* families: one series set per rule of the
// files (bounded by the configuration), in a metrics.Set per loaded file set
// that a reload replaces.
const (
	decOK        = "ok"
	decOverLimit = "over_limit"
	decShadowed  = "shadowed"
	decUnlimited = "unlimited"
	decReplaced  = "replaced"
)

// ruleMetrics are one rule's counters.
type ruleMetrics struct {
	set    *metrics.Set
	labels string // domain="...",rule="..."
	hits   *metrics.Counter
	byDec  map[string]*metrics.Counter

	mu       sync.Mutex
	detailed map[string]map[string]*metrics.Counter // descriptor → decision → counter
}

// newRuleMetrics registers the counters of a rule in set.
func newRuleMetrics(set *metrics.Set, domain, rule string) *ruleMetrics {
	m := &ruleMetrics{
		set:    set,
		labels: `domain="` + labelValue(domain) + `",rule="` + labelValue(rule) + `"`,
		byDec:  map[string]*metrics.Counter{},
	}
	m.hits = set.NewCounter(`sentinel_rls_rule_hits_total{` + m.labels + `}`)
	for _, d := range []string{decOK, decOverLimit, decShadowed, decUnlimited, decReplaced} {
		m.byDec[d] = set.NewCounter(`sentinel_rls_rule_decisions_total{` + m.labels + `,decision="` + d + `"}`)
	}
	return m
}

// count records one descriptor's decision and its hits; desc, for a
// detailed_metric rule, is the descriptor's entries ("" otherwise).
func (m *ruleMetrics) count(decision string, hits uint64, desc string) {
	if m == nil {
		return
	}
	m.byDec[decision].Inc()
	m.hits.AddInt64(int64(min(hits, 1<<62)))
	if desc != "" {
		m.detailedCounter(desc, decision).Inc()
	}
}

// detailedCounter is the counter of (desc, decision); at most maxDetailed
// descriptors get their own.
func (m *ruleMetrics) detailedCounter(desc, decision string) *metrics.Counter {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.detailed == nil {
		m.detailed = map[string]map[string]*metrics.Counter{}
	}
	byDec, ok := m.detailed[desc]
	if !ok {
		if len(m.detailed) >= maxDetailed {
			desc = otherDescriptor
			byDec = m.detailed[desc]
		}
		if byDec == nil {
			byDec = map[string]*metrics.Counter{}
			m.detailed[desc] = byDec
		}
	}
	c := byDec[decision]
	if c == nil {
		c = m.set.GetOrCreateCounter(`sentinel_rls_rule_descriptor_decisions_total{` + m.labels +
			`,descriptor="` + labelValue(desc) + `",decision="` + decision + `"}`)
		byDec[decision] = c
	}
	return c
}

// labelValue escapes a Prometheus label value.
func labelValue(s string) string {
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
