package catalog

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// ValidationError is a configuration or API input error: Field is the full
// YAML key or JSON field (limits.algorithm, rules[0].capacity, capacity), Msg
// says what is wrong and what is allowed.
type ValidationError struct {
	Field string
	Msg   string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Msg }

// Plan names: every tenant has one of them.
const (
	PlanFree     = "FREE"
	PlanStandard = "STANDARD"
	PlanPremium  = "PREMIUM"
)

// PlanNames lists the plans from lowest to highest priority.
var PlanNames = []string{PlanFree, PlanStandard, PlanPremium}

// Plans is the `plans` section: the limit multiplier of each plan.
type Plans map[string]float64

// DefaultPlans returns the multipliers used when the `plans` section is
// absent: FREE 1, STANDARD 2, PREMIUM 3.
func DefaultPlans() Plans { return Plans{PlanFree: 1, PlanStandard: 2, PlanPremium: 3} }

// Validate checks the `plans` section: every plan of PlanNames has a
// multiplier, finite and > 0, and no other plan is named. The error joins
// one line per bad key.
func (p Plans) Validate() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(p)) {
		if _, err := ParsePlan(name); err != nil {
			errs = append(errs, &ValidationError{Field: "plans." + name,
				Msg: fmt.Sprintf("unknown plan; plans are %s", strings.Join(PlanNames, ", "))})
		} else if m := p[name]; !(m > 0) || math.IsInf(m, 0) {
			errs = append(errs, &ValidationError{Field: "plans." + name,
				Msg: fmt.Sprintf("multiplier %v must be a finite number > 0", m)})
		}
	}
	for _, name := range PlanNames {
		if _, ok := p[name]; !ok {
			errs = append(errs, &ValidationError{Field: "plans." + name, Msg: "missing; every plan needs a multiplier"})
		}
	}
	return errors.Join(errs...)
}

// Plan is a tenant's plan: one of PlanNames. It decodes from its name (in
// the configuration, the tenants API and the tenants kept in Redis), so a
// decoded tenant holds a valid plan.
type Plan string

// ParsePlan returns the plan of a name; names are upper case.
func ParsePlan(name string) (Plan, error) {
	p, err := confutil.OneOf(name, PlanNames...)
	return Plan(p), err
}

// UnmarshalText parses a plan name; empty text is no plan, which
// Tenant.Validate refuses as it refuses a missing one.
func (p *Plan) UnmarshalText(text []byte) error {
	return confutil.UnmarshalName(p, text, ParsePlan)
}

// UnmarshalJSON reads a JSON string as UnmarshalText does; a bad value is
// a *json.UnmarshalTypeError that names the field.
func (p *Plan) UnmarshalJSON(b []byte) error { return confutil.UnmarshalJSONText(b, p) }

// Tenant is a customer: its plan and the API keys that identify it.
type Tenant struct {
	ID      string   `mapstructure:"id" json:"id"`
	Plan    Plan     `mapstructure:"plan" json:"plan"`
	APIKeys []string `mapstructure:"api_keys" json:"api_keys"`
}

// Validate checks a tenant; field is its YAML key or JSON path prefix
// (tenants[0]); errors name field.key. The error joins one line per bad key.
func (t *Tenant) Validate(field string) error {
	errs := []error{checkName(subKey(field, "id"), t.ID)}
	// A tenant built in Go (the API's writers, tests) was not decoded:
	// its plan is checked by the same parser.
	if _, err := ParsePlan(string(t.Plan)); err != nil {
		errs = append(errs, &ValidationError{Field: subKey(field, "plan"), Msg: err.Error()})
	}
	for i, k := range t.APIKeys {
		if k == "" || len(k) > 256 || strings.TrimSpace(k) != k {
			errs = append(errs, &ValidationError{Field: fmt.Sprintf("%s[%d]", subKey(field, "api_keys"), i),
				Msg: "an API key must be 1..256 characters without surrounding spaces"})
		}
	}
	return errors.Join(errs...)
}

// Tenants is the `tenants` section: the file's tenants, under those the
// tenants API writes.
type Tenants []Tenant

// LiveKey reports that the section applies on a reload (Sync.SetBase).
func (Tenants) LiveKey(string) bool { return true }

// Rules is the `rules` section: the file's rules, under those the rules
// API writes.
type Rules []Rule

// LiveKey reports that the section applies on a reload (Sync.SetBase).
func (Rules) LiveKey(string) bool { return true }

// subKey is the key k inside field ("rules[0]" + "limit"), or k alone for
// the API (field "").
func subKey(field, k string) string {
	if field == "" {
		return k
	}
	return field + "." + k
}

