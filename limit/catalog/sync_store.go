package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/store"
	"github.com/sentinel-gateway/sentinel/lua"
)

var (
	catalogRead    = rueidis.NewLuaScript(lua.CatalogRead)
	catalogWrite   = rueidis.NewLuaScript(lua.CatalogWrite)
	catalogChanges = rueidis.NewLuaScript(lua.CatalogChanges)
	catalogRestore = rueidis.NewLuaScript(lua.CatalogRestore)
)

// ruleJSON is a rule as stored in Redis: the Rule's own JSON.
func ruleJSON(r Rule) string {
	b, _ := json.Marshal(r) // plain fields: never fails
	return string(b)
}

func tenantJSON(t Tenant) string {
	b, _ := json.Marshal(t) // plain fields: never fails
	return string(b)
}

// stored is the catalog as one read found it.
type stored struct {
	gen      int64
	epoch    string
	rules    map[ruleKey]Rule
	tenants  map[string]Tenant
	policies map[string]Policy
}

// reload reads the catalog and applies it; when Redis holds an older
// generation than this pod has seen, it restores this pod's catalog instead.
func (s *Sync) reload(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked(ctx)
}

func (s *Sync) reloadLocked(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		st, err := s.read(ctx)
		if err != nil {
			return err
		}
		if st.gen >= s.seen || attempt == 2 {
			oldR, oldT, oldP := s.rules, s.tenants, s.pol.api
			s.rules, s.tenants, s.pol.api = st.rules, st.tenants, st.policies
			if err := s.applyLocked(); err != nil {
				s.rules, s.tenants, s.pol.api = oldR, oldT, oldP
				return err
			}
			s.seen, s.epoch = st.gen, st.epoch
			return nil
		}
		restored, err := s.restoreLocked(ctx, st.gen)
		if err != nil || restored {
			return err
		}
		// Another pod restored a snapshot at least as new: read it.
	}
}

// read runs catalog_read.lua.
func (s *Sync) read(ctx context.Context) (stored, error) {
	arr, err := catalogRead.Exec(ctx, s.client, s.keys(), []string{"0"}).ToArray()
	if err != nil {
		return stored{}, fmt.Errorf("reading the catalog from redis: %w", err)
	}
	if len(arr) != 5 {
		return stored{}, fmt.Errorf("reading the catalog from redis: %d replies, want 5", len(arr))
	}
	var st stored
	if st.gen, err = arr[0].AsInt64(); err != nil {
		return stored{}, fmt.Errorf("reading the catalog's generation: %w", err)
	}
	if st.epoch, err = arr[3].ToString(); err != nil {
		return stored{}, fmt.Errorf("reading the catalog's epoch: %w", err)
	}
	var docs [3]map[string]string // rules, tenants, policies
	for i, at := range [3]int{1, 2, 4} {
		if docs[i], err = arr[at].AsStrMap(); err != nil {
			return stored{}, fmt.Errorf("reading %s: %w", s.keys()[[3]int{0, 1, 6}[i]], err)
		}
	}
	s.decodeStored(&st, docs[0], docs[1], docs[2])
	return st, nil
}

// decodeStored decodes the documents of one read into st; an entry that
// does not decode is logged and skipped.
func (s *Sync) decodeStored(st *stored, rules, tenants, policies map[string]string) {
	syncEntriesRead.Add(len(rules) + len(tenants) + len(policies))
	st.rules, st.tenants = map[ruleKey]Rule{}, map[string]Tenant{}
	st.policies = map[string]Policy{}
	for f, doc := range rules {
		if r, err := decodeRule(doc); err != nil {
			s.opts.Logf("limit: catalog sync: skipping rule %s in %s: %v", f, s.keys()[0], err)
		} else {
			st.rules[ruleKey{r.Tenant, r.Resource}] = r
		}
	}
	for f, doc := range tenants {
		if t, err := decodeTenant(doc); err != nil {
			s.opts.Logf("limit: catalog sync: skipping tenant %s in %s: %v", f, s.keys()[1], err)
		} else {
			st.tenants[t.ID] = t
		}
	}
	for f, doc := range policies {
		if p, err := decodePolicy(doc, s.pol.def); err != nil {
			s.opts.Logf("limit: catalog sync: skipping policy %s in %s: %v", f, s.keys()[6], err)
		} else {
			st.policies[p.Name] = p
		}
	}
}

// decodeRule reads a stored rule. Rules stored by earlier versions spell
// the window as integer milliseconds (window_ms); they are read too.
func decodeRule(doc string) (Rule, error) {
	var r Rule
	var old struct {
		WindowMS int64 `json:"window_ms"`
	}
	if err := json.Unmarshal([]byte(doc), &r); err != nil {
		return Rule{}, err
	}
	if r.Window == 0 && json.Unmarshal([]byte(doc), &old) == nil && old.WindowMS > 0 {
		r.Window = confutil.Duration(time.Duration(old.WindowMS) * time.Millisecond)
	}
	return r, r.Validate("")
}

