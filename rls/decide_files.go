package rls

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// fileScope is the store key scope of the files' counters.
const fileScope = "envoy"

// overrideLabel is the rule label of descriptors that carry their own limit
// (grpc.descriptor_override): one series per domain, whatever the limit.
const overrideLabel = "_descriptor_limit"

// fileStatus is one descriptor's answer under the files.
type fileStatus struct {
	st    *rlsv3.RateLimitResponse_DescriptorStatus
	quota bool // the rule is in quota_mode
}

// statusParts are the messages of one descriptor's answer, made together:
// an answer of separate messages took four allocations a descriptor. The
// answer points into them and keeps them; nothing else does.
type statusParts struct {
	st    rlsv3.RateLimitResponse_DescriptorStatus
	limit rlsv3.RateLimitResponse_RateLimit
	reset durationpb.Duration
}

// oneAnswer is the answer to a call of one descriptor, the usual call, in
// one allocation.
type oneAnswer struct {
	resp  rlsv3.RateLimitResponse
	list  [1]*rlsv3.RateLimitResponse_DescriptorStatus
	parts [1]statusParts
}

// newAnswer is an answer of n descriptors and the parts of each.
func newAnswer(n int) (*rlsv3.RateLimitResponse, []statusParts) {
	if n == 1 {
		a := new(oneAnswer)
		a.resp.Statuses = a.list[:]
		return &a.resp, a.parts[:]
	}
	return &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}, make([]statusParts, n)
}

// filesScratch is what decideFiles keeps between its two passes over a
// call's descriptors: each one's rule and counted values (vals holds them
// all). Pooled: a call keeps none past its answer.
type filesScratch struct {
	rules  []*rule
	values [][]string
	vals   []string
}

var filesScratches = sync.Pool{New: func() any { return new(filesScratch) }}

// decideFiles answers a request for a domain of the files, as
// envoyproxy/ratelimit does: each descriptor's rule is found, every matched
// rule's replaces are gathered in one pass (unlimited rules and replaced
// ones replace too), and each descriptor that keeps a rule is decided on its
// own, counting its hits even when another is over the limit.
func (s *service) decideFiles(ctx context.Context, f *Files, d *domainRules, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	sc := filesScratches.Get().(*filesScratch)
	defer func() {
		clear(sc.rules)
		clear(sc.values)
		clear(sc.vals)
		sc.rules, sc.values, sc.vals = sc.rules[:0], sc.values[:0], sc.vals[:0]
		filesScratches.Put(sc)
	}()
	replaced := map[string]bool{}
	if err := s.fileRules(f, d, req, sc, replaced); err != nil {
		return nil, err
	}
	resp, parts := newAnswer(len(req.Descriptors))
	var over, quotas, quotasOver int
	for i, desc := range req.Descriptors {
		fs, err := s.fileDescriptor(ctx, d, sc.rules[i], replaced, desc, sc.values[i], hitsOf(req, desc), &parts[i])
		if err != nil {
			return nil, err
		}
		resp.Statuses[i] = fs.st
		isOver := fs.st.Code == rlsv3.RateLimitResponse_OVER_LIMIT
		switch {
		case fs.quota:
			quotas++
			if isOver {
				quotasOver++
			}
		case isOver:
			over++
		}
	}
	// quota_mode descriptors refuse the request only all together.
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if over > 0 || (quotas > 0 && quotas == quotasOver) {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		callsOverLimit.Inc()
	} else {
		callsOK.Inc()
	}
	return resp, nil
}

// fileRules finds each descriptor's rule and values for sc, and gathers
// the replaces of every matched rule in replaced.
func (s *service) fileRules(f *Files, d *domainRules, req *rlsv3.RateLimitRequest, sc *filesScratch, replaced map[string]bool) error {
	entries := 0
	for _, desc := range req.Descriptors {
		entries += len(desc.GetEntries())
	}
	sc.vals = slices.Grow(sc.vals, entries)
	for i, desc := range req.Descriptors {
		// Each descriptor's values go to vals' room: no descriptor's
		// append moves another's.
		n := len(desc.GetEntries())
		r, vals, err := s.fileRule(f, d, i, desc, sc.vals[len(sc.vals):len(sc.vals):len(sc.vals)+n])
		if err != nil {
			callsInvalid.Inc()
			return err
		}
		sc.vals = sc.vals[:len(sc.vals)+n]
		sc.rules, sc.values = append(sc.rules, r), append(sc.values, vals)
		if r != nil {
			for _, name := range r.replaces {
				replaced[name] = true
			}
		}
	}
	return nil
}

