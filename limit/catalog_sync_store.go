package limit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// ruleDoc is a rule as stored in Redis.
type ruleDoc struct {
	Tenant     string  `json:"tenant"`
	Resource   string  `json:"resource"`
	Algorithm  string  `json:"algorithm"`
	Limit      int64   `json:"limit,omitempty"`
	WindowMS   int64   `json:"window_ms,omitempty"`
	Capacity   int64   `json:"capacity,omitempty"`
	RefillRate float64 `json:"refill_rate,omitempty"`
	Shadow     bool    `json:"shadow,omitempty"`
}

func toDoc(r Rule) ruleDoc {
	return ruleDoc{Tenant: r.Tenant, Resource: r.Resource, Algorithm: r.Algorithm, Limit: r.Limit,
		WindowMS: r.Window.Milliseconds(), Capacity: r.Capacity, RefillRate: r.RefillRate, Shadow: r.Shadow}
}

func (d ruleDoc) rule() Rule {
	return Rule{Tenant: d.Tenant, Resource: d.Resource, Algorithm: d.Algorithm, Limit: d.Limit,
		Window: time.Duration(d.WindowMS) * time.Millisecond, Capacity: d.Capacity, RefillRate: d.RefillRate, Shadow: d.Shadow}
}

// reloadAll reads every API rule and tenant from Redis and applies them.
func (s *CatalogSync) reloadAll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	c := s.client
	idx := c.DoMulti(ctx, c.B().Smembers().Key(s.rulesIndex()).Build(), c.B().Smembers().Key(s.tenantsIndex()).Build())
	ruleNames, err := idx[0].AsStrSlice()
	if err != nil {
		return fmt.Errorf("reading %s: %w", s.rulesIndex(), err)
	}
	tenantNames, err := idx[1].AsStrSlice()
	if err != nil {
		return fmt.Errorf("reading %s: %w", s.tenantsIndex(), err)
	}
	names := append(ruleNames, tenantNames...)
	cmds := make(rueidis.Commands, 0, len(names))
	for _, n := range names {
		cmds = append(cmds, c.B().Get().Key(s.key(n)).Build())
	}
	rules := map[ruleName]Rule{}
	tenants := map[string]Tenant{}
	if len(cmds) > 0 {
		for i, res := range c.DoMulti(ctx, cmds...) {
			v, err := res.ToString()
			if rueidis.IsRedisNil(err) {
				continue // deleted meanwhile
			}
			if err != nil {
				return fmt.Errorf("reading %s: %w", s.key(names[i]), err)
			}
			if err := decodeEntry(names[i], v, rules, tenants); err != nil {
				s.opts.Logf("limit: catalog sync: skipping %s: %v", s.key(names[i]), err)
			}
		}
	}
	syncReloadsFull.Inc()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules, s.tenants = rules, tenants
	return s.applyLocked()
}

// reloadEntry reads one entry named by a change message and applies it.
func (s *CatalogSync) reloadEntry(ctx context.Context, name string) error {
	if !strings.HasPrefix(name, "rule:") && !strings.HasPrefix(name, "tenant:") {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	v, err := s.client.Do(ctx, s.client.B().Get().Key(s.key(name)).Build()).ToString()
	missing := rueidis.IsRedisNil(err)
	if err != nil && !missing {
		return fmt.Errorf("reading %s: %w", s.key(name), err)
	}
	syncReloadsMessage.Inc()
	s.mu.Lock()
	defer s.mu.Unlock()
	if missing {
		if t, r, ok := splitRuleEntry(name); ok {
			delete(s.rules, ruleName{t, r})
		} else {
			delete(s.tenants, strings.TrimPrefix(name, "tenant:"))
		}
	} else if err := decodeEntry(name, v, s.rules, s.tenants); err != nil {
		return fmt.Errorf("%s: %w", s.key(name), err)
	}
	return s.applyLocked()
}

func splitRuleEntry(name string) (tenant, resource string, ok bool) {
	rest, ok := strings.CutPrefix(name, "rule:")
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, ":")
}

// decodeEntry parses one stored document into rules or tenants.
func decodeEntry(name, v string, rules map[ruleName]Rule, tenants map[string]Tenant) error {
	if strings.HasPrefix(name, "rule:") {
		var d ruleDoc
		if err := json.Unmarshal([]byte(v), &d); err != nil {
			return err
		}
		r := d.rule()
		if err := r.Validate(""); err != nil {
			return err
		}
		rules[ruleName{r.Tenant, r.Resource}] = r
		return nil
	}
	var t Tenant
	if err := json.Unmarshal([]byte(v), &t); err != nil {
		return err
	}
	if err := t.Validate(""); err != nil {
		return err
	}
	tenants[t.ID] = t
	return nil
}

