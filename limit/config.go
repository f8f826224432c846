package limit

import (
	"errors"
	"fmt"
	"time"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// FailurePolicy is what the limiter does while the store's breaker is open
// (limits.on_store_failure). It decodes from its configuration name, so a
// loaded configuration holds a valid policy.
type FailurePolicy uint8

// Failure policies.
const (
	// FailLocal enforces each pod's share of every limit from local state:
	// the limit divided by the number of live pods last seen.
	FailLocal FailurePolicy = iota
	// FailOpen allows every request.
	FailOpen
	// FailClosed rejects every request with 503.
	FailClosed
)

var failurePolicyNames = [...]string{FailLocal: "local", FailOpen: "open", FailClosed: "closed"}

// String returns the configuration name of the policy.
func (p FailurePolicy) String() string {
	if int(p) < len(failurePolicyNames) {
		return failurePolicyNames[p]
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// ParseFailurePolicy returns the policy of a configuration name.
func ParseFailurePolicy(name string) (FailurePolicy, error) {
	for p, n := range failurePolicyNames {
		if n == name {
			return FailurePolicy(p), nil
		}
	}
	return 0, fmt.Errorf("%q is not one of local, open, closed", name)
}

// MarshalText returns the configuration name.
func (p FailurePolicy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText parses a configuration name; empty text leaves the default
// (local), as an absent key does.
func (p *FailurePolicy) UnmarshalText(text []byte) error {
	return confutil.UnmarshalName(p, text, ParseFailurePolicy)
}

// Config is the `limits` section: which limits apply to every request and how
// the limiter reaches the store.
type Config struct {
	// Algorithm is the default algorithm: sliding_window (default),
	// sliding_log or token_bucket. Rules may override it.
	Algorithm store.Algorithm `mapstructure:"algorithm"`
	// Window is the window of the sliding algorithms. Default 1s.
	Window time.Duration `mapstructure:"window"`
	// Tenant is the base limit per tenant per window, multiplied by the
	// tenant's plan multiplier (and by 1 − pressure under load). 0: off.
	Tenant int64 `mapstructure:"tenant"`
	// APIKey is the limit per API key per window. 0: off.
	APIKey int64 `mapstructure:"api_key"`
	// IP is the limit per client IP per window, applied to the requests
	// IPScope says. 0: off.
	IP int64 `mapstructure:"ip"`
	// IPScope is which requests the IP limit applies to: all (default:
	// every request, as a client IP is the one identity every request
	// has) or anonymous (only requests without a known API key, whose
	// budgets are their key's and tenant's).
	IPScope IPScope `mapstructure:"ip_scope"`
	// QuotaTimeZone is the time zone of the calendar quotas' periods (a
	// name of the IANA database such as Europe/Paris). Default UTC.
	QuotaTimeZone confutil.Location `mapstructure:"quota_time_zone"`
	// LocalFastPath lets a pod lease several permits at once and approve
	// from them locally. false: every decision asks the store (lease size 1).
	// Default true.
	LocalFastPath *bool `mapstructure:"local_fast_path"`
	// FirstUses lets a pod decide a key's first requests of a window on
	// permits the store keeps for it (a thousandth of the limit a pod, 15
	// at most), without a store call (sliding_window and sliding_log
	// limits of 1,000 a pod or more; see Limiter.firstUse). false: the
	// store keeps none, and every first request asks it.
	// Default true.
	FirstUses *bool `mapstructure:"first_uses"`
	// StoreTimeout is the deadline of one store call; a slower call counts as
	// a failure and the request is decided by the failure policy. Default
	// 50ms: well above a store round trip, and above the scheduling delays
	// of a pod whose CPU is saturated (tens of ms; BenchmarkSaturation in
	// the root package drives a pod there), which would otherwise
	// send a busy pod's decisions to the failure policy while the store is
	// fine (see docs/configuration.md).
	StoreTimeout time.Duration `mapstructure:"store_timeout"`
	// OnStoreFailure is local (default), open or closed.
	OnStoreFailure FailurePolicy `mapstructure:"on_store_failure"`
	// ExpectedPods is the number of pods the local share assumes while the
	// pod has never seen the cluster's heartbeats (Redis unreachable since
	// start): each limit is divided by it, so that a pod started during an
	// outage takes no more than its share. Once Redis has answered, the live
	// pods last seen count instead. Default 3 (the deploy kit's replicas);
	// set it to the most replicas you run.
	ExpectedPods int `mapstructure:"expected_pods"`
	// Shadow decides and counts but never rejects. Default false.
	Shadow bool `mapstructure:"shadow"`
	// LeaseTTL is how long a pod may keep unused leased permits. Default 250ms.
	LeaseTTL time.Duration `mapstructure:"lease_ttl"`
	// MaxLease caps the permits leased in one store call. Default 1024.
	MaxLease int64 `mapstructure:"max_lease"`
	// BreakerFailures is the number of consecutive store failures that open
	// the store breaker. Default 5.
	BreakerFailures int `mapstructure:"breaker_failures"`
	// BreakerCooldown is how long the breaker stays open before a probe.
	// Default 200ms.
	BreakerCooldown time.Duration `mapstructure:"breaker_cooldown"`
	// MaxKeys bounds the local buckets a pod keeps (idle ones are evicted).
	// Default 100000.
	MaxKeys int `mapstructure:"max_keys"`
	// WaitQueue bounds the requests waiting (max_wait) on this pod, and
	// WaitQueuePerKey those waiting for one key; past them a request is
	// refused at once. Defaults 10000 and 1000.
	WaitQueue       int `mapstructure:"wait_queue"`
	WaitQueuePerKey int `mapstructure:"wait_queue_per_key"`
	// RequestIDRetries is how many repeats of a counted request ID a
	// sliding_log limit spares (0..15; 0: every request counts), when the
	// ID comes from a source trusted for it (identity.trust_request_id).
	// Default 2.
	RequestIDRetries *int64 `mapstructure:"request_id_retries"`
	// RequestIDWindow is how long after the counted request its repeats
	// are spared. Default 10s.
	RequestIDWindow time.Duration `mapstructure:"request_id_window"`
	// CheckResources are resources that no route serves and the check API
	// decides (POST /v1/ratelimit/check names its resource): the file's
	// rules and policies may name them. A rule or policy naming any other
	// resource that no route serves is refused, as it would never apply to
	// a proxied request. Default none.
	CheckResources []string `mapstructure:"check_resources"`
}

// LiveKey reports that every key of the section applies on a reload: the
// gateway builds a new limiter of the new section.
func (Config) LiveKey(string) bool { return true }

// SetDefaults fills the zero values.
func (c *Config) SetDefaults() {
	confutil.SetDefault(&c.Algorithm, store.SlidingWindow)
	confutil.SetDefault(&c.Window, time.Second)
	confutil.SetDefault(&c.IPScope, IPScopeAll)
	if c.LocalFastPath == nil {
		t := true
		c.LocalFastPath = &t
	}
	if c.FirstUses == nil {
		t := true
		c.FirstUses = &t
	}
	confutil.SetDefault(&c.StoreTimeout, 50*time.Millisecond)
	confutil.SetDefault(&c.ExpectedPods, 3)
	confutil.SetDefault(&c.LeaseTTL, 250*time.Millisecond)
	confutil.SetDefault(&c.MaxLease, 1024)
	confutil.SetDefault(&c.BreakerFailures, 5)
	confutil.SetDefault(&c.BreakerCooldown, 200*time.Millisecond)
	confutil.SetDefault(&c.MaxKeys, 100000)
	confutil.SetDefault(&c.WaitQueue, 10000)
	confutil.SetDefault(&c.WaitQueuePerKey, 1000)
	if c.RequestIDRetries == nil {
		n := int64(DefaultRequestIDRetries)
		c.RequestIDRetries = &n
	}
	confutil.SetDefault(&c.RequestIDWindow, DefaultRequestIDWindow)
}

// Defaults of the request ID allowance: a client's or a proxy's retries
// of one request, without the allowance growing into a way around the
// limit (each counted request can pass this many more).
const (
	DefaultRequestIDRetries = 2
	DefaultRequestIDWindow  = 10 * time.Second
)

// IDRetries returns request_id_retries (the default when unset).
func (c *Config) IDRetries() int64 {
	if c.RequestIDRetries == nil {
		return DefaultRequestIDRetries
	}
	return *c.RequestIDRetries
}

// IDWindow returns request_id_window (the default when unset).
func (c *Config) IDWindow() time.Duration {
	if c.RequestIDWindow == 0 {
		return DefaultRequestIDWindow
	}
	return c.RequestIDWindow
}

// IPScope is limits.ip_scope: which requests the IP limit applies to. It
// decodes from its name.
type IPScope string

// Values of limits.ip_scope.
const (
	IPScopeAll       IPScope = "all"
	IPScopeAnonymous IPScope = "anonymous"
)

// ParseIPScope returns the value of a name of limits.ip_scope.
func ParseIPScope(name string) (IPScope, error) {
	return confutil.OneOf(name, IPScopeAll, IPScopeAnonymous)
}

// UnmarshalText parses a name; empty text leaves the default.
func (s *IPScope) UnmarshalText(text []byte) error {
	return confutil.UnmarshalName(s, text, ParseIPScope)
}

// CatalogDefaults are what the section gives the rules and the policies:
// the default algorithm and window, and the quotas' time zone.
func (c *Config) CatalogDefaults() catalog.Defaults {
	return catalog.Defaults{Algorithm: c.Algorithm, Window: c.Window, Zone: c.QuotaTimeZone.Location()}
}

// Shorthands are the section's shorthand limits (tenant, api_key, ip and
// ip_scope), which the limiter compiles into the policies they are.
func (c *Config) Shorthands() catalog.Shorthands {
	return catalog.Shorthands{Tenant: c.Tenant, APIKey: c.APIKey, IP: c.IP, IPAnonymous: c.IPScope == IPScopeAnonymous}
}

// FirstUse reports whether first uses are on (first_uses).
func (c *Config) FirstUse() bool { return c.FirstUses == nil || *c.FirstUses }

// FastPath reports whether local leases are on (local_fast_path).
func (c *Config) FastPath() bool { return c.LocalFastPath == nil || *c.LocalFastPath }

// Validate checks the section; errors name the YAML key. The error joins one
// line per bad key.
func (c *Config) Validate() error {
	var errs []error
	// Values set in Go were not decoded: the enums' parsers check them.
	if _, err := store.ParseAlgorithm(c.Algorithm.String()); err != nil {
		errs = append(errs, &catalog.ValidationError{Field: "limits.algorithm", Msg: err.Error()})
	}
	if _, err := ParseFailurePolicy(c.OnStoreFailure.String()); err != nil {
		errs = append(errs, &catalog.ValidationError{Field: "limits.on_store_failure", Msg: err.Error()})
	}
	if _, err := ParseIPScope(string(c.IPScope)); err != nil {
		errs = append(errs, &catalog.ValidationError{Field: "limits.ip_scope", Msg: err.Error()})
	}
	checks := []struct {
		key string
		bad bool
		msg string
	}{
		{"limits.window", c.Window < time.Millisecond || c.Window > store.MaxWindow, fmt.Sprintf("%v is out of range [1ms, %v]", c.Window, store.MaxWindow)},
		{"limits.tenant", c.Tenant < 0 || c.Tenant > store.MaxLimit, fmt.Sprintf("%d is out of range 0 (off)..%d", c.Tenant, int64(store.MaxLimit))},
		{"limits.api_key", c.APIKey < 0 || c.APIKey > store.MaxLimit, fmt.Sprintf("%d is out of range 0 (off)..%d", c.APIKey, int64(store.MaxLimit))},
		{"limits.ip", c.IP < 0 || c.IP > store.MaxLimit, fmt.Sprintf("%d is out of range 0 (off)..%d", c.IP, int64(store.MaxLimit))},
		{"limits.store_timeout", c.StoreTimeout <= 0 || c.StoreTimeout > 10*time.Second,
			fmt.Sprintf("%v is out of range (0, 10s]", c.StoreTimeout)},
		{"limits.lease_ttl", c.LeaseTTL < time.Millisecond || c.LeaseTTL > time.Minute,
			fmt.Sprintf("%v is out of range [1ms, 1m]", c.LeaseTTL)},
		{"limits.max_lease", c.MaxLease < 1 || c.MaxLease > 1_000_000,
			fmt.Sprintf("%d is out of range 1..1000000", c.MaxLease)},
		{"limits.breaker_failures", c.BreakerFailures < 1, fmt.Sprintf("%d must be at least 1", c.BreakerFailures)},
		{"limits.breaker_cooldown", c.BreakerCooldown <= 0, fmt.Sprintf("%v must be positive", c.BreakerCooldown)},
		{"limits.max_keys", c.MaxKeys < 1, fmt.Sprintf("%d must be at least 1", c.MaxKeys)},
		{"limits.wait_queue", c.WaitQueue < 1 || c.WaitQueue > 1_000_000, fmt.Sprintf("%d is out of range 1..1000000", c.WaitQueue)},
		{"limits.wait_queue_per_key", c.WaitQueuePerKey < 1 || c.WaitQueuePerKey > c.WaitQueue,
			fmt.Sprintf("%d is out of range 1..limits.wait_queue (%d)", c.WaitQueuePerKey, c.WaitQueue)},
		{"limits.expected_pods", c.ExpectedPods < 1 || c.ExpectedPods > 10000,
			fmt.Sprintf("%d is out of range 1..10000", c.ExpectedPods)},
		{"limits.request_id_retries", c.IDRetries() < 0 || c.IDRetries() > store.MaxRequestIDRetries,
			fmt.Sprintf("%d is out of range 0 (none)..%d", c.IDRetries(), store.MaxRequestIDRetries)},
		{"limits.request_id_window", c.RequestIDWindow < 0 || c.RequestIDWindow > store.MaxWindow,
			fmt.Sprintf("%v is out of range (0, %v]", c.RequestIDWindow, store.MaxWindow)},
	}
	for _, ch := range checks {
		if ch.bad {
			errs = append(errs, &catalog.ValidationError{Field: ch.key, Msg: ch.msg})
		}
	}
	for i, r := range c.CheckResources {
		errs = append(errs, catalog.CheckName(fmt.Sprintf("limits.check_resources[%d]", i), r))
	}
	return errors.Join(errs...)
}
