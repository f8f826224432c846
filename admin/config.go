package admin

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/internal/tlsconf"
)

// Config is the admin listener's configuration. Its keys live in the YAML
// section `server`, beside the proxy's (server.admin_listen,
// server.admin_token, ...), so that one section holds every listener's
// keys; errors name them so.
//
// Token rules: with a Token, every endpoint needs it as a bearer token except
// the probes /healthz and /readyz (unless ProbesRequireToken: a kubelet probe
// cannot read a Secret) and /metrics (unless MetricsRequireToken).
type Config struct {
	// Listen is the admin listener's host:port. Default "127.0.0.1:9090".
	// A non-loopback address requires Token.
	Listen string `mapstructure:"admin_listen"`
	// Token is the bearer token the admin API requires; "" means none
	// (allowed only on loopback).
	Token string `mapstructure:"admin_token"`
	// MetricsRequireToken makes /metrics ask for the token too. Default false.
	MetricsRequireToken bool `mapstructure:"metrics_require_token"`
	// ProbesRequireToken makes /healthz and /readyz ask for the token too.
	// Default false.
	ProbesRequireToken bool `mapstructure:"probes_require_token"`
	// ReadTimeout bounds reading one request (head and body). Default 5s.
	ReadTimeout time.Duration `mapstructure:"admin_read_timeout"`
	// WriteTimeout bounds writing one answer (a large /metrics included).
	// Default 30s.
	WriteTimeout time.Duration `mapstructure:"admin_write_timeout"`
	// IdleTimeout closes keep-alive connections idle this long. Default 60s.
	IdleTimeout time.Duration `mapstructure:"admin_idle_timeout"`
	// TLS terminates TLS on the admin listener (minimum TLS 1.2); the
	// certificate is reloaded when its files change. Default off.
	TLS tlsconf.Config `mapstructure:"admin_tls"`
}

// Defaults of Config.
const (
	DefaultListen       = "127.0.0.1:9090"
	DefaultReadTimeout  = 5 * time.Second
	DefaultWriteTimeout = 30 * time.Second
	DefaultIdleTimeout  = 60 * time.Second
)

// SetDefaults fills zero values with the defaults.
func (c *Config) SetDefaults() {
	confutil.SetDefault(&c.Listen, DefaultListen)
	confutil.SetDefault(&c.ReadTimeout, DefaultReadTimeout)
	confutil.SetDefault(&c.WriteTimeout, DefaultWriteTimeout)
	confutil.SetDefault(&c.IdleTimeout, DefaultIdleTimeout)
}

// Validate checks every key; the error joins one line per bad key.
func (c *Config) Validate() error {
	var errs []error
	if _, port, err := net.SplitHostPort(c.Listen); err != nil || port == "" {
		errs = append(errs, fmt.Errorf("server.admin_listen: %q is not host:port", c.Listen))
	} else if c.Token == "" && !confutil.Loopback(c.Listen) {
		errs = append(errs, fmt.Errorf("server.admin_token: required when server.admin_listen %q is not loopback; "+
			"bind it to 127.0.0.1 or set a token", c.Listen))
	}
	errs = append(errs,
		confutil.Positive("server.admin_read_timeout", c.ReadTimeout),
		confutil.Positive("server.admin_write_timeout", c.WriteTimeout),
		confutil.Positive("server.admin_idle_timeout", c.IdleTimeout),
		c.TLS.Validate("server.admin_tls"))
	return errors.Join(errs...)
}
