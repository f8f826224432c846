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
	// Sections are the limit packages' sections, squashed into the top of
	// the file: plans, tenants, limits, rules and policies.
	limit.Sections `mapstructure:",squash"`
	Adaptive       adaptive.Config `mapstructure:"adaptive"`
	GRPC           rls.Config      `mapstructure:"grpc"`
	Log            logx.Config     `mapstructure:"log"`
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
			return c.setDefaultsAndValidate()
		},
	})
}

// namePolicies puts the policy's name in each line about a key inside a
// policy (policies[0].limits[1].period: policy "bids": ...), as
// catalog.Policy.Validate does for the keys it checks: a file's policies
// are found by name more easily than by index, whether the decoder or
// Validate refuses the value.
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

func (c *Config) setDefaultsAndValidate() error {
	c.Proxy.SetDefaults()
	c.Admin.SetDefaults()
	c.Upstreams.SetDefaults()
	c.Cache.SetDefaults()
	c.Redis.SetDefaults()
	c.Sections.SetDefaults()
	c.Adaptive.SetDefaults()
	c.GRPC.SetDefaults()
	c.Log.SetDefaults()

	names := make([]string, 0, len(c.Upstreams))
	for name := range c.Upstreams {
		names = append(names, name)
	}
	sort.Strings(names)
	return errors.Join(
		c.Proxy.Validate(names),
		c.Admin.Validate(),
		c.Upstreams.Validate(),
		c.Cache.Validate(),
		c.Redis.Validate(),
		c.Sections.Validate(),
		c.Adaptive.Validate(),
		c.GRPC.Validate(),
		c.Log.Validate(),
		c.checkResourcesServed(),
	)
}

// checkResourcesServed refuses a file's rule or policy that names a
// resource no route serves and limits.check_resources does not list: it
// would never apply to a proxied request, and nothing else would say so.
func (c *Config) checkResourcesServed() error {
	served := make(map[string]bool, len(c.Proxy.Routes)+len(c.Limits.CheckResources))
	var names []string
	for _, r := range c.Proxy.Routes {
		if !served[r.Resource] {
			names = append(names, r.Resource)
		}
		served[r.Resource] = true
	}
	for _, r := range c.Limits.CheckResources {
		served[r] = true
	}
	msg := func(r string) string {
		m := fmt.Sprintf("no route serves resource %q (routes serve %s), so it would never apply to a proxied request", r, strings.Join(names, ", "))
		if s := config.Suggest(r, names); s != "" {
			m += " (did you mean " + s + "?)"
		}
		return m + "; list it in limits.check_resources if only the check API uses it"
	}
	var errs []error
	for i, r := range c.Rules {
		if !served[r.Resource] {
			errs = append(errs, fmt.Errorf("rules[%d].resource: %s", i, msg(r.Resource)))
		}
	}
	for i, p := range c.Policies {
		for j, r := range p.Match.Resources {
			if !served[r] {
				errs = append(errs, fmt.Errorf("policies[%d].match.resources[%d]: policy %q: %s", i, j, p.Name, msg(r)))
			}
		}
	}
	return errors.Join(errs...)
}
