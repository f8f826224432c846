package proxy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func validConfig() Config {
	c := Config{Routes: []Route{{PathPrefix: "/", Upstream: "api"}}}
	c.SetDefaults()
	return c
}

func TestConfigDefaults(t *testing.T) {
	c := validConfig()
	assert.Equal(t, ":8080", c.Server.Listen)
	assert.Equal(t, 5*time.Second, c.Server.ReadTimeout)
	assert.Equal(t, 30*time.Second, c.Server.WriteTimeout)
	assert.Equal(t, 60*time.Second, c.Server.IdleTimeout)
	assert.EqualValues(t, 10<<20, c.Server.MaxRequestBody)
	assert.Equal(t, 15*time.Second, c.Server.ShutdownGrace)
	assert.Equal(t, 256*1024, c.Server.Concurrency)
	assert.Equal(t, "X-API-Key", c.Identity.APIKeyHeader)
	assert.Equal(t, "X-Request-Id", c.Identity.RequestIDHeader)
	assert.Equal(t, "default", c.Routes[0].Resource)
	require.NoError(t, c.Validate([]string{"api"}))
}

func TestConfigValidateMessages(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"trusted proxy", func(c *Config) { c.Server.TrustedProxies = []string{"10.0.0/8"} },
			`server.trusted_proxies[0]: "10.0.0/8" is not a CIDR or IP`},
		{"route upstream", func(c *Config) {
			c.Routes = append(c.Routes, Route{PathPrefix: "/a", Upstream: "api"}, Route{PathPrefix: "/b", Upstream: "apii"})
		}, `routes[2].upstream: "apii" is not a configured upstream (api)`},
		{"listen", func(c *Config) { c.Server.Listen = "x" }, `server.listen: "x" is not host:port`},
		{"path prefix", func(c *Config) { c.Routes[0].PathPrefix = "api" }, `routes[0].path_prefix: must start with "/"`},
		{"read timeout", func(c *Config) { c.Server.ReadTimeout = -1 }, `server.read_timeout: -1ns is not a positive duration`},
		{"body", func(c *Config) { c.Server.MaxRequestBody = -5 }, `server.max_request_body: -5 is not a size`},
		{"concurrency", func(c *Config) { c.Server.Concurrency = -1 }, `server.concurrency: -1`},
		{"api key header", func(c *Config) { c.Identity.APIKeyHeader = "X Key" }, `identity.api_key_header: "X Key" is not a header name`},
		{"cache ttl", func(c *Config) { c.Routes[0].CacheTTL = -time.Second }, `routes[0].cache_ttl: -1s is negative`},
		{"duplicate", func(c *Config) { c.Routes = append(c.Routes, Route{PathPrefix: "/", Upstream: "api"}) }, `routes[1]: path_prefix "/" and host "" repeat routes[0]`},
		{"no routes", func(c *Config) { c.Routes = nil }, `routes: at least one route is required`},
		{"underscores", func(c *Config) { c.Server.HeadersWithUnderscores = "ignore" },
			`server.headers_with_underscores: "ignore" is not drop, reject or allow`},
		{"rate-limit headers", func(c *Config) { c.Server.RateLimitHeaders = "x-only" },
			`server.rate_limit_headers: "x-only" is not all, draft, legacy or none`},
		{"underscore key", func(c *Config) { c.Identity.APIKeyHeader = "X_Key" },
			`identity.api_key_header: "X_Key" has an underscore, which server.headers_with_underscores "drop" would drop`},
		{"log rate", func(c *Config) { c.Server.ParseErrorLogRate = -1 }, `server.parse_error_log_rate: -1`},
		{"trust request id", func(c *Config) { c.Identity.TrustRequestID = "clients" },
			`identity.trust_request_id: "clients" is not none, check or proxies`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.modify(&c)
			err := c.Validate([]string{"api"})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestConfigTrustedProxiesAcceptsIPsAndCIDRs(t *testing.T) {
	c := validConfig()
	c.Server.TrustedProxies = []string{"10.0.0.0/8", "192.168.1.7", "::1", "fd00::/8"}
	assert.NoError(t, c.Validate([]string{"api"}))
}