// fileRule is the rule of descriptor i and the values it counts under: the
// descriptor's own limit when grpc.descriptor_override allows it, else the
// files' rule (nil: none). The files' values are appended to buf (see
// domainRules.match).
func (s *service) fileRule(f *Files, d *domainRules, i int, desc *commonv3.RateLimitDescriptor, buf []string) (*rule, []string, error) {
	lim := desc.GetLimit()
	if lim == nil || !s.override.Load() {
		r, vals := d.match(desc, buf)
		return r, vals, nil
	}
	unit := rlsv3.RateLimitResponse_RateLimit_Unit(lim.GetUnit())
	if _, ok := unitLength(unit); !ok {
		return nil, nil, invalid("descriptors["+strconv.Itoa(i)+"].limit.unit", "must be SECOND to YEAR, got "+unit.String())
	}
	vals := make([]string, len(desc.GetEntries()))
	for j, e := range desc.GetEntries() {
		vals[j] = e.GetValue()
	}
	r := &rule{domain: d.name, path: d.name, unit: unit, perUnit: lim.GetRequestsPerUnit(), override: true, metrics: f.ruleMetrics(d.name, overrideLabel)}
	return r, vals, nil
}

// hitsOf is what a descriptor takes: its own hits_addend (0: it only
// looks), else the request's, at least 1.
func hitsOf(req *rlsv3.RateLimitRequest, desc *commonv3.RateLimitDescriptor) uint64 {
	if h := desc.GetHitsAddend(); h != nil {
		return h.GetValue()
	}
	return max(uint64(req.GetHitsAddend()), 1)
}

// fileDescriptor answers one descriptor of a files domain, in p.
func (s *service) fileDescriptor(ctx context.Context, d *domainRules, r *rule, replaced map[string]bool,
	desc *commonv3.RateLimitDescriptor, values []string, hits uint64, p *statusParts) (fileStatus, error) {
	switch {
	case r == nil:
		descNoLimit.Inc()
		p.st.Code = rlsv3.RateLimitResponse_OK
		return fileStatus{st: &p.st}, nil
	case r.unlimited:
		descNoLimit.Inc()
		r.metrics.count(decUnlimited, hits, detailed(r, desc))
		p.st.Code, p.st.LimitRemaining = rlsv3.RateLimitResponse_OK, math.MaxUint32
		return fileStatus{st: &p.st}, nil
	case r.name != "" && replaced[r.name]:
		// A replaced rule is no rule: its counter is not touched.
		descNoLimit.Inc()
		r.metrics.count(decReplaced, hits, detailed(r, desc))
		p.st.Code = rlsv3.RateLimitResponse_OK
		return fileStatus{st: &p.st}, nil
	}
	st, dec, err := s.decideRule(ctx, d, r, desc, values, hits, p)
	if err != nil {
		return fileStatus{}, err
	}
	r.metrics.count(dec, hits, detailed(r, desc))
	switch dec {
	case decOverLimit:
		descOverLimit.Inc()
	case decShadowed:
		descShadowed.Inc()
	default:
		descOK.Inc()
	}
	return fileStatus{st: st, quota: r.quota}, nil
}

// decideRule takes hits under rule r for the descriptor and answers it as
// envoyproxy/ratelimit's counter does, which counts every hit, refused ones
// too, and is over when it is above the limit: a hit that the budget
// cannot hold is OVER_LIMIT (OK in shadow mode) and spends the budget for
// the rest of its window; a look (no hits) is OK with what remains, also
// when nothing does, unless a hit went over the limit in the window. The
// answer is made in p.
func (s *service) decideRule(ctx context.Context, d *domainRules, r *rule, desc *commonv3.RateLimitDescriptor,
	values []string, hits uint64, p *statusParts) (*rlsv3.RateLimitResponse_DescriptorStatus, string, error) {
	p.limit.Name, p.limit.RequestsPerUnit, p.limit.Unit = r.name, r.perUnit, r.unit
	st := &p.st
	st.Code, st.CurrentLimit = rlsv3.RateLimitResponse_OK, &p.limit
	kb := keyBufs.Get().(*[]byte)
	key := appendCounterKey((*kb)[:0], d.name, r, desc, values)
	defer func() { // the limiter keeps no key past Allow, nor does the answer
		*kb = key[:0]
		keyBufs.Put(kb)
	}()
	b := fileBudget{
		lim:    limit.Limit{Name: r.label(), Scope: fileScope, Key: key, Params: unitParams(r.unit, r.perUnit), Shadow: r.shadow},
		unit:   r.unit,
		window: s.window(r.unit),
	}
	var (
		over  bool
		reset time.Duration
		err   error
	)
	switch {
	case r.perUnit == 0 && hits == 0:
		over, err = s.marked(ctx, &b)
		reset = b.window
	case r.perUnit == 0:
		over, reset, err = true, b.window, s.mark(ctx, &b, r)
	case hits == 0:
		over, reset, err = s.look(ctx, &b, st)
	default:
		over, reset, err = s.hit(ctx, &b, r, hits, st)
	}
	if err != nil {
		return nil, "", err
	}
	reset = min(max(reset, 0), b.window)
	p.reset.Seconds, p.reset.Nanos = int64(reset/time.Second), int32(reset%time.Second)
	st.DurationUntilReset = &p.reset
	return overAnswer(st, r, over)
}

