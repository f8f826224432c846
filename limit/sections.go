package limit

import (
	"errors"
	"strings"
	"time"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Sections are the configuration's sections that the limit packages own:
// plans, tenants, limits, rules and policies. The gateway squashes them into
// its Config, so their YAML keys are top-level; SetDefaults and Validate
// default and check them together, since rules and policies take their
// defaults from the limits section.
type Sections struct {
	// Plans is the limit multiplier of each plan. Default FREE 1,
	// STANDARD 2, PREMIUM 3 (catalog.DefaultPlans).
	Plans catalog.Plans `mapstructure:"plans"`
	// Tenants are the file's tenants, under those the tenants API writes.
	Tenants catalog.Tenants `mapstructure:"tenants"`
	// Limits is the limiter's section.
	Limits Config `mapstructure:"limits"`
	// Rules are the file's rules, under those the rules API writes; an
	// unset algorithm and window are the limits section's.
	Rules catalog.Rules `mapstructure:"rules"`
	// Policies are the file's policies, under those the policies API writes.
	Policies catalog.Policies `mapstructure:"policies"`
}

// LiveKey reports whether a reload applies a change of key: every key of
// tenants, limits, rules and policies does (the gateway builds a new
// limiter and sets the catalog's base); plans need a restart.
func (s Sections) LiveKey(key string) bool {
	live := map[string]interface{ LiveKey(string) bool }{
		"tenants": s.Tenants, "limits": s.Limits, "rules": s.Rules, "policies": s.Policies,
	}
	for name, section := range live {
		if rest, ok := strings.CutPrefix(key, name); ok && (rest == "" || rest[0] == '.' || rest[0] == '[') {
			return section.LiveKey(strings.TrimPrefix(rest, "."))
		}
	}
	return false
}

// SetDefaults fills the zero values: plan names are upper case (the
// loader lower-cases map keys; a tenant's plan is a value, kept as
// written, so `plan: free` is refused in the file as in the API), absent
// plans are catalog.DefaultPlans, and a rule's algorithm and window are
// the limits section's.
func (s *Sections) SetDefaults() {
	if s.Plans == nil {
		s.Plans = catalog.DefaultPlans()
	} else {
		plans := make(catalog.Plans, len(s.Plans))
		for name, m := range s.Plans {
			plans[strings.ToUpper(name)] = m
		}
		s.Plans = plans
	}
	s.Limits.SetDefaults()
	def := s.Limits.CatalogDefaults()
	for i := range s.Rules {
		s.Rules[i].SetDefaults(def)
	}
}

// Validate checks the sections, each line naming its YAML key: the plans,
// the limits, the tenants and rules as the catalog built of them will
// (every rule's tenant defined), and the policies. Every mistake is
// reported at once: when limits.algorithm or limits.window is itself
// wrong, the policies are checked with the default one in its place, so
// that the policies' own mistakes are not hidden behind it.
func (s *Sections) Validate() error {
	def := s.Limits.CatalogDefaults()
	var fallback Config
	fallback.SetDefaults()
	if _, err := store.ParseAlgorithm(def.Algorithm.String()); err != nil {
		def.Algorithm = fallback.Algorithm
	}
	if def.Window < time.Millisecond || def.Window > store.MaxWindow {
		def.Window = fallback.Window
	}
	return errors.Join(s.Plans.Validate(), s.Limits.Validate(), catalog.Check(s.Tenants, s.Rules),
		catalog.CheckPolicies(s.Policies, def))
}