// merged is the config entries overlaid with the API entries.
func (s *CatalogSync) merged(rules map[ruleName]Rule, tenants map[string]Tenant) ([]Tenant, []Rule) {
	var ts []Tenant
	for _, t := range s.baseTenants {
		if _, over := tenants[t.ID]; !over {
			ts = append(ts, t)
		}
	}
	for _, t := range tenants {
		ts = append(ts, t)
	}
	var rs []Rule
	for _, r := range s.baseRules {
		if _, over := rules[ruleName{r.Tenant, r.Resource}]; !over {
			rs = append(rs, r)
		}
	}
	for _, r := range rules {
		rs = append(rs, r)
	}
	return ts, rs
}

// applyLocked replaces the catalog's contents (s.mu held).
func (s *CatalogSync) applyLocked() error {
	ts, rs := s.merged(s.rules, s.tenants)
	return s.cat.Replace(ts, rs)
}

// write stores (doc != "") or deletes an entry, updates the index and
// publishes the change.
func (s *CatalogSync) write(ctx context.Context, name, index, doc string) error {
	if s.client == nil {
		return nil // in-process only
	}
	c := s.client
	var cmds rueidis.Commands
	if doc != "" {
		cmds = append(cmds, c.B().Set().Key(s.key(name)).Value(doc).Build(), c.B().Sadd().Key(index).Member(name).Build())
	} else {
		cmds = append(cmds, c.B().Del().Key(s.key(name)).Build(), c.B().Srem().Key(index).Member(name).Build())
	}
	cmds = append(cmds, c.B().Publish().Channel(s.channel()).Message(name).Build())
	for _, res := range c.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			return fmt.Errorf("limit: cannot store %s in redis: %w", s.key(name), err)
		}
	}
	syncWrites.Inc()
	return nil
}

// PutRule creates or replaces an API rule on every pod. Errors:
// *ValidationError for a bad rule, any other for Redis.
func (s *CatalogSync) PutRule(ctx context.Context, r Rule) error {
	if err := r.Validate(""); err != nil {
		return err
	}
	if err := checkSyncID("tenant", r.Tenant); err != nil {
		return err
	}
	doc, _ := json.Marshal(toDoc(r))
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.write(ctx, ruleEntry(r.Tenant, r.Resource), s.rulesIndex(), string(doc)); err != nil {
		return err
	}
	s.rules[ruleName{r.Tenant, r.Resource}] = r
	return s.applyLocked()
}

// DeleteRule removes an API rule on every pod; the config rule of the same
// name, if any, applies again. ErrConfigEntry for a rule that only the config
// defines, ErrEntryNotFound when there is none.
func (s *CatalogSync) DeleteRule(ctx context.Context, tenant, resource string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.rules[ruleName{tenant, resource}]; !ok {
		for _, r := range s.baseRules {
			if r.Tenant == tenant && r.Resource == resource {
				return ErrConfigEntry
			}
		}
		return ErrEntryNotFound
	}
	if err := s.write(ctx, ruleEntry(tenant, resource), s.rulesIndex(), ""); err != nil {
		return err
	}
	delete(s.rules, ruleName{tenant, resource})
	return s.applyLocked()
}

// PutTenant creates or replaces an API tenant on every pod. An API key of
// another tenant is a *ValidationError.
func (s *CatalogSync) PutTenant(ctx context.Context, t Tenant) error {
	if err := t.Validate(""); err != nil {
		return err
	}
	if err := checkSyncID("id", t.ID); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	trial := make(map[string]Tenant, len(s.tenants)+1)
	for k, v := range s.tenants {
		trial[k] = v
	}
	trial[t.ID] = t
	ts, _ := s.merged(s.rules, trial)
	seen := map[string]string{}
	for _, x := range ts {
		for _, k := range x.APIKeys {
			if other, dup := seen[k]; dup && other != x.ID {
				return &ValidationError{Field: "api_keys", Msg: fmt.Sprintf("key %q already belongs to tenant %q", k, pick(other, x.ID, t.ID))}
			}
			seen[k] = x.ID
		}
	}
	doc, _ := json.Marshal(t)
	if err := s.write(ctx, tenantEntry(t.ID), s.tenantsIndex(), string(doc)); err != nil {
		return err
	}
	s.tenants[t.ID] = t
	return s.applyLocked()
}

// pick names the tenant that is not the one being written.
func pick(a, b, self string) string {
	if a == self {
		return b
	}
	return a
}

// DeleteTenant removes an API tenant on every pod (the config tenant of the
// same ID, if any, applies again).
func (s *CatalogSync) DeleteTenant(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tenants[id]; !ok {
		for _, t := range s.baseTenants {
			if t.ID == id {
				return ErrConfigEntry
			}
		}
		return ErrEntryNotFound
	}
	if err := s.write(ctx, tenantEntry(id), s.tenantsIndex(), ""); err != nil {
		return err
	}
	delete(s.tenants, id)
	return s.applyLocked()
}
