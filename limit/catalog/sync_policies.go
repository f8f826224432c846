package catalog

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Origins of a policy, as the API lists them.
const (
	OriginFile = "file" // the configuration file's `policies`
	OriginAPI  = "api"  // written through the API (over a file policy of the same name, if any)
)

// PolicyEntry is a policy as the API shows it: the policy and where it
// comes from.
type PolicyEntry struct {
	Policy
	Origin string `json:"origin"`
}

// policyState is what the sync knows of the policies: the file's (in file
// order), the API's (by name), the view the API lists, rebuilt with every
// change so that reads never wait for a write's Redis round trip, and the
// compiled set the limiters read.
type policyState struct {
	base   []Policy
	byName map[string]bool // names of base
	def    Defaults
	api    map[string]Policy // guarded by Sync.mu
	view   atomic.Pointer[[]PolicyEntry]
	live   *LivePolicies // what the limiters decide with
}

// merged is the file's policies, each replaced by the API's policy of the
// same name, then the API's other policies by name, with their origins.
func (p *policyState) merged(api map[string]Policy) []PolicyEntry {
	out := make([]PolicyEntry, 0, len(p.base)+len(api))
	for _, b := range p.base {
		if a, over := api[b.Name]; over {
			out = append(out, PolicyEntry{a, OriginAPI})
		} else {
			out = append(out, PolicyEntry{b, OriginFile})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(api)) {
		if !p.byName[name] {
			out = append(out, PolicyEntry{api[name], OriginAPI})
		}
	}
	return out
}

// compile compiles the policies the API entries api make (nothing is
// applied: see install).
func (p *policyState) compile(api map[string]Policy) ([]PolicyEntry, *PolicySet, error) {
	entries := p.merged(api)
	list := make([]Policy, len(entries))
	for i := range entries {
		list[i] = entries[i].Policy
	}
	ps, err := CompilePolicies(list, p.def)
	return entries, ps, err
}

// applyPolicies compiles the policies of s.pol.api and makes them the
// catalog's (s.mu held).
func (s *Sync) applyPolicies() error {
	entries, ps, err := s.pol.compile(s.pol.api)
	if err != nil {
		return err
	}
	s.installPolicies(entries, ps)
	return nil
}

// installPolicies makes compiled policies the limiters' and entries the
// API's view of them (s.mu held).
func (s *Sync) installPolicies(entries []PolicyEntry, ps *PolicySet) {
	s.pol.live.Store(ps)
	s.pol.view.Store(&entries)
}

// PolicySet returns the policies that apply, the file's and the API's, as
// a live set: limiters built with it decide with every change from the
// next request on.
func (s *Sync) PolicySet() *PolicySet { return s.pol.live.Set() }

// SetPolicyBase replaces the policies of the configuration file (at start
// and on a reload) and the defaults they and the API's take their
// algorithm, window and time zone from; the API's policies still override
// the file's of the same name. The file's policies were checked with
// their section; compiling them under the API's checks the list they make
// together, which no single check has seen. Errors name the policy's key
// in that list (policies[1].limits[0].period: the file's come first, in
// file order); nothing changes then.
func (s *Sync) SetPolicyBase(policies []Policy, def Defaults) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, oldNames, oldDef := s.pol.base, s.pol.byName, s.pol.def
	s.pol.base, s.pol.def = slices.Clone(policies), def
	s.pol.byName = make(map[string]bool, len(policies))
	for _, p := range policies {
		s.pol.byName[p.Name] = true
	}
	if err := s.applyPolicies(); err != nil {
		s.pol.base, s.pol.byName, s.pol.def = old, oldNames, oldDef
		return err
	}
	return nil
}

// Policies lists the policies that apply, file and API, each with its
// origin: the file's in file order (an API policy in place of the file's of
// its name), then the API's others by name. It does not wait for writes.
func (s *Sync) Policies() []PolicyEntry {
	if v := s.pol.view.Load(); v != nil {
		return slices.Clone(*v)
	}
	return []PolicyEntry{}
}

// Policy returns the policy name as it applies, with its origin.
func (s *Sync) Policy(name string) (PolicyEntry, bool) {
	if v := s.pol.view.Load(); v != nil {
		for _, e := range *v {
			if e.Name == name {
				return e, true
			}
		}
	}
	return PolicyEntry{}, false
}

// PutPolicy creates or replaces an API policy on every pod; created
// reports that no API policy had its name (a file policy it overrides
// aside). A bad policy is a *ValidationError naming the JSON field
// (limits[1].period), as the file's checks name its keys: both run
// Policy.Validate. The stored policy has the limits' algorithm and
// window filled in from the defaults, so that it means the same on every
// pod whatever its limits section says.
func (s *Sync) PutPolicy(ctx context.Context, p Policy) (created bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := p.Validate("", s.pol.def); err != nil {
		return false, err
	}
	p = pinDefaults(p, s.pol.def)
	_, existed := s.pol.api[p.Name]
	err = s.write(ctx, "policy", p.Name, policyJSON(p), policyEntry(p.Name), func() { s.pol.api[p.Name] = p })
	return err == nil && !existed, err
}

// DeletePolicy removes an API policy on every pod; the file's policy of the
// same name, if any, applies again. ErrConfigEntry for a policy that only
// the file defines, ErrEntryNotFound when there is none.
func (s *Sync) DeletePolicy(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pol.api[name]; !ok {
		if s.pol.byName[name] {
			return ErrConfigEntry
		}
		return ErrEntryNotFound
	}
	return s.write(ctx, "policy", name, "", policyEntry(name), func() { delete(s.pol.api, name) })
}

// pinDefaults fills in each window limit's algorithm and window from def,
// as compiling it would (a quota's and a concurrency limit's have none).
func pinDefaults(p Policy, def Defaults) Policy {
	p.Limits = slices.Clone(p.Limits)
	for i := range p.Limits {
		l := &p.Limits[i]
		if l.Period != store.NoPeriod || l.Concurrency != 0 {
			continue // a quota or a concurrency limit has no algorithm nor window
		}
		def.fill(&l.Algorithm, &l.Window)
	}
	return p
}

func policyJSON(p Policy) string {
	b, _ := json.Marshal(p) // plain fields: never fails
	return string(b)
}

// decodePolicy reads a stored policy, valid under def.
func decodePolicy(doc string, def Defaults) (Policy, error) {
	var p Policy
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		return Policy{}, err
	}
	return p, p.Validate("", def)
}

// isPolicy reports whether an entry name is a policy's, and its name.
func isPolicy(entry string) (string, bool) { return strings.CutPrefix(entry, "policy:") }
