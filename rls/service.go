package rls

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/reply"
)

// Limits of a request, as for the check API.
const (
	// MaxDescriptors is the most descriptors one request may carry.
	MaxDescriptors = 64
	// MaxHits is the largest hits_addend.
	MaxHits     = 1_000_000
	maxNameLen  = 128 // domain, tenant, resource
	maxValueLen = 256 // key, remote_address
	maxEntries  = 16
	maxEntryKey = 128
	serviceName = "envoy.service.ratelimit.v3.RateLimitService"
)

var defaultDomain = Domain{Tenant: DefaultTenantKey, Resource: DefaultResourceKey, Key: DefaultAPIKeyKey, RemoteAddress: DefaultRemoteAddressKey}

// service implements RateLimitService on the limiter.
type service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	limiter Limiter
	catalog Catalog
	domains map[string]Domain // nil: every domain, default keys
	now     func() time.Time
	// files are the domains of grpc.config_files (nil: none); a reload
	// swaps them whole.
	files atomic.Pointer[Files]
	// override is grpc.descriptor_override: a descriptor's own limit
	// replaces its rule in the files' domains.
	override atomic.Bool
}

// ShouldRateLimit decides every descriptor of req in order. A descriptor
// that the limiter refuses is OVER_LIMIT; the others take their tokens even
// when an earlier one is over the limit, as envoyproxy/ratelimit does.
func (s *service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := s.now()
	defer func() { callDuration.UpdateDuration(start) }()
	dom, served := s.domain(req.GetDomain())
	if err := validate(req); err != nil {
		callsInvalid.Inc()
		return nil, err
	}
	if f := s.files.Load(); f != nil {
		if d := f.domains[req.GetDomain()]; d != nil {
			return s.decideFiles(ctx, f, d, req)
		}
	}
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.Descriptors)),
	}
	if !served {
		callsUnknownDomain.Inc()
		for i := range resp.Statuses {
			descNoLimit.Inc()
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		}
		return resp, nil
	}
	lreqs, err := s.requests(&dom, req)
	if err != nil {
		callsInvalid.Inc()
		return nil, err
	}
	worst, err := s.decide(ctx, lreqs, resp)
	if err != nil {
		return nil, err
	}
	if worst != nil {
		resp.ResponseHeadersToAdd = headers(worst)
		if !worst.Allowed {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		callsOverLimit.Inc()
	} else {
		callsOK.Inc()
	}
	return resp, nil
}

// requests are the limiter requests of req's descriptors in domain dom;
// the error refuses a descriptor that asks more than a limit can grant
// (overCapacity), before any takes tokens.
func (s *service) requests(dom *Domain, req *rlsv3.RateLimitRequest) ([]limit.Request, error) {
	lreqs := make([]limit.Request, len(req.Descriptors))
	for i, desc := range req.Descriptors {
		lreqs[i] = s.request(dom, desc, req.HitsAddend)
		if err := s.overCapacity(i, desc, &lreqs[i]); err != nil {
			return nil, err
		}
	}
	return lreqs, nil
}

// decide asks the limiter for each request in order and writes each
// descriptor's status in resp. It returns the worst decision of a limit
// that applied (nil: none applied), or Unavailable when the store cannot
// decide (on_store_failure: closed; Envoy's failure_mode_deny decides).
func (s *service) decide(ctx context.Context, lreqs []limit.Request, resp *rlsv3.RateLimitResponse) (*limit.Decision, error) {
	var worst *limit.Decision
	for i := range lreqs {
		lreq := &lreqs[i]
		if lreq.Tenant == "" && lreq.Resource == "" && len(lreq.APIKey) == 0 && len(lreq.IP) == 0 {
			descNoLimit.Inc()
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
			continue
		}
		d := s.limiter.Allow(ctx, lreq)
		if d.Unavailable {
			callsUnavailable.Inc()
			return nil, status.Error(codes.Unavailable, "rate-limit store unavailable")
		}
		resp.Statuses[i] = descriptorStatus(&d)
		if d.Scope == limit.ScopeNone {
			continue
		}
		if worst == nil || worse(&d, worst) {
			worst = &d
		}
	}
	return worst, nil
}

