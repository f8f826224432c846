package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/cost"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Policies is the `policies` section.
type Policies []Policy

// LiveKey reports that the section applies on a reload: the gateway compiles
// the new policies and the catalog swaps them in.
func (Policies) LiveKey(string) bool { return true }

// Policy is one entry of the `policies` section: which requests it applies
// to (Match), what identifies a budget (Key), and the limits that all must
// pass for each budget.
type Policy struct {
	// Name identifies the policy: in its store keys, in metrics and in the
	// RateLimit-Policy header. Unique; letters, digits, '-', '_', '.'.
	Name  string      `mapstructure:"name" json:"name"`
	Match PolicyMatch `mapstructure:"match" json:"match"`
	// Key lists the attributes whose values make one budget (see
	// ParseKeyAttr). A request without one of them is not counted.
	Key    []string     `mapstructure:"key" json:"key"`
	Limits PolicyLimits `mapstructure:"limits" json:"limits"`
	// PlanMultiplier multiplies the limits by the plan's multiplier. nil:
	// true when Key includes tenant or api_key, else false.
	PlanMultiplier *bool `mapstructure:"plan_multiplier" json:"plan_multiplier,omitempty"`
	// Shadow counts but never refuses.
	Shadow    bool      `mapstructure:"shadow" json:"shadow,omitempty"`
	Unlimited Unlimited `mapstructure:"unlimited" json:"unlimited"`
}

// PolicyMatch selects the requests of a policy; every field present must
// match, and an empty match selects every request.
type PolicyMatch struct {
	Resources []string `mapstructure:"resources" json:"resources,omitempty"`
	Methods   []string `mapstructure:"methods" json:"methods,omitempty"`
	// Hosts match the Host header without its port, ignoring case.
	Hosts []string `mapstructure:"hosts" json:"hosts,omitempty"`
	// Headers must be present with the value ("*": with any value). Names
	// ignore case.
	Headers map[string]string `mapstructure:"headers" json:"headers,omitempty"`
	// Anonymous true: only requests without a known API key; false: only
	// requests with one; nil: both.
	Anonymous *bool `mapstructure:"anonymous" json:"anonymous,omitempty"`
}

// PolicyLimit is one limit of a policy: a window (sliding_window,
// sliding_log), a token bucket, or a calendar quota (Period).
type PolicyLimit struct {
	// Limit is the permits per Window, or per Period.
	Limit int64 `mapstructure:"limit" json:"limit,omitempty"`
	// Window is a sliding limit's window (default limits.window).
	Window confutil.Duration `mapstructure:"window" json:"window,omitempty"`
	// Period makes the limit a calendar quota: hour, day, week, month, year.
	Period store.Period `mapstructure:"period" json:"period,omitempty"`
	// Algorithm defaults to limits.algorithm; a Period makes the limit a
	// quota, which no algorithm name gives.
	Algorithm store.Algorithm `mapstructure:"algorithm" json:"algorithm,omitempty"`
	// Capacity and RefillRate (permits per second) make a token bucket.
	Capacity   int64   `mapstructure:"capacity" json:"capacity,omitempty"`
	RefillRate float64 `mapstructure:"refill_rate" json:"refill_rate,omitempty"`
	// Cost makes the limit count what requests cost (an estimate reserved
	// before forwarding, settled from the answer) instead of requests.
	Cost *cost.Cost `mapstructure:"cost" json:"cost,omitempty"`
	// CountIf makes the limit count only the answers of some statuses.
	CountIf *cost.CountIf `mapstructure:"count_if" json:"count_if,omitempty"`
	// Concurrency makes the limit one on requests in flight: at most this
	// many of the key's requests at once across pods (no window).
	Concurrency int64 `mapstructure:"concurrency" json:"concurrency,omitempty"`
	// MaxWait lets a request this limit would refuse wait up to this long
	// for its permit or slot (0: refused at once).
	MaxWait confutil.Duration `mapstructure:"max_wait" json:"max_wait,omitempty"`
}

// MaxMaxWait bounds max_wait.
const MaxMaxWait = time.Minute

// MaxConcurrency bounds a concurrency limit.
const MaxConcurrency = 1_000_000

// PolicyLimits are a policy's limits. From JSON they decode one by one, so that a
// value that does not decode is named with its index (limits[1].period), as
// Validate names it: encoding/json names a field by its path without the
// indexes of the lists on it.
type PolicyLimits []PolicyLimit

// UnmarshalJSON decodes a JSON array of limits; unknown fields are errors,
// as they are in the rest of a policy.
func (ls *PolicyLimits) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || raw == nil {
		return err
	}
	out := make(PolicyLimits, len(raw))
	for i, r := range raw {
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&out[i]); err != nil {
			var typ *json.UnmarshalTypeError
			if errors.As(err, &typ) {
				// The caller's decoder puts "limits." before it.
				typ.Field = fmt.Sprintf("[%d].%s", i, typ.Field)
			}
			return err
		}
	}
	*ls = out
	return nil
}

