package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/internal/tlsconf"
	"github.com/sentinel-gateway/sentinel/reply"
)

// Config is the proxy's part of the configuration file: the server, identity
// and routes sections.
type Config struct {
	Server   ServerConfig   `mapstructure:"server"`
	Identity IdentityConfig `mapstructure:"identity"`
	Routes   []Route        `mapstructure:"routes"`
}

// LiveKey reports whether a changed key applies on a reload; the sections
// sit at the top of the file, so key is the whole YAML key. The routes
// do (a new route table); the listener's and identity's keys are read
// once at start.
func (Config) LiveKey(key string) bool {
	return key == "routes" || strings.HasPrefix(key, "routes[") || strings.HasPrefix(key, "routes.")
}

// ServerConfig is the proxy listener's part of the YAML section `server`;
// the admin listener's keys of that section (admin_listen, admin_token, ...)
// are admin.Config.
type ServerConfig struct {
	// Listen is the proxy's host:port. Default ":8080".
	Listen string `mapstructure:"listen"`
	// TrustedProxies lists CIDRs or IPs whose X-Forwarded-For, X-Forwarded-*,
	// Forwarded and X-Request-Id are believed. Default none.
	TrustedProxies []string `mapstructure:"trusted_proxies"`
	// ReadTimeout bounds reading one request (headers and body). Default 5s.
	ReadTimeout time.Duration `mapstructure:"read_timeout"`
	// WriteTimeout bounds writing one response. Default 30s.
	WriteTimeout time.Duration `mapstructure:"write_timeout"`
	// IdleTimeout closes keep-alive connections idle this long. Default 60s.
	IdleTimeout time.Duration `mapstructure:"idle_timeout"`
	// MaxRequestBody is the largest request body accepted (413 above it).
	// Default 10MB.
	MaxRequestBody confutil.ByteSize `mapstructure:"max_request_body"`
	// RequestBuffer is how much of a request body is received from the
	// client before the request takes an upstream concurrency slot and is
	// forwarded: a body up to this size arrives whole first, so that a slow
	// or broken upload never holds a slot or reaches the backend; a larger
	// one streams after its first RequestBuffer bytes. Default 64KB.
	RequestBuffer confutil.ByteSize `mapstructure:"request_buffer"`
	// ShutdownGrace is how long shutdown waits for in-flight requests.
	// Default 15s.
	ShutdownGrace time.Duration `mapstructure:"shutdown_grace"`
	// DrainDelay is how long the listener keeps serving after SIGTERM while
	// /readyz already answers 503, so that load balancers stop sending new
	// requests before the listener closes. Default 5s; 0 closes at once.
	DrainDelay *time.Duration `mapstructure:"drain_delay"`
	// Concurrency is the maximum number of concurrent client connections.
	// Default 256*1024.
	Concurrency int `mapstructure:"concurrency"`
	// HeadersWithUnderscores is what happens to a request header whose name
	// has an underscore ("X_API_Key"), which some backends read as the
	// hyphenated name: "drop" removes it (the gateway does not read it
	// and the backend does not get it), "reject" answers 400, "allow"
	// forwards it. Default "drop".
	HeadersWithUnderscores Underscores `mapstructure:"headers_with_underscores"`
	// RateLimitHeaders is which rate-limit headers the proxy's answers
	// (forwarded, refused, upgraded) carry: "all" (default), "draft" (the
	// IETF draft's RateLimit-Policy and RateLimit), "legacy"
	// (X-RateLimit-Limit, -Remaining, -Retry-After-Ms) or "none". A refusal
	// carries Retry-After whatever the set. The check API's and the gRPC
	// service's answers carry every header.
	RateLimitHeaders RateLimitHeaders `mapstructure:"rate_limit_headers"`
	// ParseErrorLogRate is how many malformed-request lines a second are
	// logged at most; the rest are counted and summed up in one line.
	// Default 10.
	ParseErrorLogRate int `mapstructure:"parse_error_log_rate"`
	// TLS terminates TLS on the proxy listener (minimum TLS 1.2, ALPN
	// http/1.1); the certificate is reloaded when its files change.
	// Default off: clear text.
	TLS tlsconf.Config `mapstructure:"tls"`
}