// overCapacity refuses, as InvalidArgument naming the hits_addend that set
// it, a descriptor that asks more tokens than a limit that applies can ever
// grant at once: OVER_LIMIT would invite a retry that can never pass (the
// check API answers 400 for the same request). It runs before any
// descriptor takes tokens, so a refused call takes none.
func (s *service) overCapacity(i int, desc *commonv3.RateLimitDescriptor, lreq *limit.Request) error {
	if lreq.Tenant == "" && lreq.Resource == "" && len(lreq.APIKey) == 0 && len(lreq.IP) == 0 {
		return nil
	}
	most, scope := s.limiter.MaxTokens(lreq)
	if lreq.Tokens <= most {
		return nil
	}
	field := "hits_addend"
	if desc.GetHitsAddend() != nil {
		field = "descriptors[" + strconv.Itoa(i) + "].hits_addend"
	}
	return invalid(field, strconv.FormatInt(lreq.Tokens, 10)+" is over "+strconv.FormatInt(most, 10)+
		", the most the "+scope.String()+" limit can grant at once; it can never pass")
}

// worse reports whether a is a worse answer than b: refused over allowed,
// then the least remaining.
func worse(a, b *limit.Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	return a.Remaining < b.Remaining
}

// domain returns the entry keys of a domain and whether it is served.
// Domain names are compared in lower case (configuration keys are).
func (s *service) domain(name string) (Domain, bool) {
	if s.domains == nil {
		return defaultDomain, true
	}
	d, ok := s.domains[strings.ToLower(name)]
	return d, ok
}

// request is the limiter's request for one descriptor: its entries by the
// domain's keys (an entry with another key is ignored), the tenant's plan
// from the catalog (a tenant the catalog does not know has multiplier 1),
// and hits_addend tokens (the descriptor's own, else the request's, else 1).
func (s *service) request(dom *Domain, desc *commonv3.RateLimitDescriptor, hits uint32) limit.Request {
	lreq := limit.Request{Tokens: max(int64(hits), 1)}
	if h := desc.GetHitsAddend(); h != nil {
		lreq.Tokens = max(int64(h.GetValue()), 1)
	}
	for _, e := range desc.GetEntries() {
		switch e.GetKey() {
		case dom.Tenant:
			lreq.Tenant = e.GetValue()
		case dom.Resource:
			lreq.Resource = e.GetValue()
		case dom.Key:
			lreq.APIKey = []byte(e.GetValue())
		case dom.RemoteAddress:
			lreq.IP = []byte(e.GetValue())
		}
	}
	if lreq.Tenant != "" {
		if plan, ok := s.catalog.TenantPlan(lreq.Tenant); ok {
			lreq.Plan = plan
		}
	}
	return lreq
}

// descriptorStatus is the answer for one decided descriptor.
func descriptorStatus(d *limit.Decision) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	switch {
	case d.Scope == limit.ScopeNone:
		descNoLimit.Inc()
		return st
	case !d.Allowed:
		descOverLimit.Inc()
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	case d.Shadowed:
		descShadowed.Inc()
	default:
		descOK.Inc()
	}
	st.CurrentLimit = currentLimit(d)
	st.LimitRemaining = uint32(min(max(d.Remaining, 0), 1<<32-1))
	// Until the budget is whole, never past its window (a lease's permits
	// are dated to its end, which can put the reset a lease lifetime later).
	reset := max(d.Reset, 0)
	if d.Window > 0 {
		reset = min(reset, d.Window)
	}
	st.DurationUntilReset = durationpb.New(reset)
	return st
}

const day = 24 * time.Hour

// units are Envoy's rate units, smallest first, with their length as Envoy
// and envoyproxy/ratelimit count it (a month is 30 days, a year 365) and
// the span of one calendar period of the unit (a day of 23 to 25 hours
// across a clock change, a month of 28 to 31 days, a year of 365 or 366).
var units = [...]struct {
	unit        rlsv3.RateLimitResponse_RateLimit_Unit
	dur         time.Duration
	least, most time.Duration
}{
	{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second, time.Second, time.Second},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute, time.Minute, time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour, time.Hour, time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_DAY, day, 23 * time.Hour, 25 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * day, 7*day - time.Hour, 7*day + time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * day, 28*day - time.Hour, 31*day + time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * day, 365*day - time.Hour, 366*day + time.Hour},
}