// Unlimited exempts requests from a policy: they are never counted
// and never refused by it.
type Unlimited struct {
	// Values are key values: the whole key (its attributes' values joined
	// by ':') or the value of any one attribute.
	Values []string `mapstructure:"values" json:"values,omitempty"`
	// CIDRs exempt client IPs.
	CIDRs []string `mapstructure:"cidrs" json:"cidrs,omitempty"`
}

// Validate checks a policy; field is its YAML key (policies[0]), or "" for
// the admin API (errors then name the JSON field alone: limits[1].period).
// The error joins one line per bad key, each naming the policy in the file
// (the API's path names it).
func (p *Policy) Validate(field string, def Defaults) error {
	var errs []error
	key := func(k string) string {
		if field == "" {
			return k
		}
		return field + "." + k
	}
	bad := func(k, msg string) {
		if p.Name != "" && field != "" {
			msg = fmt.Sprintf("policy %q: %s", p.Name, msg)
		}
		errs = append(errs, &ValidationError{Field: key(k), Msg: msg})
	}
	if err := CheckName(key("name"), p.Name); err != nil {
		errs = append(errs, err)
	}
	if len(p.Key) == 0 {
		bad("key", "required: one or more of ip, ip/N, api_key, tenant, plan, resource, method, path, header:NAME, query:NAME")
	}
	for i, k := range p.Key {
		if _, err := ParseKeyAttr(k); err != nil {
			bad(fmt.Sprintf("key[%d]", i), err.Error())
		}
	}
	p.validateMatch(bad)
	if len(p.Limits) == 0 {
		bad("limits", "required: one or more limits ({limit: 10, window: 1s}, {limit: 2000, period: day})")
	}
	labels := map[string]int{}
	for i := range p.Limits {
		k := fmt.Sprintf("limits[%d]", i)
		if lerrs := p.Limits[i].validate(def); len(lerrs) > 0 {
			for _, e := range lerrs {
				bad(k+"."+e.Field, e.Msg)
			}
			continue
		}
		lab := p.Limits[i].Label(def)
		if j, dup := labels[lab]; dup {
			bad(k, fmt.Sprintf("a second limit of %s (limits[%d]): one limit per window or period", lab, j))
		}
		labels[lab] = i
	}
	for i, c := range p.Unlimited.CIDRs {
		if _, err := netip.ParsePrefix(c); err != nil {
			bad(fmt.Sprintf("unlimited.cidrs[%d]", i), fmt.Sprintf("%q is not a CIDR such as 10.0.0.0/8", c))
		}
	}
	return errors.Join(errs...)
}

func (p *Policy) validateMatch(bad func(k, msg string)) {
	for i, r := range p.Match.Resources {
		if err := CheckName("", r); err != nil {
			bad(fmt.Sprintf("match.resources[%d]", i), err.(*ValidationError).Msg)
		}
	}
	for i, m := range p.Match.Methods {
		if m == "" || strings.ToUpper(m) != m || strings.ContainsAny(m, " \t") {
			bad(fmt.Sprintf("match.methods[%d]", i), fmt.Sprintf("%q must be an upper-case method such as POST", m))
		}
	}
	for i, h := range p.Match.Hosts {
		if h == "" || strings.ContainsAny(h, " /:") {
			bad(fmt.Sprintf("match.hosts[%d]", i), fmt.Sprintf("%q must be a host name without port", h))
		}
	}
	for name := range p.Match.Headers {
		if name == "" || strings.ContainsAny(name, " :") {
			bad("match.headers", fmt.Sprintf("%q is not a header name", name))
		}
	}
}

// rule is l, a limit without a period, as a rule with the defaults
// applied.
func (l *PolicyLimit) rule(def Defaults) Rule {
	r := Rule{Algorithm: l.Algorithm, Limit: l.Limit, Window: l.Window, Capacity: l.Capacity, RefillRate: l.RefillRate}
	def.fill(&r.Algorithm, &r.Window)
	return r
}

// validate returns what is wrong with l, each error naming its key
// within the limit (limit, window, period, ...).
func (l *PolicyLimit) validate(def Defaults) []*ValidationError {
	errs := append(l.validateUnit(def), meteredErrors(l)...)
	if l.MaxWait < 0 || l.MaxWait.D() > MaxMaxWait {
		errs = append(errs, &ValidationError{Field: "max_wait", Msg: fmt.Sprintf("%v is out of range 0..%v", l.MaxWait.D(), MaxMaxWait)})
	}
	return errs
}

