package catalog

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"time"
)

// Change is one entry's new state for Apply: a rule or a tenant, put or
// deleted. Build it with RulePut, RuleDelete, TenantPut or TenantDelete.
type Change struct {
	isTenant bool
	name     ruleName // the rule changed
	id       string   // the tenant changed
	rule     *Rule    // nil: delete the rule
	tenant   *Tenant  // nil: delete the tenant
}

// RulePut puts r; RuleDelete deletes the rule for (tenant, resource).
func RulePut(r Rule) Change {
	return Change{name: ruleName{r.Tenant, r.Resource}, rule: &r}
}
func RuleDelete(tenant, resource string) Change { return Change{name: ruleName{tenant, resource}} }

// TenantPut puts t (with its API keys); TenantDelete deletes the tenant id.
func TenantPut(t Tenant) Change {
	return Change{isTenant: true, id: t.ID, tenant: &t}
}
func TenantDelete(id string) Change { return Change{isTenant: true, id: id} }

// labelDelay bounds the time between two publications of the catalog's names
// to the metrics after changes. Each costs a pass over every entry, so a
// change publishes at once only when the last publication is older than ten
// times what that one cost (a small catalog: nearly always), and a burst of
// writes to a large one shares a publication. A new name's decisions are
// counted under "other" until its publication.
const labelDelay = 100 * time.Millisecond

// Apply applies changes as one new snapshot, all or nothing. Its cost is
// that of copying the overlay (see catalogSnapshot), not every entry: the
// overlay is folded into new base maps once it holds overlayLimit entries.
func (c *Catalog) Apply(changes []Change) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.snap.Load()
	s := &catalogSnapshot{
		plans: old.plans, tenants: old.tenants, keys: old.keys, rules: old.rules,
		otenants: maps.Clone(old.otenants), okeys: maps.Clone(old.okeys), orules: maps.Clone(old.orules),
	}
	if s.otenants == nil {
		s.otenants, s.okeys, s.orules = map[string]*Tenant{}, map[string]*Tenant{}, map[ruleName]*CompiledRule{}
	}
	var errs []error
	for i := range changes {
		if err := s.apply(&changes[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(s.otenants)+len(s.okeys)+len(s.orules) > overlayLimit(len(s.tenants)+len(s.rules)) {
		s = s.folded()
	}
	c.snap.Store(s)
	c.labelsSoon()
	return nil
}

// overlayLimit is the overlay size past which it is folded: about 4√n, so
// that a change costs O(√n) map writes, copies and folds included.
func overlayLimit(n int) int { return 64 + 4*int(math.Sqrt(float64(n))) }

func (s *catalogSnapshot) apply(ch *Change) error {
	switch {
	case !ch.isTenant && ch.rule != nil:
		r := *ch.rule
		if err := r.Validate("rules"); err != nil {
			return err
		}
		setOverlay(s.orules, s.rules, ch.name, &CompiledRule{Rule: r, Params: r.storeParams()})
	case !ch.isTenant:
		setOverlay(s.orules, s.rules, ch.name, nil)
	case ch.tenant != nil:
		return s.putTenant(cloneTenant(*ch.tenant))
	default:
		if old := s.tenant(ch.id); old != nil {
			for _, k := range old.APIKeys {
				setOverlay(s.okeys, s.keys, k, nil)
			}
		}
		setOverlay(s.otenants, s.tenants, ch.id, nil)
	}
	return nil
}

// putTenant adds or replaces t; its API keys must belong to no other tenant.
func (s *catalogSnapshot) putTenant(t Tenant) error {
	if err := t.Validate("tenants"); err != nil {
		return err
	}
	for j, k := range t.APIKeys {
		if other := s.key(k); other != nil && other.ID != t.ID {
			return &ValidationError{Field: fmt.Sprintf("tenants.api_keys[%d]", j),
				Msg: fmt.Sprintf("the key already belongs to tenant %q", other.ID)}
		}
	}
	if old := s.tenant(t.ID); old != nil {
		for _, k := range old.APIKeys {
			setOverlay(s.okeys, s.keys, k, nil)
		}
	}
	p := &t
	for _, k := range t.APIKeys {
		setOverlay(s.okeys, s.keys, k, p)
	}
	setOverlay(s.otenants, s.tenants, t.ID, p)
	return nil
}

// setOverlay sets k to v (nil: deleted) in the overlay over base.
func setOverlay[K comparable, V any](overlay, base map[K]*V, k K, v *V) {
	if _, inBase := base[k]; v == nil && !inBase {
		delete(overlay, k)
		return
	}
	overlay[k] = v
}

// folded returns s with its overlay folded into new base maps.
func (s *catalogSnapshot) folded() *catalogSnapshot {
	return &catalogSnapshot{
		plans:   s.plans,
		tenants: fold(s.tenants, s.otenants),
		keys:    fold(s.keys, s.okeys),
		rules:   fold(s.rules, s.orules),
	}
}

func fold[K comparable, V any](base, overlay map[K]*V) map[K]*V {
	m := make(map[K]*V, len(base)+len(overlay))
	maps.Copy(m, base)
	for k, v := range overlay {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return m
}

// labelsSoon publishes the names of the current snapshot to the metrics,
// at once when the last publication is older than labelDelay, else once
// when it is (c.mu held).
func (c *Catalog) labelsSoon() {
	if c.labelTimer != nil || c.closed {
		return
	}
	wait := min(labelDelay, 10*c.labelCost) - time.Since(c.labelsAt)
	if wait <= 0 {
		c.publishLabelsTimed()
		return
	}
	c.labelTimer = time.AfterFunc(wait, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.labelTimer = nil
		if !c.closed {
			c.publishLabelsTimed()
		}
	})
}

// publishLabelsTimed publishes the current names and notes when and at what
// cost (c.mu held).
func (c *Catalog) publishLabelsTimed() {
	c.labelsAt = time.Now()
	c.publishLabels(c.snap.Load())
	c.labelCost = time.Since(c.labelsAt)
}