func decodeTenant(doc string) (Tenant, error) {
	var t Tenant
	if err := json.Unmarshal([]byte(doc), &t); err != nil {
		return Tenant{}, err
	}
	return t, t.Validate("")
}

// restoreLocked writes this pod's API entries back when Redis holds a
// generation older than s.seen (found: what the caller read). It reports
// whether this pod's snapshot was written; false means Redis already held one
// at least as new.
func (s *Sync) restoreLocked(ctx context.Context, found int64) (bool, error) {
	if s.epoch == "" {
		s.epoch = newEpoch()
	}
	args := make([]string, 0, 5+2*(len(s.rules)+len(s.tenants)+len(s.pol.api)))
	args = append(args, fmt.Sprint(s.seen), s.channel(), fmt.Sprint(len(s.rules)), s.epoch, fmt.Sprint(len(s.tenants)))
	for _, r := range s.rules {
		args = append(args, ruleField(r.Tenant, r.Resource), ruleJSON(r))
	}
	for _, t := range s.tenants {
		args = append(args, t.ID, tenantJSON(t))
	}
	for _, p := range s.pol.api {
		args = append(args, p.Name, policyJSON(p))
	}
	res, err := catalogRestore.Exec(ctx, s.client, s.keys(), args).AsIntSlice()
	if err != nil || len(res) != 2 {
		return false, fmt.Errorf("restoring the catalog in redis: %v %w", res, err)
	}
	if res[0] != 1 {
		return false, nil
	}
	syncRestores.Inc()
	slog.Warn("redis held an older catalog (rules, tenants, policies) than this pod (it lost its data or came back from an old snapshot): wrote this pod's catalog back",
		"generation_found", found, "generation_restored", s.seen, "rules", len(s.rules), "tenants", len(s.tenants), "policies", len(s.pol.api),
		"keys", s.opts.KeyPrefix+":{catalog}:*")
	return true, nil
}

// merged is the config entries overlaid with the API entries.
func (s *Sync) merged(rules map[ruleKey]Rule, tenants map[string]Tenant) ([]Tenant, []Rule) {
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
		if _, over := rules[ruleKey{r.Tenant, r.Resource}]; !over {
			rs = append(rs, r)
		}
	}
	for _, r := range rules {
		rs = append(rs, r)
	}
	return ts, rs
}

// applyLocked replaces the catalog's contents (s.mu held), all or nothing:
// the policies are compiled before anything is replaced.
func (s *Sync) applyLocked() error {
	entries, ps, err := s.pol.compile(s.pol.api)
	if err != nil {
		return err
	}
	ts, rs := s.merged(s.rules, s.tenants)
	if err := s.cat.Replace(ts, rs); err != nil {
		ps.Release() // compiled, never applied
		return err
	}
	s.installPolicies(entries, ps)
	return nil
}

// errStale is catalog_write.lua's answer when Redis is older than this pod.
var errStale = errors.New("redis holds an older catalog")

// write stores (doc != "") or deletes one entry in Redis, then changes the
// local copy with apply and the catalog with the entry's new state (s.mu
// held). When Redis lost the catalog it restores this pod's first; when other
// writes came in between since this pod's last read, it reads their changes
// (which hold this write) instead.
func (s *Sync) write(ctx context.Context, kind, field, doc, name string, apply func()) error {
	if s.awaiting {
		return store.ErrNotConnected
	}
	if s.client == nil {
		apply() // in-process only
		return s.applyEntry(name)
	}
	candidate := s.epoch
	if candidate == "" {
		candidate = newEpoch()
	}
	for attempt := 0; attempt < 2; attempt++ {
		arr, err := catalogWrite.Exec(ctx, s.client, s.keys(), []string{fmt.Sprint(s.seen), kind, field, doc,
			s.channel(), name, candidate, fmt.Sprint(maxChangeLog)}).ToArray()
		var gen int64
		var epoch string
		if err == nil && len(arr) == 2 {
			gen, err = arr[0].AsInt64()
			if err == nil {
				epoch, err = arr[1].ToString()
			}
		}
		if err != nil {
			return fmt.Errorf("limit: cannot store %s in redis: %w", name, err)
		}
		if gen < 0 {
			if _, err := s.restoreLocked(ctx, -1); err != nil {
				return fmt.Errorf("limit: cannot store %s in redis: %w", name, err)
			}
			candidate = s.epoch
			continue
		}
		syncWrites.Inc()
		if gen == s.seen+1 && epoch == candidate {
			apply()
			if err := s.applyEntry(name); err != nil {
				return err
			}
			s.seen, s.epoch = gen, epoch
			return nil
		}
		if err := s.updateLocked(ctx); err != nil {
			apply() // stored; the next update brings the rest
			return s.applyEntry(name)
		}
		return nil
	}
	return fmt.Errorf("limit: cannot store %s in redis: %w", name, errStale)
}

