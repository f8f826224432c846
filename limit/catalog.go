package limit

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Catalog holds the plans, the tenants (with their API keys) and the rules.
// Readers see one immutable snapshot behind an atomic pointer, so the request
// path never locks; writers build a new snapshot under a mutex and swap it.
//
// A CatalogSync changes it: with Redis it writes through to Redis and
// replaces the catalog's contents on every pod; without Redis it changes the
// process only.
type Catalog struct {
	mu     sync.Mutex // serializes writers; guards routes
	snap   atomic.Pointer[catalogSnapshot]
	routes []string // resources of the proxy's routes (metric labels)
}

type catalogSnapshot struct {
	plans   Plans
	tenants map[string]*Tenant         // by ID
	keys    map[string]*Tenant         // by API key
	rules   map[ruleName]*compiledRule // by (tenant, resource)
	tlist   []Tenant                   // sorted by ID
	rlist   []Rule                     // sorted by tenant, resource
}

// compiledRule is a rule with its store parameters, parsed once when the
// snapshot is built so that the request path compares no strings.
type compiledRule struct {
	Rule
	params Params
}

// NewCatalog validates and indexes the configured plans (nil: DefaultPlans),
// tenants and rules. Rules must have their defaults set (Rule.SetDefaults).
// Errors name the YAML key (tenants[1].api_keys[0], rules[0].capacity), one
// line per bad key.
func NewCatalog(plans Plans, tenants []Tenant, rules []Rule) (*Catalog, error) {
	if plans == nil {
		plans = DefaultPlans()
	}
	if err := plans.Validate(); err != nil {
		return nil, err
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
	forgetLabels(c)
}

// publishLabels tells the metrics which tenants and resources s names (c.mu
// held, or c not yet shared).
func (c *Catalog) publishLabels(s *catalogSnapshot) {
	n := knownNames{tenants: make(map[string]struct{}, len(s.tenants)), resources: map[string]struct{}{}}
	for id := range s.tenants {
		n.tenants[id] = struct{}{}
	}
	for k := range s.rules {
		n.resources[k.resource] = struct{}{}
	}
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
		rules:   make(map[ruleName]*compiledRule, len(rules)),
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
		s.rules[n] = &compiledRule{Rule: r, params: r.params()}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.sortLists()
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

// sortLists fills tlist and rlist from the maps.
func (s *catalogSnapshot) sortLists() {
	s.tlist = make([]Tenant, 0, len(s.tenants))
	for _, t := range s.tenants {
		s.tlist = append(s.tlist, *t)
	}
	slices.SortFunc(s.tlist, func(a, b Tenant) int { return strings.Compare(a.ID, b.ID) })
	s.rlist = make([]Rule, 0, len(s.rules))
	for _, r := range s.rules {
		s.rlist = append(s.rlist, r.Rule)
	}
	slices.SortFunc(s.rlist, func(a, b Rule) int {
		if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
			return c
		}
		return strings.Compare(a.Resource, b.Resource)
	})
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
	t, ok := c.snap.Load().keys[string(key)]
	return t, ok
}

// findRule returns the rule for (tenant, resource), or nil. It allocates
// nothing; the rule is read-only.
func (c *Catalog) findRule(tenant, resource string) *compiledRule {
	return c.snap.Load().rules[ruleName{tenant, resource}]
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
	t, ok := c.snap.Load().tenants[id]
	if !ok {
		return Tenant{}, false
	}
	return cloneTenant(*t), true
}

// TenantPlan returns the plan of tenant id, without copying the tenant: the
// check API and the rate limit service look it up for every decision.
func (c *Catalog) TenantPlan(id string) (string, bool) {
	t, ok := c.snap.Load().tenants[id]
	if !ok {
		return "", false
	}
	return t.Plan, true
}

// Tenants returns a copy of every tenant, sorted by ID.
func (c *Catalog) Tenants() []Tenant {
	l := c.snap.Load().tlist
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
func (c *Catalog) Rules() []Rule { return slices.Clone(c.snap.Load().rlist) }

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
	c.publishLabels(s)
	return nil
}
