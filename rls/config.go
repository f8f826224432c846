package rls

import (
	"errors"
	"fmt"
	"net"
	"sort"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/internal/tlsconf"
)

// Config is the YAML section `grpc`.
type Config struct {
	// Listen is the gRPC listener's host:port. "": off (the default).
	// An address other than loopback requires Token.
	Listen string `mapstructure:"listen"`
	// Token is the bearer token callers send in the `authorization`
	// metadata ("Bearer <token>"); "" means none (allowed only on
	// loopback). The health service needs no token.
	Token string `mapstructure:"token"`
	// TLS terminates TLS on the listener (ALPN h2). Default off.
	TLS tlsconf.Config `mapstructure:"tls"`
	// Domains, when set, lists the domains served, each with its entry
	// keys; a request for another domain is OK with no limit. Empty: every
	// domain is served with the default entry keys.
	Domains map[string]Domain `mapstructure:"domains"`
	// ConfigFiles are envoyproxy/ratelimit configuration files, one domain
	// each, read unchanged: their domains are answered by their
	// descriptors' rules, as envoyproxy/ratelimit answers them, instead of
	// by the entry keys above. A reload re-reads them; a set with any
	// invalid file is refused whole. Default none.
	ConfigFiles []string `mapstructure:"config_files"`
	// DescriptorOverride lets a descriptor of a ConfigFiles domain carry its
	// own limit (Envoy's per-descriptor `limit`), which then replaces the
	// files' rule for it, as envoyproxy/ratelimit always allows. Default
	// true; false: the files decide, whatever the caller asks (the one
	// answer an operator may choose to make differ from envoyproxy/ratelimit).
	DescriptorOverride *bool `mapstructure:"descriptor_override"`
}

// LiveKey reports whether a changed key of the section (after "grpc.")
// applies on a reload: the configuration files (read again) and whether
// their descriptors may override a limit; the listener and the domains'
// entry keys are set up once at start.
func (Config) LiveKey(key string) bool {
	return key == "config_files" || key == "descriptor_override"
}

// Domain names the descriptor entry keys of one domain. An empty name
// keeps the default.
type Domain struct {
	// Tenant is the entry key whose value is the tenant ID. Default "tenant".
	Tenant string `mapstructure:"tenant"`
	// Resource is the entry key whose value is the resource (rules are per
	// tenant and resource). Default "resource".
	Resource string `mapstructure:"resource"`
	// Key is the entry key whose value is the API key (limits.api_key).
	// Default "key".
	Key string `mapstructure:"key"`
	// RemoteAddress is the entry key whose value is the client IP
	// (limits.ip). Default "remote_address", what Envoy's remote_address
	// action sends.
	RemoteAddress string `mapstructure:"remote_address"`
}

// Default entry keys.
const (
	DefaultTenantKey        = "tenant"
	DefaultResourceKey      = "resource"
	DefaultAPIKeyKey        = "key"
	DefaultRemoteAddressKey = "remote_address"
)

// Overrides reports whether a descriptor's own limit replaces its rule in
// the domains of ConfigFiles (DescriptorOverride; unset: true).
func (c *Config) Overrides() bool { return c.DescriptorOverride == nil || *c.DescriptorOverride }

// Enabled reports whether the gRPC listener is on.
func (c *Config) Enabled() bool { return c.Listen != "" }

// SetDefaults fills the entry keys each domain leaves empty and turns
// DescriptorOverride on when it is not set.
func (c *Config) SetDefaults() {
	if c.DescriptorOverride == nil {
		on := true
		c.DescriptorOverride = &on
	}
	for name, d := range c.Domains {
		d.setDefaults()
		c.Domains[name] = d
	}
}

func (d *Domain) setDefaults() {
	for _, f := range []struct {
		p   *string
		def string
	}{{&d.Tenant, DefaultTenantKey}, {&d.Resource, DefaultResourceKey}, {&d.Key, DefaultAPIKeyKey}, {&d.RemoteAddress, DefaultRemoteAddressKey}} {
		if *f.p == "" {
			*f.p = f.def
		}
	}
}

// Validate checks every key; the error joins one line per bad key.
func (c *Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	var errs []error
	if _, port, err := net.SplitHostPort(c.Listen); err != nil || port == "" {
		errs = append(errs, fmt.Errorf("grpc.listen: %q is not host:port", c.Listen))
	} else if c.Token == "" && !confutil.Loopback(c.Listen) {
		errs = append(errs, fmt.Errorf("grpc.token: required when grpc.listen %q is not loopback; bind it to 127.0.0.1 or set a token", c.Listen))
	}
	errs = append(errs, c.TLS.Validate("grpc.tls"))
	for i, path := range c.ConfigFiles {
		if path == "" {
			errs = append(errs, fmt.Errorf("grpc.config_files[%d]: empty path", i))
		}
	}
	names := make([]string, 0, len(c.Domains))
	for name := range c.Domains {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		errs = append(errs, c.Domains[name].validate("grpc.domains."+name))
	}
	return errors.Join(errs...)
}

// validate refuses two roles on one entry key.
func (d Domain) validate(prefix string) error {
	seen := map[string]string{}
	for _, f := range []struct{ role, key string }{{"tenant", d.Tenant}, {"resource", d.Resource}, {"key", d.Key}, {"remote_address", d.RemoteAddress}} {
		if f.key == "" {
			continue
		}
		if other, dup := seen[f.key]; dup {
			return fmt.Errorf("%s.%s: entry key %q is already %s.%s", prefix, f.role, f.key, prefix, other)
		}
		seen[f.key] = f.role
	}
	return nil
}