// applyEntry applies the current state of the entry name to the catalog
// (s.mu held).
func (s *Sync) applyEntry(name string) error {
	if _, ok := isPolicy(name); ok {
		return s.applyPolicies()
	}
	return s.cat.Apply([]Change{s.effective(name)})
}

// effective is the catalog's change for the entry name ("rule:..." or
// "tenant:..."): its API version, else its config version, else a delete
// (s.mu held).
func (s *Sync) effective(name string) Change {
	if id, ok := strings.CutPrefix(name, "tenant:"); ok {
		if t, ok := s.tenants[id]; ok {
			return TenantPut(t)
		}
		if t, ok := s.baseTenant[id]; ok {
			return TenantPut(t)
		}
		return TenantDelete(id)
	}
	n := ruleNameOf(name)
	if r, ok := s.rules[n]; ok {
		return RulePut(r)
	}
	if r, ok := s.baseRule[n]; ok {
		return RulePut(r)
	}
	return RuleDelete(n.tenant, n.resource)
}

// newEpoch names a new catalog history.
func newEpoch() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RuleDefaults returns r as PutRule stores it: an unset algorithm and
// window filled in from the limits section's (the defaults SetPolicyBase
// was last given).
func (s *Sync) RuleDefaults(r Rule) Rule {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.SetDefaults(s.pol.def)
	return r
}

// PutRule creates or replaces an API rule on every pod. An unset
// algorithm and window are the limits section's, as in the file (see
// RuleDefaults), and are stored with the rule, so that it means the same
// on every pod whatever its limits section says. Errors: *ValidationError
// for a bad rule, ErrUnknownTenant for a tenant that does not exist, any
// other for Redis.
func (s *Sync) PutRule(ctx context.Context, r Rule) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.SetDefaults(s.pol.def)
	if err := errors.Join(r.Validate(""), checkSyncID("tenant", r.Tenant)); err != nil {
		return err
	}
	if err := s.cat.CheckRuleTenant(r.Tenant); err != nil {
		return err
	}
	return s.write(ctx, "rule", ruleField(r.Tenant, r.Resource), ruleJSON(r), ruleEntry(r.Tenant, r.Resource), func() {
		s.rules[ruleKey{r.Tenant, r.Resource}] = r
	})
}

// DeleteRule removes an API rule on every pod; the config rule of the same
// name, if any, applies again. ErrConfigEntry for a rule that only the config
// defines, ErrEntryNotFound when there is none.
func (s *Sync) DeleteRule(ctx context.Context, tenant, resource string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.rules[ruleKey{tenant, resource}]; !ok {
		if _, ok := s.baseRule[ruleKey{tenant, resource}]; ok {
			return ErrConfigEntry
		}
		return ErrEntryNotFound
	}
	return s.write(ctx, "rule", ruleField(tenant, resource), "", ruleEntry(tenant, resource), func() {
		delete(s.rules, ruleKey{tenant, resource})
	})
}

// PutTenant creates or replaces an API tenant on every pod. An API key of
// another tenant is a *ValidationError.
func (s *Sync) PutTenant(ctx context.Context, t Tenant) error {
	if err := errors.Join(t.Validate(""), checkSyncID("id", t.ID)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range t.APIKeys {
		if other, ok := s.cat.LookupAPIKey([]byte(k)); ok && other.ID != t.ID {
			return &ValidationError{Field: "api_keys", Msg: fmt.Sprintf("key %q already belongs to tenant %q", k, other.ID)}
		}
	}
	return s.write(ctx, "tenant", t.ID, tenantJSON(t), tenantEntry(t.ID), func() { s.tenants[t.ID] = t })
}

// DeleteTenant removes an API tenant on every pod (the config tenant of the
// same ID, if any, applies again).
func (s *Sync) DeleteTenant(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tenants[id]; !ok {
		if _, ok := s.baseTenant[id]; ok {
			return ErrConfigEntry
		}
		return ErrEntryNotFound
	}
	return s.write(ctx, "tenant", id, "", tenantEntry(id), func() { delete(s.tenants, id) })
}

// SetBase replaces the entries that come from config.yaml (a configuration
// reload) and applies them under the API's entries, which still override
// them. Nothing changes when the merged set does not validate.
func (s *Sync) SetBase(tenants []Tenant, rules []Rule) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	oldT, oldR := s.baseTenants, s.baseRules
	s.setBase(slices.Clone(tenants), slices.Clone(rules))
	if err := s.applyLocked(); err != nil {
		s.setBase(oldT, oldR)
		return err
	}
	return nil
}
