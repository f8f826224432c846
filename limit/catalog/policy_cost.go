package catalog

import (
	"strings"
	"time"

	"github.com/sentinel-gateway/sentinel/limit/cost"
)

// Metered is how a limit of a policy counts when it does not count one
// permit per request: a cost estimated from the request and settled from
// the answer, or only the answers of some statuses (count_if), or both.
// The limit reserves its estimate at admission; the request path settles
// the reservation when the answer has ended (limit.Limiter.Settle).
type Metered struct {
	// Cost is nil for a limit that counts requests.
	Cost *cost.Cost
	// CountIf: only answers whose status is in Statuses count; the others
	// give their reservation back.
	CountIf  bool
	Statuses cost.StatusSet
	// Slots is a concurrency limit's number (0: the limit is not one): a
	// slot is taken at admission and given back when the exchange ends.
	Slots  int64
	header []byte // Cost.Estimate.Header, as Attrs reads it
}

// meteredAt is how limit i counts (nil: requests).
func (p *CompiledPolicy) meteredAt(i int) *Metered {
	if i < len(p.Metered) {
		return p.Metered[i]
	}
	return nil
}

// maxWaitAt is limit i's max_wait (0: none).
func (p *CompiledPolicy) maxWaitAt(i int) time.Duration {
	if i < len(p.MaxWait) {
		return p.MaxWait[i]
	}
	return 0
}

// metered compiles l's cost and count_if; nil when it has neither.
func metered(l *PolicyLimit) *Metered {
	if l.Cost == nil && l.CountIf == nil && l.Concurrency == 0 {
		return nil
	}
	m := &Metered{Cost: l.Cost, Slots: l.Concurrency}
	if l.Cost != nil && l.Cost.Estimate.Header != "" {
		m.header = []byte(l.Cost.Estimate.Header)
	}
	if l.CountIf != nil {
		m.CountIf = true
		m.Statuses, _ = l.CountIf.Compile() // validated
	}
	return m
}

// Estimate is what a request costs before it is forwarded: the cost's
// estimate from attrs (a request header), body (a JSON request body read
// whole; nil when it was not) or bodyLen (its length, -1 unknown), capped;
// tokens (the request's permits) for a limit without cost. It allocates
// nothing.
func (m *Metered) Estimate(attrs Attrs, body []byte, bodyLen, tokens int64) int64 {
	if m.Cost == nil {
		return tokens
	}
	var v []byte
	if len(m.header) > 0 && attrs != nil {
		v = attrs.Header(m.header)
	}
	return m.Cost.Estimate.Of(func(string) []byte { return v }, body, bodyLen)
}

// Counts reports whether an answer of status counts against the limit.
func (m *Metered) Counts(status int) bool {
	return !m.CountIf || m.Statuses.Match(status)
}

// HoldsToTheEnd tells that the reservation lasts as long as the exchange:
// a slot, given back when the answer's last byte is written.
func (m *Metered) HoldsToTheEnd() bool { return m.Slots > 0 }

// meteredLabel is the label of a limit that counts otherwise than one
// permit per request, so that it has store keys and metric series of its
// own beside a limit of the same window that counts requests: "1m0s-cost",
// "1m0s-if", "day-cost-if".
func meteredLabel(label string, l *PolicyLimit) string {
	if l.Cost != nil {
		label += "-cost"
	}
	if l.CountIf != nil {
		label += "-if"
	}
	return label
}

// meteredErrors are the errors of l's cost and count_if, each naming its
// key within the limit (cost.estimate.max).
func meteredErrors(l *PolicyLimit) []*ValidationError {
	var errs []error
	if l.Cost != nil {
		errs = append(errs, l.Cost.Validate("")...)
	}
	if l.CountIf != nil {
		errs = append(errs, l.CountIf.Validate("")...)
	}
	out := make([]*ValidationError, 0, len(errs))
	for _, e := range errs {
		field, msg, _ := strings.Cut(e.Error(), ": ")
		out = append(out, &ValidationError{Field: field, Msg: msg})
	}
	return out
}