// fileBudget is a descriptor's budget under its rule, and its marker: a
// budget of 1 in the same window, taken when a hit goes over the limit,
// which tells a spent budget (a look is OK) from one that a hit went over
// (a look is OVER_LIMIT), since the limiter never counts past the limit.
type fileBudget struct {
	lim    limit.Limit
	unit   rlsv3.RateLimitResponse_RateLimit_Unit
	window time.Duration // the unit's, or the calendar period's, length
}

// marker is b's marker, made when a call needs it (most calls are under
// their limit and need none).
func (b *fileBudget) marker() limit.Limit {
	return limit.Limit{Name: b.lim.Name, Scope: fileScope, Key: overKey(b.lim.Key), Params: unitParams(b.unit, 1)}
}

// oneLimit is a limiter request of one limit, kept for the next call: the
// limiter keeps neither after Allow returns, and one made for each call
// escapes through the Limiter interface (two allocations a call).
type oneLimit struct {
	req  limit.Request
	lims [1]limit.Limit
}

var oneLimits = sync.Pool{New: func() any { return new(oneLimit) }}

// allow asks the limiter for tokens of lim (a look when peek).
func (s *service) allow(ctx context.Context, lim limit.Limit, tokens int64, peek bool) limit.Decision {
	o := oneLimits.Get().(*oneLimit)
	o.lims[0] = lim
	o.req = limit.Request{Limits: o.lims[:], Tokens: tokens, Peek: peek}
	dec := s.limiter.Allow(ctx, &o.req)
	o.req, o.lims[0] = limit.Request{}, limit.Limit{}
	oneLimits.Put(o)
	return dec
}

// hit takes hits from b, and reports whether they went over the limit and
// when the budget is whole again; an allowed hit sets st's remaining.
func (s *service) hit(ctx context.Context, b *fileBudget, r *rule, hits uint64, st *rlsv3.RateLimitResponse_DescriptorStatus) (bool, time.Duration, error) {
	dec := s.allow(ctx, b.lim, int64(min(hits, MaxHits)), false)
	if dec.Unavailable {
		return false, 0, unavailable()
	}
	if dec.Allowed && !dec.Shadowed {
		st.LimitRemaining = uint32(min(max(dec.Remaining, 0), math.MaxUint32))
		return false, dec.Reset, nil
	}
	reset := dec.Reset
	if hits > 1 {
		// A refused single hit left nothing to drain: the budget held less
		// than 1. Looking costs a store call on every refusal, and took
		// the permits that freed since, which a flooded key is owed.
		reset = s.drain(ctx, b.lim, dec.Reset)
	}
	return true, reset, s.mark(ctx, b, r)
}

// look answers a look at b: what remains, and whether a hit went over the
// limit when nothing does.
func (s *service) look(ctx context.Context, b *fileBudget, st *rlsv3.RateLimitResponse_DescriptorStatus) (bool, time.Duration, error) {
	dec := s.allow(ctx, b.lim, 1, true)
	if dec.Unavailable {
		return false, 0, unavailable()
	}
	if dec.Allowed && !dec.Shadowed {
		st.LimitRemaining = uint32(min(max(dec.Remaining, 0), math.MaxUint32))
		return false, dec.Reset, nil
	}
	over, err := s.marked(ctx, b)
	return over, dec.Reset, err
}

// mark records that a hit went over b's limit (in shadow mode the answer
// is OK whatever the marker says: nothing to record).
func (s *service) mark(ctx context.Context, b *fileBudget, r *rule) error {
	if r.shadow {
		return nil
	}
	if dec := s.allow(ctx, b.marker(), 1, false); dec.Unavailable {
		return unavailable()
	}
	return nil
}

// marked reports whether a hit went over b's limit in its window.
func (s *service) marked(ctx context.Context, b *fileBudget) (bool, error) {
	dec := s.allow(ctx, b.marker(), 1, true)
	if dec.Unavailable {
		return false, unavailable()
	}
	return !dec.Allowed, nil
}

func unavailable() error {
	callsUnavailable.Inc()
	return status.Error(codes.Unavailable, "rate-limit store unavailable")
}