// Rule is a limit for one (tenant, resource): it applies on top of the IP,
// API key and tenant limits to every request of that tenant on a route with
// that resource. A rule for AnonymousTenant applies to each client IP without
// a known API key. The same type is read from the YAML `rules`, answered and
// read by the rules API, and stored in Redis (as JSON: window is text such as
// "10s").
type Rule struct {
	Tenant   string `mapstructure:"tenant" json:"tenant"`
	Resource string `mapstructure:"resource" json:"resource"`
	// Algorithm defaults to limits.algorithm, in the file and in the API.
	Algorithm store.Algorithm `mapstructure:"algorithm" json:"algorithm"`
	// Limit and Window apply to sliding_window and sliding_log.
	Limit  int64             `mapstructure:"limit" json:"limit,omitempty"`
	Window confutil.Duration `mapstructure:"window" json:"window,omitempty"`
	// Capacity and RefillRate (permits per second) apply to token_bucket.
	Capacity   int64   `mapstructure:"capacity" json:"capacity,omitempty"`
	RefillRate float64 `mapstructure:"refill_rate" json:"refill_rate,omitempty"`
	// Shadow decides and counts but never rejects.
	Shadow bool `mapstructure:"shadow" json:"shadow,omitempty"`
}

// Defaults are what the limits section gives the rules and the policies.
type Defaults struct {
	Algorithm store.Algorithm // limits.algorithm
	Window    time.Duration   // limits.window
	Zone      *time.Location  // limits.quota_time_zone (nil: UTC)
}

// fill sets an unset algorithm to limits.algorithm and, unless that makes
// a token bucket, an unset window to limits.window: a rule's, or a
// policy's limit without a period.
func (d Defaults) fill(alg *store.Algorithm, window *confutil.Duration) {
	confutil.SetDefault(alg, d.Algorithm)
	if *alg != store.TokenBucket {
		confutil.SetDefault(window, confutil.Duration(d.Window))
	}
}

// SetDefaults fills the algorithm and window from the limits section
// (limits.algorithm and limits.window).
func (r *Rule) SetDefaults(def Defaults) { def.fill(&r.Algorithm, &r.Window) }

// Validate checks a rule; field is its YAML key or an empty string for the
// API (errors then name the JSON field alone). The error joins one line per
// bad key.
func (r *Rule) Validate(field string) error {
	key := func(k string) string { return subKey(field, k) }
	var errs []error
	if r.Tenant != AnonymousTenant {
		errs = append(errs, checkName(key("tenant"), r.Tenant))
	}
	errs = append(errs, checkName(key("resource"), r.Resource))
	bad := func(k, msg string) { errs = append(errs, &ValidationError{Field: key(k), Msg: msg}) }
	// A rule built in Go, or sent without an algorithm, was not decoded
	// from a name: its algorithm is checked by the same parser.
	switch alg, err := store.ParseAlgorithm(r.Algorithm.String()); {
	case err != nil:
		bad("algorithm", err.Error())
	case alg == store.TokenBucket:
		if msg := checkCount("capacity", r.Capacity, "for token_bucket"); msg != "" {
			bad("capacity", msg)
		}
		if msg := store.CheckRefill(r.Capacity, r.RefillRate); msg != "" {
			bad("refill_rate", fmt.Sprintf("%v %s", r.RefillRate, msg))
		}
		if r.Limit != 0 {
			bad("limit", "limit and window apply to the sliding algorithms; use capacity and refill_rate")
		}
	default:
		if msg := checkCount("limit", r.Limit, "for "+r.Algorithm.String()); msg != "" {
			bad("limit", msg)
		}
		if w := r.Window.D(); w == 0 {
			bad("window", fmt.Sprintf("required for %s (a duration such as 1s)", r.Algorithm))
		} else if w < time.Millisecond || w > store.MaxWindow {
			bad("window", fmt.Sprintf("%v is out of range [1ms, %v]", w, store.MaxWindow))
		}
		if r.Capacity != 0 || r.RefillRate != 0 {
			bad("capacity", "capacity and refill_rate apply to token_bucket only; use limit and window")
		}
	}
	return errors.Join(errs...)
}

// checkCount says what is wrong with a limit's or a bucket's count n
// (usedFor: "for token_bucket"), or "": unset (0, which also reads as absent) is
// missing, not out of range.
func checkCount(what string, n int64, usedFor string) string {
	switch {
	case n == 0:
		return fmt.Sprintf("missing: a %s of 1..%d is required %s", what, int64(store.MaxLimit), usedFor)
	case n < 1 || n > store.MaxLimit:
		return fmt.Sprintf("%d is out of range 1..%d %s", n, int64(store.MaxLimit), usedFor)
	}
	return ""
}

// storeParams returns the store parameters of a valid rule.
func (r *Rule) storeParams() store.Params {
	return store.Params{Algorithm: r.Algorithm, Limit: r.Limit, Window: r.Window.D(), Capacity: r.Capacity, RefillRate: r.RefillRate}
}

// checkName accepts tenant IDs and resource names: 1..64 characters of
// letters, digits, '-', '_' and '.', so that they fit keys and labels.
func checkName(field, s string) error {
	if s == "" || len(s) > 64 {
		return &ValidationError{Field: field, Msg: fmt.Sprintf("%q must be 1..64 characters", s)}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return &ValidationError{Field: field, Msg: fmt.Sprintf("%q may only contain letters, digits, '-', '_' and '.'", s)}
		}
	}
	return nil
}

// CheckName checks a name as tenant IDs and resource names are checked
// (1..64 letters, digits, '-', '_', '.'); the error names field.
func CheckName(field, s string) error { return checkName(field, s) }

// Params returns the store parameters of a valid rule.
func (r *Rule) Params() store.Params { return r.storeParams() }
