package catalog

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Catalog holds the plans, the tenants (with their API keys) and the rules.
// Readers see one immutable snapshot behind an atomic pointer, so the request
// path never locks; writers build a new snapshot under a mutex and swap it.
//
// A Sync changes it: with Redis it writes through to Redis and
// replaces the catalog's contents on every pod; without Redis it changes the
// process only.
type Catalog struct {
	mu     sync.Mutex // serializes writers; guards the fields below
	snap   atomic.Pointer[catalogSnapshot]
	routes []string // resources of the proxy's routes (metric labels)

	labelsAt   time.Time     // when the names were last published (see labelsSoon)
	labelCost  time.Duration // what that publication took
	labelTimer *time.Timer   // a publication to come, or nil
	closed     bool
}

// catalogSnapshot is one immutable state of the catalog: maps built at once
// (base), and an overlay of the entries changed since, so that one change
// copies the overlay rather than every entry. A nil value in an overlay map
// deletes the base entry. When the overlay grows past overlayLimit, the next
// change folds it into new base maps.
type catalogSnapshot struct {
	plans   Plans
	tenants map[string]*Tenant         // by ID
	keys    map[string]*Tenant         // by API key
	rules   map[ruleName]*CompiledRule // by (tenant, resource)

	otenants map[string]*Tenant
	okeys    map[string]*Tenant
	orules   map[ruleName]*CompiledRule

	listOnce sync.Once
	tlist    []Tenant // sorted by ID, built on first use
	rlist    []Rule   // sorted by tenant, resource, built on first use
}

// tenant, key and rule look an entry up, overlay first. They allocate nothing.
func (s *catalogSnapshot) tenant(id string) *Tenant {
	if t, ok := s.otenants[id]; ok {
		return t
	}
	return s.tenants[id]
}

func (s *catalogSnapshot) key(k string) *Tenant {
	if t, ok := s.okeys[k]; ok {
		return t
	}
	return s.keys[k]
}

func (s *catalogSnapshot) rule(n ruleName) *CompiledRule {
	if r, ok := s.orules[n]; ok {
		return r
	}
	return s.rules[n]
}

// eachTenant and eachRule visit every live entry once.
func (s *catalogSnapshot) eachTenant(f func(*Tenant)) {
	for id, t := range s.tenants {
		if _, over := s.otenants[id]; !over {
			f(t)
		}
	}
	for _, t := range s.otenants {
		if t != nil {
			f(t)
		}
	}
}

func (s *catalogSnapshot) eachRule(f func(*CompiledRule)) {
	for n, r := range s.rules {
		if _, over := s.orules[n]; !over {
			f(r)
		}
	}
	for _, r := range s.orules {
		if r != nil {
			f(r)
		}
	}
}

// CompiledRule is a rule with its store parameters, parsed once when the
// snapshot is built so that the request path compares no strings. It is
// read-only.
type CompiledRule struct {
	Rule
	Params store.Params
}

// Check reports what NewCatalog would refuse in the configured tenants and
// rules (rules with their defaults set: Rule.SetDefaults), without building
// a Catalog: one publishes its names as metric labels until Close, which a
// check must not leave behind. Errors name the YAML key
// (tenants[1].api_keys[0], rules[0].capacity), one line per bad key.
//
// It also refuses a rule for a tenant the file does not define (but
// AnonymousTenant): the rules API refuses a rule for a tenant it does not
// know (404), since it could never apply, and a file that means the same
// must fail too. A tenant created through the API gets its rules through
// the API.
func Check(tenants []Tenant, rules []Rule) error {
	_, err := buildSnapshot(nil, tenants, rules, "tenants", "rules")
	known := make(map[string]bool, len(tenants))
	for _, t := range tenants {
		known[t.ID] = true
	}
	errs := []error{err}
	for i, r := range rules {
		if r.Tenant != AnonymousTenant && r.Tenant != "" && !known[r.Tenant] {
			errs = append(errs, &ValidationError{Field: fmt.Sprintf("rules[%d].tenant", i),
				Msg: fmt.Sprintf("no tenant %q in tenants: a rule for it would never apply; add the tenant, or write the rule through the API for a tenant created there (%q: clients without an API key)",
					r.Tenant, AnonymousTenant)})
		}
	}
	return errors.Join(errs...)
}

