package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Attrs reads a request's headers and query parameters for the policies
// that match or key on them. The request path implements it over the
// request it serves; both methods are called on the request path, so they
// must not allocate, and the slices they return are read only during the
// call that asked for them. nil (absent) and empty values are the same.
type Attrs interface {
	Header(name []byte) []byte
	Query(name []byte) []byte
}

// Subject is what the policies read of one request. Its slices are read
// only while a policy method runs.
type Subject struct {
	IP, APIKey             []byte
	Tenant, Plan, Resource string
	Method, Host, Path     []byte
	Attrs                  Attrs // nil: no headers, no query
}

// Anonymous reports whether the request has no known API key.
func (s *Subject) Anonymous() bool { return s.Tenant == "" && len(s.APIKey) == 0 }

// addr parses the client IP (the zero Addr when there is none).
func (s *Subject) addr() netip.Addr {
	if len(s.IP) == 0 {
		return netip.Addr{}
	}
	// Read as a string for this call only: no copy.
	a, _ := netip.ParseAddr(unsafe.String(unsafe.SliceData(s.IP), len(s.IP)))
	return a
}

// MaxValueLen is the longest attribute value kept as it is in a store key;
// a longer one is replaced by its hash, so that a client cannot make keys
// of any size.
const MaxValueLen = 128

// CompiledPolicy is a validated policy, compiled once so that the request
// path parses and allocates nothing. It is read-only.
type CompiledPolicy struct {
	Name string
	// Params are the store parameters of each limit, Labels their names.
	Params []store.Params
	Labels []string
	// Items name each limit in answers (RateLimit-Policy, RateLimit, the
	// check API): the policy's name for a policy of one limit, else the
	// name and the limit's label ("bids-per-user/day"), so that an answer
	// tells which of the policy's limits it speaks of.
	Items []string
	// Counters count each limit's decisions
	// (sentinel_limit_policy_decisions_total).
	Counters []*PolicyCounters
	// Metered says how each limit counts when it counts a cost or only
	// some answers (nil: one permit per request).
	Metered []*Metered
	// ReadsBody: a limit estimates its cost from the request's JSON body.
	ReadsBody bool
	// MaxWait is how long each limit lets a request it refuses wait for
	// its permit or slot (0: refused at once).
	MaxWait []time.Duration
	Attrs   []KeyAttr
	// PlanMultiplier: the limits are multiplied by the plan's multiplier.
	PlanMultiplier bool
	Shadow         bool
	// Shorthand is the shorthand limit the policy is (its store key and
	// its scope in answers), or NotShorthand.
	Shorthand Shorthand
	// Source resolves the policy's one limit for each request (nil: its
	// limits are Params).
	Source *Source

	matchAll  bool                // no method, host, header nor anonymous match
	resources map[string]struct{} // nil: any
	methods   [][]byte
	hosts     [][]byte
	headers   []headerMatch
	anonymous int8 // 1: anonymous requests only; -1: known API keys only
	values    map[string]struct{}
	cidrs     []netip.Prefix
}

type headerMatch struct {
	name, value []byte // value nil: any value
}

// PolicySet is the compiled `policies` section. It is read-only; a live one
// (LivePolicies.Set) answers with the set its LivePolicies holds at each call.
type PolicySet struct {
	all         []*CompiledPolicy
	byResource  map[string][]*CompiledPolicy // policies that match these resources
	anyResource []*CompiledPolicy            // policies that match any resource
	live        *atomic.Pointer[PolicySet]   // non-nil: the LivePolicies' current set
	released    atomic.Bool                  // Release ran: its series are no longer held
}

// now is the set that applies: ps, or its LivePolicies' current one.
func (ps *PolicySet) now() *PolicySet {
	if ps != nil && ps.live != nil {
		return ps.live.Load()
	}
	return ps
}

// Len returns the number of policies.
func (ps *PolicySet) Len() int {
	if ps = ps.now(); ps == nil {
		return 0
	}
	return len(ps.all)
}

// All returns the policies in configuration order.
func (ps *PolicySet) All() []*CompiledPolicy {
	if ps = ps.now(); ps == nil {
		return nil
	}
	return ps.all
}