// Underscores is server.headers_with_underscores: what happens to a
// request header whose name has an underscore. It decodes from its name.
type Underscores string

// Values of server.headers_with_underscores.
const (
	UnderscoresDrop   Underscores = "drop"
	UnderscoresReject Underscores = "reject"
	UnderscoresAllow  Underscores = "allow"
)

// ParseUnderscores returns the value of a name of
// server.headers_with_underscores.
func ParseUnderscores(name string) (Underscores, error) {
	return confutil.OneOfWords(name, UnderscoresDrop, UnderscoresReject, UnderscoresAllow)
}

// UnmarshalText parses a name; empty text leaves the default.
func (u *Underscores) UnmarshalText(text []byte) error {
	return confutil.UnmarshalName(u, text, ParseUnderscores)
}

// RateLimitHeaders is server.rate_limit_headers: which rate-limit headers
// the proxy's answers carry. It decodes from its name.
type RateLimitHeaders string

// Values of server.rate_limit_headers.
const (
	RateLimitHeadersAll    RateLimitHeaders = "all"
	RateLimitHeadersDraft  RateLimitHeaders = "draft"
	RateLimitHeadersLegacy RateLimitHeaders = "legacy"
	RateLimitHeadersNone   RateLimitHeaders = "none"
)

// ParseRateLimitHeaders returns the value of a name of
// server.rate_limit_headers.
func ParseRateLimitHeaders(name string) (RateLimitHeaders, error) {
	return confutil.OneOfWords(name, RateLimitHeadersAll, RateLimitHeadersDraft, RateLimitHeadersLegacy, RateLimitHeadersNone)
}

// UnmarshalText parses a name; empty text leaves the default.
func (r *RateLimitHeaders) UnmarshalText(text []byte) error {
	return confutil.UnmarshalName(r, text, ParseRateLimitHeaders)
}

// set is the header set of r.
func (r RateLimitHeaders) set() reply.HeaderSet {
	switch r {
	case RateLimitHeadersDraft:
		return reply.DraftHeaders
	case RateLimitHeadersLegacy:
		return reply.LegacyHeaders
	case RateLimitHeadersNone:
		return reply.NoHeaders
	}
	return reply.AllHeaders
}

// IdentityConfig is the YAML section `identity`.
type IdentityConfig struct {
	// APIKeyHeader names the request header that carries the API key.
	// Default "X-API-Key".
	APIKeyHeader string `mapstructure:"api_key_header"`
	// RequestIDHeader names the request ID header, propagated to the upstream
	// and set on every answer. Default "X-Request-Id".
	RequestIDHeader string `mapstructure:"request_id_header"`
	// TrustRequestID says whose request IDs may spare a sliding_log count
	// (a retry within limits.request_id_retries and request_id_window):
	// "check" (default) only the check API caller's request_id; "proxies"
	// also the request ID header of requests from server.trusted_proxies;
	// "none" nobody's. An untrusted ID is passed on but the limiter does
	// not see it.
	TrustRequestID RequestIDTrust `mapstructure:"trust_request_id"`
	// DeadlineHeader names the request header in which a client (or the
	// proxy in front, Envoy's by default) says how many milliseconds it
	// waits for the answer: a request that a limit lets wait (max_wait)
	// never waits past it. Default "X-Envoy-Expected-Rq-Timeout-Ms".
	DeadlineHeader string `mapstructure:"deadline_header"`
}

// RequestIDTrust is identity.trust_request_id: whose request IDs may spare
// a count. It decodes from its name.
type RequestIDTrust string

// Values of identity.trust_request_id.
const (
	TrustRequestIDNone    RequestIDTrust = "none"
	TrustRequestIDCheck   RequestIDTrust = "check"
	TrustRequestIDProxies RequestIDTrust = "proxies"
)