// NewCatalog indexes the configured plans (nil: DefaultPlans; validated
// with their section: Plans.Validate), tenants and rules (checked: Check).
// Indexing finds the same errors as Check, named the same way.
func NewCatalog(plans Plans, tenants []Tenant, rules []Rule) (*Catalog, error) {
	if plans == nil {
		plans = DefaultPlans()
	}
	s, err := buildSnapshot(maps.Clone(plans), tenants, rules, "tenants", "rules")
	if err != nil {
		return nil, err
	}
	c := &Catalog{}
	c.snap.Store(s)
	c.publishLabels(s)
	return c, nil
}

// SetRouteResources names the resources of the proxy's routes: with the
// tenants and the rules' resources, they are the names that metrics label
// (any other resource is counted as "other").
func (c *Catalog) SetRouteResources(names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.routes = slices.Clone(names)
	c.publishLabels(c.snap.Load())
}

// Close stops the catalog's names from labelling metrics (the series of
// names no other catalog knows are unregistered). The catalog stays usable.
func (c *Catalog) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.labelTimer != nil {
		c.labelTimer.Stop()
		c.labelTimer = nil
	}
	forgetLabels(c)
}

// publishLabels tells the metrics which tenants and resources s names (c.mu
// held, or c not yet shared).
func (c *Catalog) publishLabels(s *catalogSnapshot) {
	n := knownNames{tenants: make(map[string]struct{}, len(s.tenants)), resources: map[string]struct{}{}}
	s.eachTenant(func(t *Tenant) { n.tenants[t.ID] = struct{}{} })
	s.eachRule(func(r *CompiledRule) { n.resources[r.Resource] = struct{}{} })
	for _, r := range c.routes {
		n.resources[r] = struct{}{}
	}
	setKnownLabels(c, n)
}