// For returns the policies that may match a request on resource: those
// that name it, then those for any resource. It allocates nothing.
func (ps *PolicySet) For(resource string) (named, any []*CompiledPolicy) {
	if ps = ps.now(); ps == nil {
		return nil, nil
	}
	return ps.byResource[resource], ps.anyResource
}

// CheckPolicies validates the `policies` section without compiling it: compiling
// registers each limit's metric series, which a check must not leave
// behind. Errors name the YAML key (policies[0].limits[1].period), one line
// per bad key.
func CheckPolicies(policies []Policy, def Defaults) error {
	var errs []error
	names := map[string]int{}
	for i := range policies {
		p := &policies[i]
		field := fmt.Sprintf("policies[%d]", i)
		if err := p.Validate(field, def); err != nil {
			errs = append(errs, err)
			continue
		}
		if j, dup := names[p.Name]; dup {
			errs = append(errs, &ValidationError{Field: field + ".name", Msg: fmt.Sprintf("policy %q is also policies[%d]", p.Name, j)})
			continue
		}
		names[p.Name] = i
	}
	return errors.Join(errs...)
}

// CompilePolicies checks and compiles the `policies` section, with Check's errors.
// It checks what it compiles because its input is the file's policies
// merged with the API's, a list no single check has seen. The set holds
// its policies' metric series until it is released: by the LivePolicies it was
// stored in when another replaces it, else by Release.
func CompilePolicies(policies []Policy, def Defaults) (*PolicySet, error) {
	if err := CheckPolicies(policies, def); err != nil {
		return nil, err
	}
	ps := &PolicySet{byResource: map[string][]*CompiledPolicy{}}
	for i := range policies {
		cp := compile(&policies[i], def)
		cp.Counters = registry.acquire(cp)
		ps.all = append(ps.all, cp)
		if cp.resources == nil {
			ps.anyResource = append(ps.anyResource, cp)
		}
		for r := range cp.resources {
			ps.byResource[r] = append(ps.byResource[r], cp)
		}
	}
	return ps, nil
}

// Release gives up the set's hold on its policies' metric series: those
// of a policy that no other set holds are unregistered, and its name's
// label value is free again. Counting into a released set's counters is
// harmless but unseen. A live set and nil are not released; a second call
// does nothing.
func (ps *PolicySet) Release() {
	if ps == nil || ps.live != nil || !ps.released.CompareAndSwap(false, true) {
		return
	}
	for _, cp := range ps.all {
		registry.release(cp)
	}
}

// itemNames are the names of cp's limits in answers: the policy's name,
// followed for each of several limits by its window as configured
// ("bids/1m") or its period ("bids/day"). The labels keep time.Duration's
// form ("1m0s"), which the store's keys and the metrics hold.
func itemNames(cp *CompiledPolicy) []string {
	items := make([]string, 0, len(cp.Labels))
	for i, label := range cp.Labels {
		item := cp.Name
		if len(cp.Labels) > 1 {
			if p := cp.Params[i]; strings.HasPrefix(label, p.Window.String()) && p.Window > 0 {
				label = confutil.Duration(p.Window).String() + strings.TrimPrefix(label, p.Window.String())
			}
			item += "/" + label
		}
		items = append(items, item)
	}
	return items
}