// TrustsCheckRequestID reports whether the check API caller's request_id
// may spare a count.
func (c *IdentityConfig) TrustsCheckRequestID() bool {
	return c.TrustRequestID == "" || c.TrustRequestID == TrustRequestIDCheck || c.TrustRequestID == TrustRequestIDProxies
}

// TrustsProxyRequestID reports whether the request ID header of a request
// from a trusted proxy may spare a count.
func (c *IdentityConfig) TrustsProxyRequestID() bool {
	return c.TrustRequestID == TrustRequestIDProxies
}

// ParseRequestIDTrust returns the value of a name of
// identity.trust_request_id.
func ParseRequestIDTrust(name string) (RequestIDTrust, error) {
	return confutil.OneOfWords(name, TrustRequestIDNone, TrustRequestIDCheck, TrustRequestIDProxies)
}

// UnmarshalText parses a name; empty text leaves the default.
func (t *RequestIDTrust) UnmarshalText(text []byte) error {
	return confutil.UnmarshalName(t, text, ParseRequestIDTrust)
}

// Route is one entry of the YAML list `routes`.
type Route struct {
	// PathPrefix selects requests whose path starts with it on a segment
	// boundary (see route.go). Must start with "/".
	PathPrefix string `mapstructure:"path_prefix"`
	// Host, when set, restricts the route to requests with this Host header
	// (port ignored, case-insensitive).
	Host string `mapstructure:"host"`
	// Upstream names a pool of the `upstreams` section.
	Upstream string `mapstructure:"upstream"`
	// Resource names the route in limits, rules and metric labels. Default
	// "default".
	Resource string `mapstructure:"resource"`
	// Heavy routes answer 503 when the adaptive mode switches heavy routes off.
	Heavy bool `mapstructure:"heavy"`
	// CacheTTL, when positive, stores successful GET answers in the response
	// cache for this long; in cache-only mode they are served from it. 0: not
	// cached.
	CacheTTL time.Duration `mapstructure:"cache_ttl"`
	// PathCaseInsensitive matches PathPrefix ignoring ASCII case ("/SEARCH"
	// takes the "/search" route) and forwards the prefix as configured.
	// Default false: paths are case-sensitive.
	PathCaseInsensitive bool `mapstructure:"path_case_insensitive"`
	// WebSocket passes Upgrade requests (WebSocket handshakes) through: the
	// handshake is identified, gated and limited like any request, then the
	// bytes are spliced both ways until either side closes. Default false:
	// an Upgrade request is forwarded as a plain request with Upgrade
	// stripped.
	WebSocket bool `mapstructure:"websocket"`
	// WebSocketIdleTimeout closes an upgraded connection on which neither
	// side sent anything for this long. Default 60s.
	WebSocketIdleTimeout time.Duration `mapstructure:"websocket_idle_timeout"`
}

// Defaults of ServerConfig and IdentityConfig.
const (
	DefaultListen            = ":8080"
	DefaultReadTimeout       = 5 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxRequestBody    = confutil.ByteSize(10 << 20)
	DefaultRequestBuffer     = confutil.ByteSize(64 << 10)
	DefaultShutdownGrace     = 15 * time.Second
	DefaultDrainDelay        = 5 * time.Second
	DefaultConcurrency       = 256 * 1024
	DefaultAPIKeyHeader      = "X-API-Key"
	DefaultRequestIDHeader   = "X-Request-Id"
	DefaultDeadlineHeader    = "X-Envoy-Expected-Rq-Timeout-Ms"
	DefaultResource          = "default"
	DefaultParseErrorLogRate = 10
	// DefaultWebSocketIdleTimeout is routes[].websocket_idle_timeout's.
	DefaultWebSocketIdleTimeout = 60 * time.Second
)

