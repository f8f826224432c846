package limit

import (
	"context"
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
// Without Redis the catalog is the store of rules and tenants (its PutRule,
// DeleteRule, PutTenant and DeleteTenant change the process only). With Redis,
// a CatalogSync writes through to Redis and replaces the catalog's contents on
// every pod.
type Catalog struct {
	mu     sync.Mutex // serializes writers; guards routes
	snap   atomic.Pointer[catalogSnapshot]
	routes []string // resources of the proxy's routes (metric labels)
}

type catalogSnapshot struct {
	version uint64
	plans   map[string]float64
	tenants map[string]*Tenant // by ID
	keys    map[string]*Tenant // by API key
	rules   map[ruleName]*Rule // by (tenant, resource)
	tlist   []Tenant           // sorted by ID
	rlist   []Rule             // sorted by tenant, resource
}

// NewCatalog validates and indexes the configured plans, tenants and rules.
// Rules must have their defaults set (Rule.SetDefaults). Errors name the YAML
// key (tenants[1].api_keys[0], rules[0].capacity).
func NewCatalog(plans map[string]float64, tenants []Tenant, rules []Rule) (*Catalog, error) {
	if plans == nil {
		plans = map[string]float64{"FREE": 1, "STANDARD": 1, "PREMIUM": 1}
	}
	if err := ValidatePlans(plans); err != nil {
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
func buildSnapshot(plans map[string]float64, tenants []Tenant, rules []Rule, tfield, rfield string) (*catalogSnapshot, error) {
	s := &catalogSnapshot{
		plans:   plans,
		tenants: make(map[string]*Tenant, len(tenants)),
		keys:    make(map[string]*Tenant),
		rules:   make(map[ruleName]*Rule, len(rules)),
	}
	for i := range tenants {
		t := cloneTenant(tenants[i])
		field := fmt.Sprintf("%s[%d]", tfield, i)
		if err := t.Validate(field); err != nil {
			return nil, err
		}
		if _, dup := s.tenants[t.ID]; dup {
			return nil, &ValidationError{Field: field + ".id", Msg: fmt.Sprintf("tenant %q is defined twice", t.ID)}
		}
		s.tenants[t.ID] = &t
		for j, k := range t.APIKeys {
			if other, dup := s.keys[k]; dup {
				return nil, &ValidationError{Field: fmt.Sprintf("%s.api_keys[%d]", field, j),
					Msg: fmt.Sprintf("the key already belongs to tenant %q", other.ID)}
			}
			s.keys[k] = &t
		}
	}
	for i := range rules {
		r := rules[i]
		field := fmt.Sprintf("%s[%d]", rfield, i)
		if err := r.Validate(field); err != nil {
			return nil, err
		}
		n := ruleName{r.Tenant, r.Resource}
		if _, dup := s.rules[n]; dup {
			return nil, &ValidationError{Field: field, Msg: fmt.Sprintf("a rule for tenant %q and resource %q is defined twice", r.Tenant, r.Resource)}
		}
		s.rules[n] = &r
	}
	s.tlist = make([]Tenant, 0, len(s.tenants))
	for _, t := range s.tenants {
		s.tlist = append(s.tlist, *t)
	}
	slices.SortFunc(s.tlist, func(a, b Tenant) int { return strings.Compare(a.ID, b.ID) })
	s.rlist = make([]Rule, 0, len(s.rules))
	for _, r := range s.rules {
		s.rlist = append(s.rlist, *r)
	}
	slices.SortFunc(s.rlist, func(a, b Rule) int {
		if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
			return c
		}
		return strings.Compare(a.Resource, b.Resource)
	})
	return s, nil
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

// FindRule returns the rule for (tenant, resource), or nil. It allocates
// nothing; the rule is read-only.
func (c *Catalog) FindRule(tenant, resource string) *Rule {
	return c.snap.Load().rules[ruleName{tenant, resource}]
}

// PlanMultiplier returns the limit multiplier of a plan (1 for an unknown plan).
func (c *Catalog) PlanMultiplier(plan string) float64 {
	if m, ok := c.snap.Load().plans[plan]; ok {
		return m
	}
	return 1
}

// Version increases with every change of tenants or rules.
func (c *Catalog) Version() uint64 { return c.snap.Load().version }

// Tenant returns a copy of the tenant with the ID.
func (c *Catalog) Tenant(id string) (Tenant, bool) {
	t, ok := c.snap.Load().tenants[id]
	if !ok {
		return Tenant{}, false
	}
	return cloneTenant(*t), true
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
	r := c.FindRule(tenant, resource)
	if r == nil {
		return Rule{}, false
	}
	return *r, true
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
	s.version = old.version + 1
	c.snap.Store(s)
	c.publishLabels(s)
	return nil
}

// PutRule creates or replaces a rule in this process. Errors are
// *ValidationError naming the JSON field, or ErrUnknownTenant.
func (c *Catalog) PutRule(_ context.Context, r Rule) error {
	if err := r.Validate(""); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkRuleTenant(r.Tenant); err != nil {
		return err
	}
	old := c.snap.Load()
	rules := slices.DeleteFunc(slices.Clone(old.rlist), func(x Rule) bool {
		return x.Tenant == r.Tenant && x.Resource == r.Resource
	})
	return c.replaceLocked(old.tlist, append(rules, r))
}

// DeleteRule removes a rule from this process; ErrEntryNotFound when there is
// none.
func (c *Catalog) DeleteRule(_ context.Context, tenant, resource string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.snap.Load()
	if old.rules[ruleName{tenant, resource}] == nil {
		return ErrEntryNotFound
	}
	rules := slices.DeleteFunc(slices.Clone(old.rlist), func(x Rule) bool {
		return x.Tenant == tenant && x.Resource == resource
	})
	return c.replaceLocked(old.tlist, rules)
}

// PutTenant creates or replaces a tenant in this process. An API key that
// belongs to another tenant is a *ValidationError.
func (c *Catalog) PutTenant(_ context.Context, t Tenant) error {
	if err := t.Validate(""); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.snap.Load()
	for i, k := range t.APIKeys {
		if o, ok := old.keys[k]; ok && o.ID != t.ID {
			return &ValidationError{Field: fmt.Sprintf("api_keys[%d]", i), Msg: fmt.Sprintf("the key already belongs to tenant %q", o.ID)}
		}
	}
	tenants := slices.DeleteFunc(slices.Clone(old.tlist), func(x Tenant) bool { return x.ID == t.ID })
	return c.replaceLocked(append(tenants, t), old.rlist)
}

// DeleteTenant removes a tenant (and so its API keys) from this process;
// ErrEntryNotFound when there is none. Its rules stay.
func (c *Catalog) DeleteTenant(_ context.Context, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.snap.Load()
	if old.tenants[id] == nil {
		return ErrEntryNotFound
	}
	tenants := slices.DeleteFunc(slices.Clone(old.tlist), func(x Tenant) bool { return x.ID == id })
	return c.replaceLocked(tenants, old.rlist)
}