// compile builds a valid policy's compiled form.
func compile(p *Policy, def Defaults) *CompiledPolicy {
	cp := &CompiledPolicy{Name: p.Name, Shadow: p.Shadow}
	for _, k := range p.Key {
		a, _ := ParseKeyAttr(k)
		cp.Attrs = append(cp.Attrs, a)
		cp.PlanMultiplier = cp.PlanMultiplier || a.Kind == AttrTenant || a.Kind == AttrAPIKey
	}
	if p.PlanMultiplier != nil {
		cp.PlanMultiplier = *p.PlanMultiplier
	}
	for i := range p.Limits {
		cp.Params = append(cp.Params, p.Limits[i].Params(def))
		cp.Labels = append(cp.Labels, p.Limits[i].Label(def))
		cp.MaxWait = append(cp.MaxWait, p.Limits[i].MaxWait.D())
		m := metered(&p.Limits[i])
		cp.Metered = append(cp.Metered, m)
		cp.ReadsBody = cp.ReadsBody || m != nil && m.Cost != nil && m.Cost.Estimate.NeedsBody()
	}
	cp.Items = itemNames(cp)
	m := &p.Match
	if len(m.Resources) > 0 {
		cp.resources = make(map[string]struct{}, len(m.Resources))
		for _, r := range m.Resources {
			cp.resources[r] = struct{}{}
		}
	}
	for _, v := range m.Methods {
		cp.methods = append(cp.methods, []byte(v))
	}
	for _, h := range m.Hosts {
		cp.hosts = append(cp.hosts, []byte(strings.ToLower(h)))
	}
	for _, name := range slices.Sorted(maps.Keys(m.Headers)) {
		hm := headerMatch{name: []byte(name)}
		if v := m.Headers[name]; v != "*" {
			hm.value = []byte(v)
		}
		cp.headers = append(cp.headers, hm)
	}
	if m.Anonymous != nil {
		cp.anonymous = -1
		if *m.Anonymous {
			cp.anonymous = 1
		}
	}
	cp.matchAll = cp.anonymous == 0 && len(cp.methods)+len(cp.hosts)+len(cp.headers) == 0
	if len(p.Unlimited.Values) > 0 {
		cp.values = make(map[string]struct{}, len(p.Unlimited.Values))
		for _, v := range p.Unlimited.Values {
			cp.values[v] = struct{}{}
		}
	}
	for _, c := range p.Unlimited.CIDRs {
		pr, _ := netip.ParsePrefix(c)
		cp.cidrs = append(cp.cidrs, pr.Masked())
	}
	return cp
}

// Matches reports whether the policy applies to s (its resource aside,
// which PolicySet.For selects). It allocates nothing.
func (p *CompiledPolicy) Matches(s *Subject) bool {
	return p.matchAll || p.matches(s)
}

// matches is Matches for a policy with a match.
func (p *CompiledPolicy) matches(s *Subject) bool {
	if p.anonymous != 0 && s.Anonymous() != (p.anonymous > 0) {
		return false
	}
	if len(p.methods) > 0 && !slices.ContainsFunc(p.methods, func(m []byte) bool { return bytes.Equal(m, s.Method) }) {
		return false
	}
	if len(p.hosts) > 0 {
		h := hostOnly(s.Host)
		if !slices.ContainsFunc(p.hosts, func(m []byte) bool { return bytes.EqualFold(m, h) }) {
			return false
		}
	}
	for i := range p.headers {
		hm := &p.headers[i]
		var v []byte
		if s.Attrs != nil {
			v = s.Attrs.Header(hm.name)
		}
		if len(v) == 0 || (hm.value != nil && !bytes.Equal(v, hm.value)) {
			return false
		}
	}
	return true
}

// Counts reports whether the policy applies to s and counts it (its key
// attributes present, not exempt). It allocates nothing.
func (p *CompiledPolicy) Counts(s *Subject) bool {
	var buf [2 * MaxValueLen]byte
	if !p.Matches(s) {
		return false
	}
	_, ok := p.AppendIdentity(buf[:0], s)
	return ok
}

// LimitParams returns the store parameters of limit i multiplied by a
// plan's multiplier, as limits.tenant is: rounded down, at least 1, at
// most MaxLimit.
func (p *CompiledPolicy) LimitParams(i int, plan float64) store.Params {
	lp := p.Params[i]
	if plan == 1 {
		return lp
	}
	mul := func(n int64) int64 { return max(1, int64(math.Floor(min(float64(n)*plan, store.MaxLimit)))) }
	if lp.Algorithm == store.TokenBucket {
		lp.Capacity = mul(lp.Capacity)
		lp.RefillRate *= plan
	} else {
		lp.Limit = mul(lp.Limit)
	}
	return lp
}

// hostOnly is a Host header without its port.
func hostOnly(h []byte) []byte {
	if len(h) > 0 && h[0] == '[' {
		if i := bytes.IndexByte(h, ']'); i > 0 {
			return h[1:i]
		}
		return h
	}
	if i := bytes.LastIndexByte(h, ':'); i >= 0 {
		return h[:i]
	}
	return h
}