// window is the length of a unit's window now: a calendar period's for a
// week, a month or a year (a month of 28 to 31 days), else the unit's.
func (s *service) window(u rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	p := unitParams(u, 1)
	if p.Algorithm != store.Quota {
		return p.Window
	}
	start, end := p.Period.Bounds(s.now(), time.UTC)
	return end.Sub(start)
}

// overAnswer is st over the limit (when over): OVER_LIMIT, or OK in shadow
// mode, with nothing remaining.
func overAnswer(st *rlsv3.RateLimitResponse_DescriptorStatus, r *rule, over bool) (*rlsv3.RateLimitResponse_DescriptorStatus, string, error) {
	switch {
	case !over:
		return st, decOK, nil
	case r.shadow:
		return st, decShadowed, nil
	}
	st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	return st, decOverLimit, nil
}

// drain takes what is left of lim's budget after a refusal: the
// limiter refuses a request for more than is left without taking any,
// while envoyproxy/ratelimit counts the refused hits, so that the budget is
// spent for the rest of the window. It returns when the budget is whole
// again (reset, the refusal's, when nothing was left to take). A failure
// here changes no answer.
func (s *service) drain(ctx context.Context, lim limit.Limit, reset time.Duration) time.Duration {
	left := s.allow(ctx, lim, 1, true)
	if !left.Allowed || left.Shadowed || left.Remaining <= 0 {
		return max(reset, left.Reset)
	}
	if took := s.allow(ctx, lim, left.Remaining, false); took.Allowed {
		return took.Reset
	}
	return reset
}

// counterKey is the identity of a descriptor's budget under its rule: the
// domain, the unit, and each entry's key and counted value, each part
// length-prefixed so that no two descriptors share a counter by accident
// (envoyproxy/ratelimit joins them with '_': (a, b_c) and (a_b, c) collide).
// A descriptor's own limit (override) counts in a budget of its own for
// each limit, its unit part "MINUTE/5": the limiter keeps one budget per
// key and limit.
func counterKey(domain string, r *rule, desc *commonv3.RateLimitDescriptor, values []string) []byte {
	return appendCounterKey(make([]byte, 0, 64), domain, r, desc, values)
}

// keyBufs keep the buffers of counter keys from one call to the next.
var keyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64); return &b }}

// appendCounterKey appends counterKey's key to k.
func appendCounterKey(k []byte, domain string, r *rule, desc *commonv3.RateLimitDescriptor, values []string) []byte {
	part := func(p string) {
		k = strconv.AppendInt(k, int64(len(p)), 10)
		k = append(k, ':')
		k = append(k, p...)
	}
	part(domain)
	unit := r.unit.String()
	if r.override {
		unit += "/" + strconv.FormatUint(uint64(r.perUnit), 10)
	}
	part(unit)
	for i, e := range desc.GetEntries() {
		part(e.GetKey())
		part(values[i])
	}
	return k
}

// overKey is the key of a budget's marker: the budget's key and one part
// more, so that no descriptor's key (two parts per entry) meets it.
func overKey(key []byte) []byte {
	return append(bytes.Clone(key), "1:!"...)
}

// detailed is the descriptor label of a detailed_metric rule
// ("key_value.key_value", as envoyproxy/ratelimit names its detailed stat),
// "" for other rules.
func detailed(r *rule, desc *commonv3.RateLimitDescriptor) string {
	if !r.detailedMetric {
		return ""
	}
	var b strings.Builder
	for i, e := range desc.GetEntries() {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.GetKey())
		b.WriteByte('_')
		b.WriteString(e.GetValue())
	}
	return b.String()
}

// unitLength is the length of a unit as envoyproxy/ratelimit counts it (a
// month is 30 days, a year 365).
func unitLength(u rlsv3.RateLimitResponse_RateLimit_Unit) (time.Duration, bool) {
	const day = 24 * time.Hour
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return time.Second, true
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute, true
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return time.Hour, true
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return day, true
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * day, true
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * day, true
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * day, true
	}
	return 0, false
}

// unitParams are the store params of n requests per unit: a sliding window
// of the unit's length up to a day (the store's longest window); a week, a
// month or a year is a calendar quota of that period (UTC), which, like
// envoyproxy/ratelimit's counter, starts afresh at the period's boundary.
func unitParams(u rlsv3.RateLimitResponse_RateLimit_Unit, n uint32) store.Params {
	length, _ := unitLength(u)
	if length <= store.MaxWindow {
		return store.Params{Algorithm: store.SlidingWindow, Limit: int64(n), Window: length}
	}
	p := store.Params{Algorithm: store.Quota, Limit: int64(n), Period: store.Year, Window: length}
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		p.Period = store.Week
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		p.Period = store.Month
	}
	return p
}