// SetDefaults fills zero values with the defaults.
func (c *Config) SetDefaults() {
	c.Server.SetDefaults()
	c.Identity.SetDefaults()
	for i := range c.Routes {
		if c.Routes[i].Resource == "" {
			c.Routes[i].Resource = DefaultResource
		}
		confutil.SetDefault(&c.Routes[i].WebSocketIdleTimeout, DefaultWebSocketIdleTimeout)
	}
}

// SetDefaults fills zero values with the defaults.
func (c *ServerConfig) SetDefaults() {
	confutil.SetDefault(&c.Listen, DefaultListen)
	confutil.SetDefault(&c.ReadTimeout, DefaultReadTimeout)
	confutil.SetDefault(&c.WriteTimeout, DefaultWriteTimeout)
	confutil.SetDefault(&c.IdleTimeout, DefaultIdleTimeout)
	confutil.SetDefault(&c.MaxRequestBody, DefaultMaxRequestBody)
	confutil.SetDefault(&c.RequestBuffer, DefaultRequestBuffer)
	confutil.SetDefault(&c.ShutdownGrace, DefaultShutdownGrace)
	if c.DrainDelay == nil {
		d := DefaultDrainDelay
		c.DrainDelay = &d
	}
	confutil.SetDefault(&c.Concurrency, DefaultConcurrency)
	confutil.SetDefault(&c.HeadersWithUnderscores, UnderscoresDrop)
	confutil.SetDefault(&c.RateLimitHeaders, RateLimitHeadersAll)
	confutil.SetDefault(&c.ParseErrorLogRate, DefaultParseErrorLogRate)
}

// SetDefaults fills zero values with the defaults.
func (c *IdentityConfig) SetDefaults() {
	confutil.SetDefault(&c.APIKeyHeader, DefaultAPIKeyHeader)
	confutil.SetDefault(&c.RequestIDHeader, DefaultRequestIDHeader)
	confutil.SetDefault(&c.DeadlineHeader, DefaultDeadlineHeader)
	confutil.SetDefault(&c.TrustRequestID, TrustRequestIDCheck)
}

// Validate checks every key; upstreamNames are the configured upstream pools
// that routes may name. The error joins one line per bad key.
func (c *Config) Validate(upstreamNames []string) error {
	var errs []error
	if c.Server.HeadersWithUnderscores != UnderscoresAllow {
		for _, kv := range [][2]string{{"identity.api_key_header", c.Identity.APIKeyHeader}, {"identity.request_id_header", c.Identity.RequestIDHeader}} {
			if key, name := kv[0], kv[1]; strings.Contains(name, "_") {
				errs = append(errs, fmt.Errorf("%s: %q has an underscore, which server.headers_with_underscores %q would %s", key, name, c.Server.HeadersWithUnderscores, c.Server.HeadersWithUnderscores))
			}
		}
	}
	return errors.Join(c.Server.Validate(), c.Identity.Validate(), validateRoutes(c.Routes, upstreamNames), errors.Join(errs...))
}

// Validate checks the server section.
func (c *ServerConfig) Validate() error {
	var errs []error
	if err := checkHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("server.listen: %w", err))
	}
	for i, p := range c.TrustedProxies {
		if _, err := parsePrefix(p); err != nil {
			errs = append(errs, fmt.Errorf("server.trusted_proxies[%d]: %q is not a CIDR or IP", i, p))
		}
	}
	errs = append(errs,
		confutil.Positive("server.read_timeout", c.ReadTimeout),
		confutil.Positive("server.write_timeout", c.WriteTimeout),
		confutil.Positive("server.idle_timeout", c.IdleTimeout),
		confutil.Positive("server.shutdown_grace", c.ShutdownGrace),
	)
	if c.DrainDelay != nil && *c.DrainDelay < 0 {
		errs = append(errs, fmt.Errorf("server.drain_delay: %s is negative; use 0 to close at once", *c.DrainDelay))
	}
	if c.MaxRequestBody <= 0 || c.MaxRequestBody > 1<<31-1 {
		errs = append(errs, fmt.Errorf("server.max_request_body: %s is not a size between 1 byte and 2GiB", c.MaxRequestBody))
	}
	if c.RequestBuffer <= 0 || c.RequestBuffer > 64<<20 {
		errs = append(errs, fmt.Errorf("server.request_buffer: %s is not a size between 1 byte and 64MiB", c.RequestBuffer))
	}
	if c.Concurrency <= 0 {
		errs = append(errs, fmt.Errorf("server.concurrency: %d is not a positive number of connections", c.Concurrency))
	}
	// A value set in Go was not decoded: the same parser checks it.
	if _, err := ParseUnderscores(string(c.HeadersWithUnderscores)); err != nil {
		errs = append(errs, fmt.Errorf("server.headers_with_underscores: %w", err))
	}
	if _, err := ParseRateLimitHeaders(string(c.RateLimitHeaders)); err != nil {
		errs = append(errs, fmt.Errorf("server.rate_limit_headers: %w", err))
	}
	if c.ParseErrorLogRate <= 0 {
		errs = append(errs, fmt.Errorf("server.parse_error_log_rate: %d is not a positive number of lines a second", c.ParseErrorLogRate))
	}
	errs = append(errs, c.TLS.Validate("server.tls"))
	return errors.Join(errs...)
}