// AppendIdentity appends the escaped values of the policy's key attributes
// for s, joined by ':', to dst. ok is false when the request is not
// counted by the policy: an attribute has no value, or the request is
// exempt (unlimited). A value longer than MaxValueLen is replaced by a
// hash that no escaped value can equal. A shorthand appends nothing: its
// key holds the values as it always did (AppendKey). It allocates only
// when dst is too small.
func (p *CompiledPolicy) AppendIdentity(dst []byte, s *Subject) (out []byte, ok bool) {
	if p.Shorthand != NotShorthand {
		return dst, p.keyed(s) // its key is built from the values (AppendKey)
	}
	return p.appendIdentity(dst, s)
}

// appendIdentity is AppendIdentity for a policy of the `policies` section.
func (p *CompiledPolicy) appendIdentity(dst []byte, s *Subject) (out []byte, ok bool) {
	if len(p.cidrs) > 0 {
		if a := s.addr(); a.IsValid() && slices.ContainsFunc(p.cidrs, func(c netip.Prefix) bool { return c.Contains(a.Unmap()) }) {
			return dst, false
		}
	}
	var joined [2 * MaxValueLen]byte // the raw whole key, for the unlimited values
	raw, whole := joined[:0], len(p.Attrs) > 1 && p.values != nil
	start := len(dst)
	for i := range p.Attrs {
		var ipBuf [48]byte
		v := p.Attrs[i].value(s, ipBuf[:0])
		if len(v) == 0 {
			return dst[:start], false
		}
		if p.values != nil {
			if _, exempt := p.values[string(v)]; exempt {
				return dst[:start], false
			}
		}
		if whole = whole && len(raw)+1+len(v) <= cap(raw); whole {
			if i > 0 {
				raw = append(raw, ':')
			}
			raw = append(raw, v...)
		}
		if i > 0 {
			dst = append(dst, ':')
		}
		dst = appendValue(dst, v)
	}
	if whole {
		if _, exempt := p.values[string(raw)]; exempt {
			return dst[:start], false
		}
	}
	return dst, true
}

// appendValue appends one escaped attribute value of an identity: a value
// longer than MaxValueLen as its hash.
func appendValue(dst, v []byte) []byte {
	if len(v) > MaxValueLen {
		// '%' in a value is escaped as %25: "%H" never starts one.
		dst = append(dst, '%', 'H')
		return strconv.AppendUint(dst, xxhash.Sum64(v), 16)
	}
	return store.AppendKeyPart(dst, v)
}

// keyed reports whether s has the value a shorthand's key holds.
func (p *CompiledPolicy) keyed(s *Subject) bool {
	switch p.Shorthand {
	case ShorthandTenant:
		return s.Tenant != ""
	case ShorthandAPIKey:
		return len(s.APIKey) > 0
	case ShorthandIP:
		return len(s.IP) > 0
	}
	return true // the rules: their Source says
}

// value is the attribute's value for s; buf is room for a formatted IP
// prefix.
func (a *KeyAttr) value(s *Subject, buf []byte) []byte {
	switch a.Kind {
	case AttrIP:
		return s.IP
	case AttrIPPrefix:
		return appendPrefix(buf, s, a.Bits)
	case AttrAPIKey:
		return s.APIKey
	case AttrTenant:
		return unsafe.Slice(unsafe.StringData(s.Tenant), len(s.Tenant))
	case AttrPlan:
		return unsafe.Slice(unsafe.StringData(s.Plan), len(s.Plan))
	case AttrResource:
		return unsafe.Slice(unsafe.StringData(s.Resource), len(s.Resource))
	case AttrMethod:
		return s.Method
	case AttrPath:
		return s.Path
	case AttrHeader:
		if s.Attrs != nil {
			return s.Attrs.Header(a.Name)
		}
	case AttrQuery:
		if s.Attrs != nil {
			return s.Attrs.Query(a.Name)
		}
	}
	return nil
}

// appendPrefix appends the client IP's prefix of bits (an IPv4 prefix for
// bits <= 32, an IPv6 one above) and returns it; an address of the other
// family is appended whole.
func appendPrefix(buf []byte, s *Subject, bits int) []byte {
	a := s.addr().Unmap()
	if !a.IsValid() {
		return nil
	}
	if a.Is4() == (bits <= 32) {
		pr, err := a.Prefix(bits)
		if err == nil {
			buf = pr.Addr().AppendTo(buf)
			buf = append(buf, '/')
			return strconv.AppendInt(buf, int64(bits), 10)
		}
	}
	return a.AppendTo(buf)
}