// validateUnit returns what is wrong with l's unit: its window, token
// bucket or period.
func (l *PolicyLimit) validateUnit(def Defaults) []*ValidationError {
	if l.Concurrency != 0 {
		return l.validateConcurrency()
	}
	if l.Period != store.NoPeriod {
		var errs []*ValidationError
		bad := func(k, msg string) { errs = append(errs, &ValidationError{Field: k, Msg: msg}) }
		if l.Algorithm != 0 {
			bad("algorithm", fmt.Sprintf("a period makes a calendar quota: algorithm %q does not apply", l.Algorithm))
		}
		// A period set in Go was not decoded: the parser checks it.
		if _, err := store.ParsePeriod(l.Period.String()); err != nil {
			bad("period", err.Error())
		}
		if l.Window != 0 || l.Capacity != 0 || l.RefillRate != 0 {
			bad("period", "a quota has limit and period only (no window, capacity or refill_rate)")
		}
		if msg := checkCount("limit", l.Limit, "for a quota"); msg != "" {
			bad("limit", msg)
		}
		return errs
	}
	r := l.rule(def)
	r.Tenant, r.Resource = "policy", "policy" // names are the policy's to check
	var errs []*ValidationError
	if err := r.Validate(""); err != nil {
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var ve *ValidationError
			if errors.As(e, &ve) {
				errs = append(errs, ve)
			}
		}
	}
	return errs
}

// validateConcurrency checks a concurrency limit: its number alone.
func (l *PolicyLimit) validateConcurrency() []*ValidationError {
	var errs []*ValidationError
	if l.Concurrency < 1 || l.Concurrency > MaxConcurrency {
		errs = append(errs, &ValidationError{Field: "concurrency", Msg: fmt.Sprintf("%d is out of range 1..%d", l.Concurrency, MaxConcurrency)})
	}
	if l.Limit != 0 || l.Window != 0 || l.Period != store.NoPeriod || l.Algorithm != 0 || l.Capacity != 0 || l.RefillRate != 0 || l.Cost != nil || l.CountIf != nil {
		errs = append(errs, &ValidationError{Field: "concurrency", Msg: "a concurrency limit has no limit, window, period, algorithm, capacity, refill_rate, cost nor count_if: give those their own limit"})
	}
	return errs
}

// Params returns the store parameters of a valid limit.
func (l *PolicyLimit) Params(def Defaults) store.Params {
	if l.Concurrency != 0 {
		return store.Params{Algorithm: store.SlidingWindow, Limit: l.Concurrency}
	}
	if l.Period != store.NoPeriod {
		return store.Params{Algorithm: store.Quota, Limit: l.Limit, Period: l.Period, Zone: def.Zone}
	}
	r := l.rule(def)
	return r.Params()
}

// Label names a valid limit within its policy: its window ("1s"), its
// period ("day"), or "bucket" for a token bucket. It is the limit's
// metric label and part of its store key.
func (l *PolicyLimit) Label(def Defaults) string {
	if l.Concurrency != 0 {
		return "concurrency"
	}
	p := l.Params(def)
	switch {
	case p.Algorithm == store.Quota:
		return meteredLabel(p.Period.String(), l)
	case p.Algorithm == store.TokenBucket:
		return meteredLabel("bucket", l)
	}
	return meteredLabel(p.Window.String(), l)
}

// AttrKind is the kind of a key attribute.
type AttrKind uint8

// Key attributes.
const (
	AttrIP AttrKind = iota + 1
	AttrIPPrefix
	AttrAPIKey
	AttrTenant
	AttrPlan
	AttrResource
	AttrMethod
	AttrPath
	AttrHeader
	AttrQuery
)

// KeyAttr is one parsed key attribute: its kind, the header or query
// parameter name, and the prefix length of ip/N.
type KeyAttr struct {
	Kind AttrKind
	Name []byte
	Bits int
}

var simpleAttrs = map[string]AttrKind{"ip": AttrIP, "api_key": AttrAPIKey, "tenant": AttrTenant, "plan": AttrPlan,
	"resource": AttrResource, "method": AttrMethod, "path": AttrPath}

// ParseKeyAttr parses one key attribute: ip, ip/N (N 1..32: the IPv4
// prefix; 33..128: the IPv6 prefix; an address of the other family is
// used whole), api_key, tenant, plan, resource, method, path, header:NAME,
// query:NAME.
func ParseKeyAttr(s string) (KeyAttr, error) {
	if k, ok := simpleAttrs[s]; ok {
		return KeyAttr{Kind: k}, nil
	}
	if bits, ok := strings.CutPrefix(s, "ip/"); ok {
		n, err := strconv.Atoi(bits)
		if err != nil || n < 1 || n > 128 {
			return KeyAttr{}, fmt.Errorf("%q: the prefix of ip/N is 1..32 (IPv4) or 33..128 (IPv6)", s)
		}
		return KeyAttr{Kind: AttrIPPrefix, Bits: n}, nil
	}
	for prefix, kind := range map[string]AttrKind{"header:": AttrHeader, "query:": AttrQuery} {
		if name, ok := strings.CutPrefix(s, prefix); ok {
			if name == "" || strings.ContainsAny(name, " :") {
				return KeyAttr{}, fmt.Errorf("%q needs a name after %s", s, prefix)
			}
			return KeyAttr{Kind: kind, Name: []byte(name)}, nil
		}
	}
	return KeyAttr{}, fmt.Errorf("%q is not one of ip, ip/N, api_key, tenant, plan, resource, method, path, header:NAME, query:NAME", s)
}