// Validate checks the identity section.
func (c *IdentityConfig) Validate() error {
	var errs []error
	if !confutil.IsToken(c.APIKeyHeader) {
		errs = append(errs, fmt.Errorf("identity.api_key_header: %q is not a header name", c.APIKeyHeader))
	}
	if !confutil.IsToken(c.RequestIDHeader) {
		errs = append(errs, fmt.Errorf("identity.request_id_header: %q is not a header name", c.RequestIDHeader))
	}
	if !confutil.IsToken(c.DeadlineHeader) {
		errs = append(errs, fmt.Errorf("identity.deadline_header: %q is not a header name", c.DeadlineHeader))
	}
	if c.TrustRequestID != "" {
		if _, err := ParseRequestIDTrust(string(c.TrustRequestID)); err != nil {
			errs = append(errs, fmt.Errorf("identity.trust_request_id: %w", err))
		}
	}
	return errors.Join(errs...)
}

func validateRoutes(routes []Route, upstreamNames []string) error {
	var errs []error
	if len(routes) == 0 {
		errs = append(errs, errors.New("routes: at least one route is required"))
	}
	seen := make(map[string]int, len(routes))
	for i, r := range routes {
		key := fmt.Sprintf("routes[%d]", i)
		if !strings.HasPrefix(r.PathPrefix, "/") {
			errs = append(errs, fmt.Errorf("%s.path_prefix: must start with \"/\" (got %q)", key, r.PathPrefix))
		}
		if r.Host != "" && strings.ContainsAny(r.Host, "/ \t") {
			errs = append(errs, fmt.Errorf("%s.host: %q is not a host name", key, r.Host))
		}
		if !slices.Contains(upstreamNames, r.Upstream) {
			errs = append(errs, fmt.Errorf("%s.upstream: %q is not a configured upstream (%s)", key, r.Upstream, strings.Join(upstreamNames, ", ")))
		}
		if r.WebSocketIdleTimeout < 0 {
			errs = append(errs, fmt.Errorf("%s.websocket_idle_timeout: %s is not a positive duration", key, r.WebSocketIdleTimeout))
		}
		if r.CacheTTL < 0 {
			errs = append(errs, fmt.Errorf("%s.cache_ttl: %s is negative (0 means not cached)", key, r.CacheTTL))
		}
		id := strings.ToLower(r.Host) + " " + r.PathPrefix
		if j, dup := seen[id]; dup {
			errs = append(errs, fmt.Errorf("%s: path_prefix %q and host %q repeat routes[%d]", key, r.PathPrefix, r.Host, j))
		}
		seen[id] = i
	}
	return errors.Join(errs...)
}

func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil || port == "" {
		return fmt.Errorf("%q is not host:port", s)
	}
	return nil
}

// parsePrefix reads a CIDR or a single IP (as a /32 or /128).
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
