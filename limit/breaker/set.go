package breaker

import (
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

var (
	openings = metrics.NewCounter(`sentinel_limit_breaker_openings_total`)
	_        = metrics.NewGauge(`sentinel_limit_breaker_state`, func() float64 { return float64(worstOfAll("", false)) })
)

// live holds the Sets of the process for the gauges (a reload builds a new
// limiter over the same store, and tests build many).
var live sync.Map // *Set → struct{}

// Set is one breaker per store node, so that a failed node of a cluster
// sends only its keys to the failure policy, with their metrics: per node
// once the node has a name.
type Set struct {
	b     [store.MaxNodes]Breaker
	nodes store.NodeMap // nil: one node, b[0]
}

// NewSet returns the breakers of the nodes of st (nodes may be nil).
func NewSet(failures int64, cooldown time.Duration, nodes store.NodeMap) *Set {
	s := &Set{nodes: nodes}
	for i := range s.b {
		s.b[i] = Breaker{Failures: failures, Cooldown: cooldown}
		s.b[i].OnChange = func(to int32) { s.changed(i, to) }
		s.nodeMetrics(i)
	}
	live.Store(s, struct{}{})
	return s
}

// Close stops counting the set in the gauges.
func (s *Set) Close() { live.Delete(s) }

// CopyStates puts each breaker of s in the state of from's breaker of the
// same node (open since the same instant, the same failures counted; a
// half-open one open, its cooldown over, so that s makes its own probe): a
// limiter that replaces another on a reload goes on where it was. s must
// not be in use yet.
func (s *Set) CopyStates(from *Set) {
	for i := range s.b {
		b, f := &s.b[i], &from.b[i]
		b.fails.Store(f.fails.Load())
		b.openedAt.Store(f.openedAt.Load())
		st := f.State()
		if st == HalfOpen {
			st = Open // from's probe is in flight there: s probes afresh
		}
		b.state.Store(st) // not an opening: the gauges see the same state

	}
}

// For returns the breaker of the node that holds key.
func (s *Set) For(key []byte) *Breaker {
	if s.nodes == nil {
		return &s.b[0]
	}
	return &s.b[min(max(s.nodes.NodeOf(key), 0), store.MaxNodes-1)]
}

// State is the worst state of the set's breakers.
func (s *Set) State() int32 {
	st := Closed
	for i := range s.b {
		st = max(st, s.b[i].State())
	}
	return st
}

// ProbeNow lets each open breaker of the set send its probe with the next
// call, its cooldown cut short: the store is known to answer again.
func (s *Set) ProbeNow() {
	for i := range s.b {
		s.b[i].probeNow()
	}
}

// worstOfAll is the worst state among the process's sets, of the node
// named name when byName.
func worstOfAll(name string, byName bool) int32 {
	st := Closed
	live.Range(func(k, _ any) bool {
		o := k.(*Set)
		for j := range o.b {
			if !byName || o.nodeName(j) == name {
				st = max(st, o.b[j].State())
			}
		}
		return true
	})
	return st
}

// changed counts the openings of node i's breaker.
func (s *Set) changed(i int, to int32) {
	if to != Open {
		return
	}
	openings.Inc()
	if name := s.nodeName(i); name != "" {
		s.nodeMetrics(i)
		metrics.GetOrCreateCounter(`sentinel_limit_node_breaker_openings_total{node="` + catalog.EscapeLabel(name) + `"}`).Inc()
	}
}

// nodeName names node i of the store ("" when the store has one node that
// it does not name, or no node i).
func (s *Set) nodeName(i int) string {
	if s.nodes == nil {
		return ""
	}
	return s.nodes.NodeName(i)
}

// nodeMetrics registers the per-node series of node i once it has a name:
// its breaker state, the worst among the process's sets, and its openings.
func (s *Set) nodeMetrics(i int) {
	name := s.nodeName(i)
	if name == "" {
		return
	}
	label := `{node="` + catalog.EscapeLabel(name) + `"}`
	metrics.GetOrCreateGauge(`sentinel_limit_node_breaker_state`+label, func() float64 { return float64(worstOfAll(name, true)) })
	metrics.GetOrCreateCounter(`sentinel_limit_node_breaker_openings_total` + label)
	metrics.GetOrCreateCounter(`sentinel_limit_node_store_failures_total` + label)
}

// Failed counts a store call for key that failed or timed out (not one
// the breaker skipped), per node.
func (s *Set) Failed(key []byte) {
	if s.nodes == nil {
		return
	}
	i := s.nodes.NodeOf(key)
	if name := s.nodeName(i); name != "" {
		s.nodeMetrics(i)
		metrics.GetOrCreateCounter(`sentinel_limit_node_store_failures_total{node="` + catalog.EscapeLabel(name) + `"}`).Inc()
	}
}
