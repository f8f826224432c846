package main

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"github.com/sentinel-gateway/sentinel/adaptive"
	"github.com/sentinel-gateway/sentinel/admin"
	"github.com/sentinel-gateway/sentinel/cache"
	"github.com/sentinel-gateway/sentinel/internal/logx"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/policy"
	"github.com/sentinel-gateway/sentinel/limit/store"
	"github.com/sentinel-gateway/sentinel/proxy"
	"github.com/sentinel-gateway/sentinel/rls"
	"github.com/sentinel-gateway/sentinel/upstream"
)

// envPrefix is the prefix of the environment variables that override config keys:
// SENTINEL_SERVER_LISTEN overrides server.listen.
const envPrefix = "SENTINEL"

// Config is the whole configuration file. Each section is owned, defaulted and
// validated by the package that uses it; this type only holds them, and main
// passes each one down as it is.
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
	Policies  policy.Section    `mapstructure:"policies"`
	Adaptive  adaptive.Config   `mapstructure:"adaptive"`
	GRPC      rls.Config        `mapstructure:"grpc"`
	Log       logx.Config       `mapstructure:"log"`
}

// loadConfig reads the YAML file at path (empty: defaults only), applies the
// SENTINEL_ environment overrides, fills defaults and validates every section.
// Its errors name the offending key.
func loadConfig(path string, environ []string) (*Config, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	if path != "" {
		v.SetConfigFile(path)
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("cannot read config %q: %w", path, err)
		}
	}
	fromEnv, err := applyEnv(v, environ)
	if err != nil {
		return nil, err
	}
	var cfg Config
	var md mapstructure.Metadata
	err = v.Unmarshal(&cfg, viper.DecodeHook(decodeHooks), func(dc *mapstructure.DecoderConfig) {
		dc.Metadata = &md
	})
	var lines []string
	bad := map[string]bool{}
	if err != nil {
		lines, bad = decodeMessages(err, fromEnv)
		namePolicies(lines, v)
		md = unusedDespiteErrors(v)
	}
	lines = append(lines, unknownKeys(&md, bad)...)
	if len(lines) > 0 {
		return nil, errors.New(strings.Join(lines, "\n"))
	}
	cfg.normalize()
	if err := cfg.setDefaultsAndValidate(); err != nil {
		return nil, fromEnvError(err, fromEnv)
	}
	return &cfg, nil
}

// envError is a validation error whose lines name the SENTINEL_ variable
// that set their key; Unwrap gives the validation error.
type envError struct {
	err  error
	text string
}

func (e *envError) Error() string { return e.text }
func (e *envError) Unwrap() error { return e.err }

// fromEnvError adds "(from SENTINEL_...)" to each line of err whose key (or
// an entry of it, such as redis.addrs[0]) came from the environment, as the
// decode errors do: a value that is not in the file is otherwise hard to find.
func fromEnvError(err error, fromEnv map[string]string) error {
	if len(fromEnv) == 0 {
		return err
	}
	lines := strings.Split(err.Error(), "\n")
	changed := false
	for i, line := range lines {
		key, _, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		for k, name := range fromEnv {
			if key == k || strings.HasPrefix(key, k+"[") || strings.HasPrefix(key, k+".") {
				lines[i] += " (from " + name + ")"
				changed = true
				break
			}
		}
	}
	if !changed {
		return err
	}
	return &envError{err: err, text: strings.Join(lines, "\n")}
}

// applyEnv sets every SENTINEL_* variable that names a known key. Viper's
// AutomaticEnv only consults the environment for keys it already knows, and a
// key absent from the file is unknown to it, so the keys are derived from the
// Config struct instead. Keys inside maps (upstreams.NAME.x) are reachable only
// when NAME is in the file, and then every key of its struct is. It returns
// the variable that set each key.
func applyEnv(v *viper.Viper, environ []string) (map[string]string, error) {
	env := make(map[string]string)
	for _, kv := range environ {
		k, val, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, envPrefix+"_") {
			env[k] = val
		}
	}
	if len(env) == 0 {
		return nil, nil
	}
	keys := leafKeys(reflect.TypeOf(Config{}), "")
	keys = append(keys, mapEntryKeys(v, reflect.TypeOf(Config{}))...)
	keys = append(keys, v.AllKeys()...)
	seen := make(map[string]bool, len(keys))
	fromEnv := make(map[string]string)
	for _, key := range keys {
		name := envPrefix + "_" + strings.ToUpper(strings.NewReplacer(".", "_").Replace(key))
		if val, ok := env[name]; ok && !seen[name] {
			seen[name] = true
			fromEnv[key] = name
			v.Set(key, val)
		}
	}
	var unknown []string
	for name := range env {
		if !seen[name] && name != envPrefix+"_CONFIG" {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("environment: %s names no config key", strings.Join(unknown, ", "))
	}
	return fromEnv, nil
}

// mapEntryKeys lists the keys of the entries that the file names in t's
// maps of structs: upstreams.api.x for every field x of a pool when the file
// has upstreams.api.
func mapEntryKeys(v *viper.Viper, t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, squash, ok := fieldKey(f)
		if !ok || squash || f.Type.Kind() != reflect.Map || f.Type.Elem().Kind() != reflect.Struct {
			continue
		}
		for name := range v.GetStringMap(tag) {
			keys = append(keys, leafKeys(f.Type.Elem(), tag+"."+name)...)
		}
	}
	return keys
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

// unknownKeys names the keys that no section reads, with the known key
// closest to each when one is within two edits. Two sections share the key
// server (Proxy and Admin), so a key is unknown only when it is left unused
// by both, not when one of them does not read it; a key whose value did not
// decode (bad) is not unknown.
func unknownKeys(md *mapstructure.Metadata, bad map[string]bool) []string {
	used := make(map[string]bool, len(md.Keys))
	for _, k := range md.Keys {
		used[yamlKey(k)] = true
	}
	var known []string
	var lines []string
	for _, k := range slices.Sorted(slices.Values(md.Unused)) {
		k = yamlKey(k)
		if used[k] || bad[k] {
			continue
		}
		used[k] = true // listed once
		if known == nil {
			known = knownKeys(reflect.TypeFor[Config]())
		}
		line := k + ": unknown key"
		if s := suggest(k, known); s != "" {
			line += "; did you mean " + s + "?"
		}
		lines = append(lines, line)
	}
	return lines
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
	return policy.Check(c.Policies, c.Limits.PolicyDefaults())
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
