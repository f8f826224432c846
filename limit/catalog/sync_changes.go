package catalog

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/rueidis"
)

// update brings this pod's catalog up to date with Redis: the entries
// changed since the generation it has seen, or the whole catalog when the
// change log cannot say (see Sync).
func (s *Sync) update(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updateLocked(ctx)
}

func (s *Sync) updateLocked(ctx context.Context) error {
	syncReloadsChanges.Inc()
	arr, err := catalogChanges.Exec(ctx, s.client, s.keys(), []string{fmt.Sprint(s.seen), s.epoch}).ToArray()
	if err != nil {
		return fmt.Errorf("reading the catalog's changes from redis: %w", err)
	}
	if len(arr) < 3 || len(arr)%2 != 1 {
		return fmt.Errorf("reading the catalog's changes from redis: %d replies", len(arr))
	}
	gen, err := arr[0].AsInt64()
	if err != nil {
		return fmt.Errorf("reading the catalog's generation: %w", err)
	}
	epoch, err := arr[1].ToString()
	if err != nil {
		return fmt.Errorf("reading the catalog's epoch: %w", err)
	}
	if full, _ := arr[2].AsInt64(); full == 1 {
		syncReloadsFull.Inc()
		return s.reloadLocked(ctx)
	}
	if gen == s.seen {
		return nil
	}
	pairs := arr[3:]
	syncEntriesRead.Add(len(pairs) / 2)
	api, err := s.decodeChanges(pairs)
	if err != nil {
		return err
	}
	if err := s.applyChanges(api); err != nil {
		return err
	}
	s.seen, s.epoch = gen, epoch
	return nil
}

// entryChange is one API entry as the change log gives it ("tenant:<id>",
// "rule:<tenant>:<resource>" or "policy:<name>"), with its new value (nil:
// deleted), or its value before a change, to undo it.
type entryChange struct {
	name string
	rule *Rule
	ten  *Tenant
	pol  *Policy
}

// decodeChanges reads the change log's (name, document) pairs; an entry
// whose document does not decode is logged and skipped.
func (s *Sync) decodeChanges(pairs []rueidis.RedisMessage) ([]entryChange, error) {
	api := make([]entryChange, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		name, err1 := pairs[i].ToString()
		doc, err2 := pairs[i+1].ToString()
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("reading the catalog's changes from redis: %v %v", err1, err2)
		}
		c := entryChange{name: name}
		if doc != "" {
			if err := s.decodeEntry(&c, doc); err != nil {
				s.opts.Logf("limit: catalog sync: skipping %s in redis: %v", name, err)
			}
		}
		api = append(api, c)
	}
	return api, nil
}

// decodeEntry sets c's value from its stored document.
func (s *Sync) decodeEntry(c *entryChange, doc string) error {
	if strings.HasPrefix(c.name, "tenant:") {
		t, err := decodeTenant(doc)
		if err == nil {
			c.ten = &t
		}
		return err
	}
	if _, ok := isPolicy(c.name); ok {
		p, err := decodePolicy(doc, s.pol.def)
		if err == nil {
			c.pol = &p
		}
		return err
	}
	r, err := decodeRule(doc)
	if err == nil {
		c.rule = &r
	}
	return err
}

// applyChanges changes the API entries, derives the catalog's changes from
// them, and undoes them when the catalog refuses those: all or nothing, the
// policies compiled before anything is applied.
func (s *Sync) applyChanges(api []entryChange) error {
	undos := make([]entryChange, 0, len(api))
	changes := make([]Change, 0, len(api))
	policies := false
	for _, c := range api {
		undos = append(undos, s.setAPIEntry(c))
		if _, ok := isPolicy(c.name); ok {
			policies = true
		} else {
			changes = append(changes, s.effective(c.name))
		}
	}
	var entries []PolicyEntry
	var ps *PolicySet
	var err error
	if policies {
		entries, ps, err = s.pol.compile(s.pol.api)
	}
	if err == nil && len(changes) > 0 {
		err = s.cat.Apply(changes)
	}
	if err != nil {
		ps.Release() // compiled, never applied
		for i := len(undos) - 1; i >= 0; i-- {
			s.setAPIEntry(undos[i])
		}
		return err
	}
	if policies {
		s.installPolicies(entries, ps)
	}
	return nil
}

// setAPIEntry sets the API entry c.name to c's value and returns its value
// before.
func (s *Sync) setAPIEntry(c entryChange) entryChange {
	u := entryChange{name: c.name}
	if id, ok := strings.CutPrefix(c.name, "tenant:"); ok {
		if t, ok := s.tenants[id]; ok {
			u.ten = &t
		}
		setEntry(s.tenants, id, c.ten)
	} else if name, ok := isPolicy(c.name); ok {
		if p, ok := s.pol.api[name]; ok {
			u.pol = &p
		}
		setEntry(s.pol.api, name, c.pol)
	} else {
		n := ruleNameOf(c.name)
		if r, ok := s.rules[n]; ok {
			u.rule = &r
		}
		setEntry(s.rules, n, c.rule)
	}
	return u
}

// ruleKey identifies a rule: its tenant and resource.
type ruleKey struct{ tenant, resource string }

// ruleNameOf parses "rule:<tenant>:<resource>" (a tenant ID holds no ':').
func ruleNameOf(name string) ruleKey {
	field, _ := strings.CutPrefix(name, "rule:")
	tenant, resource, _ := strings.Cut(field, ":")
	return ruleKey{tenant, resource}
}

// setEntry sets m[k] to *v, or deletes it when v is nil.
func setEntry[K comparable, V any](m map[K]V, k K, v *V) {
	if v == nil {
		delete(m, k)
		return
	}
	m[k] = *v
}
