package limit

import (
	"time"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// keyBufLen is the room for a key on the stack; longer keys allocate.
const keyBufLen = 160

// spec is one limit that applies to a request.
type spec struct {
	scope  Scope
	name   string // a Limit's Name
	params store.Params
	limit  int64         // Limit or Capacity, as shown in decisions
	most   int64         // the most tokens one decision can take
	window time.Duration // for RateLimit-Policy
	ttl    time.Duration // lease lifetime
	shadow bool
	// counters count a policy limit's decisions (nil for other limits).
	counters *catalog.PolicyCounters
	// meter: the limit counts a cost or some answers (nil: requests).
	meter   *catalog.Metered
	maxWait time.Duration // max_wait: a refused request may wait (see Limiter.Wait)
	useRID  bool          // sliding_log with a trusted request ID: always ask the store
	// The key is buf[:keyLen], or big when it did not fit. The spec never
	// holds a slice of its own buf, so that it can stay on the stack.
	keyLen int
	big    string
	buf    [keyBufLen]byte
	// kept is the key as its local bucket holds it (empty: none yet), for
	// the in-memory stores to keep rather than a copy (LeaseRequest.Kept).
	kept string
}

// setKey records a key built by appending to s.buf[:0].
func (s *spec) setKey(k []byte) {
	if len(k) <= keyBufLen && cap(k) == keyBufLen {
		s.keyLen, s.big, s.kept = len(k), "", ""
		return
	}
	s.keyLen, s.big, s.kept = 0, string(k), ""
}

// clear zeroes every field of s but its key buffer, which is written
// before it is read (a third of a decision's specs' bytes left alone).
func (s *spec) clear() {
	s.scope, s.name, s.params, s.limit, s.most = 0, "", store.Params{}, 0, 0
	s.window, s.ttl, s.shadow, s.counters, s.meter, s.maxWait, s.useRID = 0, 0, false, nil, nil, 0, false
	s.keyLen, s.big, s.kept = 0, "", ""
}

// key returns the spec's key; it allocates only for a key longer than the
// buffer.
func (s *spec) key() []byte {
	if s.big != "" {
		return []byte(s.big)
	}
	return s.buf[:s.keyLen]
}

// maxLocalSpecs is how many limits one decision keeps on the stack; a
// request that more limits apply to (policies, named Limits) is decided
// the same way from a slice that the append allocates.
const maxLocalSpecs = 8

// nextSpec extends specs by one zero spec and returns it.
func nextSpec(specs []spec) ([]spec, *spec) {
	if len(specs) < cap(specs) {
		specs = specs[:len(specs)+1]
		s := &specs[len(specs)-1]
		s.clear()
		return specs, s
	}
	specs = append(specs, spec{})
	return specs, &specs[len(specs)-1]
}

// specs appends the limits that apply to req, each policy's in turn: the
// shorthand ones first (the rule, usually the tightest, then tenant, API
// key and IP), then the policies.
func (l *Limiter) specs(specs []spec, req *Request, mult float64) []spec {
	subj := subject(req)
	named, any := l.policies.For(req.Resource)
	var idBuf []byte // room for a policy's identity (a shorthand's key holds its values)
	if len(named)+len(any) > 0 {
		var b [keyBufLen]byte
		idBuf = b[:0]
	}
	for _, p := range l.shorthand {
		specs = l.policySpec(specs, p, &subj, req, mult, idBuf)
	}
	for _, p := range named {
		specs = l.policySpec(specs, p, &subj, req, mult, idBuf)
	}
	for _, p := range any {
		specs = l.policySpec(specs, p, &subj, req, mult, idBuf)
	}
	return specs
}

// mostOf is the most tokens one decision under p can take: its capacity,
// and at most MaxLogTokens for sliding_log.
func mostOf(p *store.Params) int64 {
	switch p.Algorithm {
	case store.TokenBucket:
		return p.Capacity
	case store.SlidingLog:
		return min(p.Limit, store.MaxLogTokens)
	}
	return p.Limit
}

// finish derives the shown limit and window and the lease lifetime.
func (l *Limiter) finish(s *spec, req *Request) {
	p := &s.params
	s.useRID = p.Algorithm == store.SlidingLog && len(req.RequestID) > 0
	s.most = mostOf(p)
	if p.Algorithm == store.TokenBucket {
		s.limit = p.Capacity
		s.window = 0
		if p.RefillRate > 0 {
			s.window = time.Duration(float64(p.Capacity) / p.RefillRate * float64(time.Second))
		}
		// A leased token is taken at once: the lifetime only bounds how
		// long unused tokens stay local.
		s.ttl = min(l.cfg.LeaseTTL, 100*time.Millisecond)
		return
	}
	s.limit, s.window = p.Limit, p.Window
	if p.Algorithm == store.Quota && p.Window == 0 { // the current period's length, for the headers
		start, end := p.Period.Bounds(l.now(), p.Zone)
		s.window = end.Sub(start)
	}
	// A lease's unused permits count in the store until it expires plus a
	// window, so a long lifetime wastes budget: keep it to 1/30 of the
	// window, but at least four store round trips, or leases would expire
	// on arrival, before their permits are used.
	s.ttl = max(time.Millisecond, min(l.cfg.LeaseTTL, max(p.Window/30, 4*time.Duration(l.rtt.Load()))))
}

// decision builds a verdict about this limit.
func (s *spec) decision(allowed bool, remaining int64, retry time.Duration, reset int64) verdict {
	return verdict{
		Allowed:    allowed,
		Scope:      s.scope,
		Name:       s.name,
		Limit:      s.limit,
		Remaining:  max(min(remaining, s.limit), 0),
		RetryAfter: retry,
		Reset:      time.Duration(max(reset, 0)),
		Window:     s.window,
	}
}