// buildSnapshot validates and indexes; tfield and rfield prefix error keys.
// The error joins one line per bad key.
func buildSnapshot(plans Plans, tenants []Tenant, rules []Rule, tfield, rfield string) (*catalogSnapshot, error) {
	s := &catalogSnapshot{
		plans:   plans,
		tenants: make(map[string]*Tenant, len(tenants)),
		keys:    make(map[string]*Tenant),
		rules:   make(map[ruleName]*CompiledRule, len(rules)),
	}
	errs := s.addTenants(tenants, tfield)
	for i := range rules {
		r := rules[i]
		field := fmt.Sprintf("%s[%d]", rfield, i)
		if err := r.Validate(field); err != nil {
			errs = append(errs, err)
			continue
		}
		n := ruleName{r.Tenant, r.Resource}
		if _, dup := s.rules[n]; dup {
			errs = append(errs, &ValidationError{Field: field, Msg: fmt.Sprintf("a rule for tenant %q and resource %q is defined twice", r.Tenant, r.Resource)})
			continue
		}
		s.rules[n] = &CompiledRule{Rule: r, Params: r.storeParams()}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// addTenants validates and indexes tenants; it returns the errors.
func (s *catalogSnapshot) addTenants(tenants []Tenant, tfield string) []error {
	var errs []error
	for i := range tenants {
		t := cloneTenant(tenants[i])
		field := fmt.Sprintf("%s[%d]", tfield, i)
		if err := t.Validate(field); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := s.tenants[t.ID]; dup {
			errs = append(errs, &ValidationError{Field: field + ".id", Msg: fmt.Sprintf("tenant %q is defined twice", t.ID)})
			continue
		}
		s.tenants[t.ID] = &t
		for j, k := range t.APIKeys {
			if other, dup := s.keys[k]; dup {
				errs = append(errs, &ValidationError{Field: fmt.Sprintf("%s.api_keys[%d]", field, j),
					Msg: fmt.Sprintf("the key already belongs to tenant %q", other.ID)})
				continue
			}
			s.keys[k] = &t
		}
	}
	return errs
}

// lists returns every tenant and every rule, sorted, built once per snapshot.
func (s *catalogSnapshot) lists() ([]Tenant, []Rule) {
	s.listOnce.Do(func() {
		s.tlist = make([]Tenant, 0, len(s.tenants)+len(s.otenants))
		s.eachTenant(func(t *Tenant) { s.tlist = append(s.tlist, *t) })
		slices.SortFunc(s.tlist, func(a, b Tenant) int { return strings.Compare(a.ID, b.ID) })
		s.rlist = make([]Rule, 0, len(s.rules)+len(s.orules))
		s.eachRule(func(r *CompiledRule) { s.rlist = append(s.rlist, r.Rule) })
		slices.SortFunc(s.rlist, func(a, b Rule) int {
			if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
				return c
			}
			return strings.Compare(a.Resource, b.Resource)
		})
	})
	return s.tlist, s.rlist
}

// ruleName identifies a rule.
type ruleName struct{ tenant, resource string }

// ErrEntryNotFound is returned when deleting a rule or tenant that does not
// exist.
var ErrEntryNotFound = errors.New("limit: no such entry")

func cloneTenant(t Tenant) Tenant {
	t.APIKeys = slices.Clone(t.APIKeys)
	return t
}

// LookupAPIKey returns the tenant of an API key. It allocates nothing; the
// tenant is read-only.
func (c *Catalog) LookupAPIKey(key []byte) (*Tenant, bool) {
	t := c.snap.Load().key(string(key))
	return t, t != nil
}

// findRule returns the rule for (tenant, resource), or nil. It allocates
// nothing; the rule is read-only.
func (c *Catalog) findRule(tenant, resource string) *CompiledRule {
	return c.snap.Load().rule(ruleName{tenant, resource})
}

// PlanMultiplier returns the limit multiplier of a plan (1 for an unknown plan).
func (c *Catalog) PlanMultiplier(plan string) float64 {
	if m, ok := c.snap.Load().plans[plan]; ok {
		return m
	}
	return 1
}

// Tenant returns a copy of the tenant with the ID.
func (c *Catalog) Tenant(id string) (Tenant, bool) {
	t := c.snap.Load().tenant(id)
	if t == nil {
		return Tenant{}, false
	}
	return cloneTenant(*t), true
}

// TenantPlan returns the plan of tenant id, without copying the tenant: the
// check API and the rate limit service look it up for every decision.
func (c *Catalog) TenantPlan(id string) (string, bool) {
	t := c.snap.Load().tenant(id)
	if t == nil {
		return "", false
	}
	return string(t.Plan), true
}

// Tenants returns a copy of every tenant, sorted by ID.
func (c *Catalog) Tenants() []Tenant {
	l, _ := c.snap.Load().lists()
	out := make([]Tenant, len(l))
	for i := range l {
		out[i] = cloneTenant(l[i])
	}
	return out
}

// Rule returns the rule for (tenant, resource).
func (c *Catalog) Rule(tenant, resource string) (Rule, bool) {
	r := c.findRule(tenant, resource)
	if r == nil {
		return Rule{}, false
	}
	return r.Rule, true
}

// Rules returns a copy of every rule, sorted by tenant and resource.
func (c *Catalog) Rules() []Rule {
	_, l := c.snap.Load().lists()
	return slices.Clone(l)
}

// Replace swaps in a whole new set of tenants and rules (the plans stay).
// Nothing changes when they do not validate.
func (c *Catalog) Replace(tenants []Tenant, rules []Rule) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.replaceLocked(tenants, rules)
}

func (c *Catalog) replaceLocked(tenants []Tenant, rules []Rule) error {
	old := c.snap.Load()
	s, err := buildSnapshot(old.plans, tenants, rules, "tenants", "rules")
	if err != nil {
		return err
	}
	c.snap.Store(s)
	c.publishLabelsTimed()
	return nil
}
