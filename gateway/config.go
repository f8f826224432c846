package gateway

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/sentinel-gateway/sentinel/adaptive"
	"github.com/sentinel-gateway/sentinel/admin"
	"github.com/sentinel-gateway/sentinel/cache"
	"github.com/sentinel-gateway/sentinel/internal/config"
	"github.com/sentinel-gateway/sentinel/internal/logx"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
	"github.com/sentinel-gateway/sentinel/proxy"
	"github.com/sentinel-gateway/sentinel/rls"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// envPrefix is the prefix of the environment variables that override config keys:
// SENTINEL_SERVER_LISTEN overrides server.listen.
const envPrefix = "SENTINEL"

// Config is the whole configuration file. Each section is owned, defaulted and
// validated by the package that uses it; this type only holds them, and the
// gateway passes each one down as it is.
type Config struct {
	// Proxy is the sections server (the proxy listener's keys), identity
	// and routes.
	Proxy proxy.Config `mapstructure:",squash"`
	// Admin is the admin listener's keys, which live in the section server
	// beside the proxy's (admin_listen, admin_token, metrics_require_token,
	// admin_read_timeout, ...), so that one section holds every listener's keys.
	Admin     admin.Config      `mapstructure:"server"`
	Upstreams upstream.Config   `mapstructure:"upstreams"`
	Cache     cache.Config      `mapstructure:"cache"`
	Redis     store.RedisConfig `mapstructure:"redis"`
	Plans     catalog.Plans     `mapstructure:"plans"`
	Tenants   catalog.Tenants   `mapstructure:"tenants"`
	Limits    limit.Config      `mapstructure:"limits"`
	Rules     catalog.Rules     `mapstructure:"rules"`
	Policies  catalog.Policies  `mapstructure:"policies"`
	Adaptive  adaptive.Config   `mapstructure:"adaptive"`
	GRPC      rls.Config        `mapstructure:"grpc"`
	Log       logx.Config       `mapstructure:"log"`
}

// LoadConfig reads the YAML file at path (empty: defaults only), applies the
// SENTINEL_ environment overrides in environ, fills defaults and validates
// every section, each in the package that owns it. Its errors name the
// offending key, every one of the file's at once.
func LoadConfig(path string, environ []string) (*Config, error) {
	return config.Load(path, environ, config.Options[Config]{
		EnvPrefix: envPrefix,
		Annotate:  namePolicies,
		Finish: func(c *Config) error {
			c.normalize()
			return c.setDefaultsAndValidate()
		},
	})
}

// namePolicies puts the policy's name in each line about a key inside a
// policy (policies[0].limits[1].period: policy "bids": ...), as
// policy.Validate does for the keys it checks: a file's policies are found by
// name more easily than by index, whether the decoder or Validate refuses
// the value.
func namePolicies(lines []string, raw map[string]any) {
	policies, _ := raw["policies"].([]any)
	for i, line := range lines {
		var n int
		key, msg, ok := strings.Cut(line, ": ")
		if _, err := fmt.Sscanf(key, "policies[%d].", &n); !ok || err != nil || n < 0 || n >= len(policies) {
			continue
		}
		entry, _ := policies[n].(map[string]any)
		if name, _ := entry["name"].(string); name != "" {
			lines[i] = fmt.Sprintf("%s: policy %q: %s", key, name, msg)
		}
	}
}

// normalize undoes viper's lower-casing of map keys where case matters: plan
// names are upper case (FREE, STANDARD, PREMIUM). A tenant's plan is a value,
// which viper keeps as written: it is checked as the tenants API checks it,
// so `plan: free` is refused in the file as it is in a PUT.
func (c *Config) normalize() {
	if c.Plans != nil {
		plans := make(catalog.Plans, len(c.Plans))
		for name, m := range c.Plans {
			plans[strings.ToUpper(name)] = m
		}
		c.Plans = plans
	}
}

func (c *Config) setDefaultsAndValidate() error {
	if c.Plans == nil {
		c.Plans = catalog.DefaultPlans()
	}
	c.Proxy.SetDefaults()
	c.Admin.SetDefaults()
	c.Upstreams.SetDefaults()
	c.Cache.SetDefaults()
	c.Redis.SetDefaults()
	c.Limits.SetDefaults()
	for i := range c.Rules {
		c.Rules[i].SetDefaults(c.Limits.Algorithm, c.Limits.Window)
	}
	c.Adaptive.SetDefaults()
	c.GRPC.SetDefaults()
	c.Log.SetDefaults()

	names := make([]string, 0, len(c.Upstreams))
	for name := range c.Upstreams {
		names = append(names, name)
	}
	sort.Strings(names)
	limitsErr := c.Limits.Validate()
	return errors.Join(
		c.Proxy.Validate(names),
		c.Admin.Validate(),
		c.Upstreams.Validate(),
		c.Cache.Validate(),
		c.Redis.Validate(),
		c.Plans.Validate(),
		limitsErr,
		c.validateCatalog(),
		c.validatePolicies(limitsErr == nil),
		c.Adaptive.Validate(),
		c.GRPC.Validate(),
		c.Log.Validate(),
	)
}

// validatePolicies checks the policies, when the limits section they take
// their defaults from is valid (limitsOK).
func (c *Config) validatePolicies(limitsOK bool) error {
	if !limitsOK {
		return nil
	}
	return catalog.CheckPolicies(c.Policies, c.Limits.PolicyDefaults())
}

// validateCatalog checks tenants and rules as the catalog that build makes
// of them will (catalog.Check: building one here would leave a second
// catalog's metric labels behind), and that every rule names a tenant of
// the file (or catalog.AnonymousTenant):
// the rules API refuses a rule for a tenant it does not know (404), since it
// could never apply, and a file that means the same must fail -check. A
// tenant created through the API gets its rules through the API.
func (c *Config) validateCatalog() error {
	err := catalog.Check(c.Tenants, c.Rules)
	tenants := make(map[string]bool, len(c.Tenants))
	for _, t := range c.Tenants {
		tenants[t.ID] = true
	}
	errs := []error{err}
	for i, r := range c.Rules {
		if r.Tenant != catalog.AnonymousTenant && r.Tenant != "" && !tenants[r.Tenant] {
			errs = append(errs, &catalog.ValidationError{Field: fmt.Sprintf("rules[%d].tenant", i),
				Msg: fmt.Sprintf("no tenant %q in tenants: a rule for it would never apply; add the tenant, or write the rule through the API for a tenant created there (%q: clients without an API key)",
					r.Tenant, catalog.AnonymousTenant)})
		}
	}
	return errors.Join(errs...)
}