// currentLimit states the decision's limit in Envoy's terms: a window of
// one unit, or one calendar period of it (a calendar quota's week, month
// or year), is the limit per that unit; another window is the limit per
// the smallest unit that holds it, scaled to that unit (5 per 2s is 150 per
// MINUTE; past a year, per YEAR). Name says the scope, the policy's or
// limit's name when it has one, and the limit as configured
// ("policy bids-per-user 50/1m", "tenant 5/1s").
func currentLimit(d *limit.Decision) *rlsv3.RateLimitResponse_RateLimit {
	name := d.Scope.String() + " "
	if d.Name != "" {
		name += d.Name + " "
	}
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: name + strconv.FormatInt(d.Limit, 10) + "/" + windowText(d.Window)}
	if d.Window <= 0 {
		rl.RequestsPerUnit = uint32(min(max(d.Limit, 0), math.MaxUint32))
		return rl
	}
	for i, u := range units {
		switch {
		case d.Window >= u.least && d.Window <= u.most:
			rl.Unit, rl.RequestsPerUnit = u.unit, uint32(min(max(d.Limit, 0), math.MaxUint32))
			return rl
		case d.Window <= u.dur || i == len(units)-1:
			per := float64(d.Limit) * float64(u.dur) / float64(d.Window)
			rl.Unit, rl.RequestsPerUnit = u.unit, uint32(min(max(per, 0), math.MaxUint32))
			return rl
		}
	}
	return rl
}

// windowText writes a window as a configuration writes it: "1s", "1m",
// "1h30m", "30d", "500ms"; "0" for none (a token bucket that never refills).
func windowText(w time.Duration) string {
	switch {
	case w <= 0:
		return "0"
	case w%day == 0:
		return strconv.FormatInt(int64(w/day), 10) + "d"
	}
	s := w.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// headers are the rate-limit headers of the decision, as the proxy and the
// check API set them, for Envoy to add to the answer.
func headers(d *limit.Decision) []*corev3.HeaderValue {
	out := make([]*corev3.HeaderValue, 0, len(reply.RateLimitHeaderNames))
	for i, name := range reply.RateLimitHeaderNames {
		out = append(out, &corev3.HeaderValue{Key: name, Value: string(reply.AppendRateLimitValue(nil, i, d))})
	}
	return out
}

// validate refuses what no descriptor could mean; the error names the field.
func validate(req *rlsv3.RateLimitRequest) error {
	switch {
	case req.GetDomain() == "":
		return errEmptyDomain
	case len(req.GetDescriptors()) == 0:
		return errNoDescriptors
	case len(req.GetDomain()) > maxNameLen:
		return invalid("domain", strconv.Itoa(len(req.GetDomain()))+" bytes long; at most "+strconv.Itoa(maxNameLen)+" allowed")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return invalid("descriptors", strconv.Itoa(len(req.GetDescriptors()))+" descriptors; at most "+strconv.Itoa(MaxDescriptors)+" allowed")
	case req.GetHitsAddend() > MaxHits:
		return invalid("hits_addend", "must be at most "+strconv.Itoa(MaxHits)+", got "+strconv.FormatUint(uint64(req.GetHitsAddend()), 10))
	}
	for i, desc := range req.GetDescriptors() {
		prefix := "descriptors[" + strconv.Itoa(i) + "]"
		if h := desc.GetHitsAddend(); h != nil && h.GetValue() > MaxHits {
			return invalid(prefix+".hits_addend", "must be at most "+strconv.Itoa(MaxHits)+", got "+strconv.FormatUint(h.GetValue(), 10))
		}
		if len(desc.GetEntries()) > maxEntries {
			return invalid(prefix+".entries", strconv.Itoa(len(desc.GetEntries()))+" entries; at most "+strconv.Itoa(maxEntries)+" allowed")
		}
		for j, e := range desc.GetEntries() {
			field := prefix + ".entries[" + strconv.Itoa(j) + "]"
			if msg := checkText(e.GetKey(), maxEntryKey); msg != "" {
				return invalid(field+".key", msg)
			}
			if msg := checkText(e.GetValue(), maxValueLen); msg != "" {
				return invalid(field+".value", msg)
			}
		}
	}
	return nil
}

// A request without a domain or without descriptors is refused as
// envoyproxy/ratelimit refuses it: gRPC code Unknown (its error is not a
// gRPC status), with its text.
var (
	errEmptyDomain   = status.Error(codes.Unknown, "rate limit domain must not be empty")
	errNoDescriptors = status.Error(codes.Unknown, "rate limit descriptor list must not be empty")
)

func invalid(field, msg string) error {
	return status.Error(codes.InvalidArgument, field+": "+msg)
}

// checkText refuses a value that is empty, longer than max bytes or holds a
// control character.
func checkText(v string, max int) string {
	if v == "" {
		return "missing; want a non-empty string"
	}
	if len(v) > max {
		return strconv.Itoa(len(v)) + " bytes long; at most " + strconv.Itoa(max) + " allowed"
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return "contains a control character"
		}
	}
	return ""
}
