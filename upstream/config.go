package upstream

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
)

// Balance is `upstreams.NAME.balance`: how a pool picks a target. It
// decodes from its name.
type Balance string

// Balance modes accepted in `upstreams.NAME.balance`.
const (
	// BalanceRoundRobin sends requests to the usable targets in turn.
	BalanceRoundRobin Balance = "round_robin"
	// BalanceLeastPending sends each request to the usable target with the
	// fewest requests in flight from this process.
	BalanceLeastPending Balance = "least_pending"
)

// ParseBalance returns the balance mode of a name.
func ParseBalance(name string) (Balance, error) {
	return confutil.OneOf(name, BalanceRoundRobin, BalanceLeastPending)
}

// UnmarshalText parses a name; empty text leaves the default.
func (b *Balance) UnmarshalText(text []byte) error {
	return confutil.UnmarshalName(b, text, ParseBalance)
}

// Config is the YAML section `upstreams`: pool name → pool. Pool names are
// the names routes refer to and the `upstream` label of the metrics.
type Config map[string]PoolConfig

// LiveKey reports that every key of the section applies on a reload
// (Set.Stage): a pool whose keys did not change keeps running, another is
// built anew.
func (Config) LiveKey(string) bool { return true }

// PoolConfig is one pool, `upstreams.NAME`. Zero values mean the defaults
// given on each field.
type PoolConfig struct {
	// Targets are the backend base URLs, "http://host:port" or
	// "https://host:port", without path, query or user info. At least one.
	Targets []string `mapstructure:"targets"`
	// Balance is "round_robin" (default) or "least_pending".
	Balance Balance `mapstructure:"balance"`
	// HealthCheck configures active health checks; none without a path.
	HealthCheck HealthCheckConfig `mapstructure:"health_check"`
	// Timeout bounds one proxied request, from picking a target to the last
	// response header (to the last body byte unless the response streams),
	// including a retry on another target. Default 30s.
	Timeout time.Duration `mapstructure:"timeout"`
	// BodyIdleTimeout bounds the wait for the next bytes of a streamed
	// answer's body: one that sends nothing this long is cut. Default: the
	// pool's Timeout.
	BodyIdleTimeout time.Duration `mapstructure:"body_idle_timeout"`
	// BodyTimeout, when set, bounds the whole answer, from picking a
	// target to the last body byte. Default 0: none (the answer may stream
	// as long as it sends something every BodyIdleTimeout).
	BodyTimeout time.Duration `mapstructure:"body_timeout"`
	// ConnectTimeout bounds establishing one connection to a target.
	// Default 2s.
	ConnectTimeout time.Duration `mapstructure:"connect_timeout"`
	// MaxConns is the most connections open to one target. A request that
	// finds them all busy waits for one until its timeout. Default 512.
	MaxConns int `mapstructure:"max_conns"`
	// MaxIdleConnDuration closes keep-alive connections idle this long.
	// Default 10s (fasthttp's default). Keep it below the target's own
	// keep-alive timeout.
	MaxIdleConnDuration time.Duration `mapstructure:"max_idle_conn_duration"`
	// Pipeline, when above 0, sends the GET requests without a body over at
	// most this many connections to each target, each request written
	// without waiting for the answers before it (HTTP/1.1 pipelining):
	// fewer system calls on the gateway and the target. Their answers are
	// read whole into memory, and a slow answer delays the ones behind it;
	// see pipeline. Only for targets that answer pipelined requests in
	// order (any HTTP/1.1 server must) with small answers. Default 0: off.
	Pipeline int `mapstructure:"pipeline"`
	// Passive configures ejection on consecutive failures of live requests.
	Passive PassiveConfig `mapstructure:"passive"`
	// Breaker configures the per-target circuit breaker.
	Breaker BreakerConfig `mapstructure:"breaker"`
	// MaxEjectionPercent caps the share of the pool's targets that passive
	// ejection and open breakers may hold out at once; at least one target
	// always stays (a single-target pool never loses it). Default 50.
	MaxEjectionPercent int `mapstructure:"max_ejection_percent"`
}

// HealthCheckConfig is `upstreams.NAME.health_check`.
type HealthCheckConfig struct {
	// Path is requested with GET on each target; a 2xx or 3xx answer within
	// Timeout is a success. Empty (default): no active checks.
	Path string `mapstructure:"path"`
	// Interval between two checks of one target. Default 2s.
	Interval time.Duration `mapstructure:"interval"`
	// Timeout of one check; at most Interval. Default 1s.
	Timeout time.Duration `mapstructure:"timeout"`
	// HealthyThreshold is how many consecutive successes bring an unhealthy
	// target back. Default 2.
	HealthyThreshold int `mapstructure:"healthy_threshold"`
	// UnhealthyThreshold is how many consecutive failures take a healthy
	// target out. Default 2.
	UnhealthyThreshold int `mapstructure:"unhealthy_threshold"`
}

// PassiveConfig is `upstreams.NAME.passive`: outlier ejection from live
// traffic. A failure is a connection error, a timeout or a 5xx answer other
// than 503; a 503 or 429 (the backend shedding load) and a request the client
// broke count neither way; anything else is a success and resets the count.
type PassiveConfig struct {
	// Failures is how many consecutive failures eject a target. Default 5.
	Failures int `mapstructure:"failures"`
	// EjectFor is how long an ejected target stays out before it is
	// re-probed (health_check.path if set, else a TCP connect); a target that
	// passes comes back on probation, where one failure ejects it again.
	// Default 10s.
	EjectFor time.Duration `mapstructure:"eject_for"`
}

// BreakerConfig is `upstreams.NAME.breaker`, a circuit breaker per target.
type BreakerConfig struct {
	// Failures is how many consecutive failures open the breaker. Default 5.
	Failures int `mapstructure:"failures"`
	// OpenFor is how long an open breaker refuses requests before it turns
	// half-open. Default 5s.
	OpenFor time.Duration `mapstructure:"open_for"`
	// HalfOpenRequests is how many trial requests a half-open breaker lets
	// through; all must succeed to close it, one failure opens it again.
	// Default 1.
	HalfOpenRequests int `mapstructure:"half_open_requests"`
}

// SetDefaults fills the zero values of every pool.
func (c Config) SetDefaults() {
	for name, p := range c {
		p.SetDefaults()
		c[name] = p
	}
}

// SetDefaults fills the zero values of p.
func (p *PoolConfig) SetDefaults() {
	confutil.SetDefault(&p.Balance, BalanceRoundRobin)
	confutil.SetDefault(&p.Timeout, 30*time.Second)
	confutil.SetDefault(&p.BodyIdleTimeout, p.Timeout)
	confutil.SetDefault(&p.ConnectTimeout, 2*time.Second)
	confutil.SetDefault(&p.MaxConns, 512)
	confutil.SetDefault(&p.MaxIdleConnDuration, fasthttp.DefaultMaxIdleConnDuration)
	h := &p.HealthCheck
	confutil.SetDefault(&h.Interval, 2*time.Second)
	confutil.SetDefault(&h.Timeout, time.Second)
	confutil.SetDefault(&h.HealthyThreshold, 2)
	confutil.SetDefault(&h.UnhealthyThreshold, 2)
	confutil.SetDefault(&p.Passive.Failures, 5)
	confutil.SetDefault(&p.Passive.EjectFor, 10*time.Second)
	confutil.SetDefault(&p.Breaker.Failures, 5)
	confutil.SetDefault(&p.Breaker.OpenFor, 5*time.Second)
	confutil.SetDefault(&p.Breaker.HalfOpenRequests, 1)
	confutil.SetDefault(&p.MaxEjectionPercent, 50)
}

// Validate checks every pool, in name order so that the errors come out in
// the same order on every run. Each error names the full YAML key.
func (c Config) Validate() error {
	var errs []error
	for _, name := range sortedNames(c) {
		key := "upstreams." + name
		if !validName(name) {
			errs = append(errs, fmt.Errorf("%s: the name %q may hold only letters, digits, '_' and '-'", key, name))
		}
		p := c[name]
		errs = append(errs, p.validate(key))
	}
	return errors.Join(errs...)
}

func sortedNames(c Config) []string {
	names := make([]string, 0, len(c))
	for name := range c {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func validName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
		if !ok {
			return false
		}
	}
	return true
}

func (p *PoolConfig) validate(key string) error {
	errs := []error{p.validateTargets(key)}
	// A value set in Go was not decoded: the same parser checks it.
	if _, err := ParseBalance(string(p.Balance)); err != nil {
		errs = append(errs, fmt.Errorf("%s.balance: %w", key, err))
	}
	errs = append(errs,
		confutil.Positive(key+".timeout", p.Timeout),
		confutil.Positive(key+".body_idle_timeout", p.BodyIdleTimeout),
		confutil.Positive(key+".connect_timeout", p.ConnectTimeout),
		confutil.AtLeastOne(key+".max_conns", p.MaxConns),
		confutil.Positive(key+".max_idle_conn_duration", p.MaxIdleConnDuration),
		p.HealthCheck.validate(key+".health_check"),
		confutil.AtLeastOne(key+".passive.failures", p.Passive.Failures),
		confutil.Positive(key+".passive.eject_for", p.Passive.EjectFor),
		confutil.AtLeastOne(key+".breaker.failures", p.Breaker.Failures),
		confutil.Positive(key+".breaker.open_for", p.Breaker.OpenFor),
		confutil.AtLeastOne(key+".breaker.half_open_requests", p.Breaker.HalfOpenRequests),
	)
	if p.BodyTimeout < 0 || (p.BodyTimeout > 0 && p.BodyTimeout < p.Timeout) {
		errs = append(errs, fmt.Errorf("%s.body_timeout: %s must be 0 (none) or at least %s.timeout (%s): it bounds the whole answer, head included", key, p.BodyTimeout, key, p.Timeout))
	}
	if p.Pipeline < 0 || p.Pipeline > MaxPipeline {
		errs = append(errs, fmt.Errorf("%s.pipeline: %d must be within 0..%d (0: no pipelining)", key, p.Pipeline, MaxPipeline))
	}
	if p.MaxEjectionPercent < 0 || p.MaxEjectionPercent > 100 {
		errs = append(errs, fmt.Errorf("%s.max_ejection_percent: %d must be within 0..100", key, p.MaxEjectionPercent))
	}
	return errors.Join(errs...)
}

func (p *PoolConfig) validateTargets(key string) error {
	if len(p.Targets) == 0 {
		return fmt.Errorf("%s.targets: must list at least one http(s) URL", key)
	}
	var errs []error
	for i, t := range p.Targets {
		k := fmt.Sprintf("%s.targets[%d]", key, i)
		if err := checkTargetURL(t); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q %w", k, t, err))
			continue
		}
		if slices.Index(p.Targets, t) < i {
			errs = append(errs, fmt.Errorf("%s: %q is listed twice", k, t))
		}
	}
	return errors.Join(errs...)
}

// errNotHTTP is the wording the config contract fixes for a bad target.
var errNotHTTP = errors.New("is not an http(s) URL")

func checkTargetURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return errNotHTTP
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("must be scheme://host[:port] only, without user info, path, query or fragment")
	}
	if strings.ContainsAny(s, "\"\\\n") {
		return errNotHTTP
	}
	return nil
}

func (h *HealthCheckConfig) validate(key string) error {
	var errs []error
	if h.Path != "" && !strings.HasPrefix(h.Path, "/") {
		errs = append(errs, fmt.Errorf("%s.path: %q must start with '/' (or be empty: no active checks)", key, h.Path))
	}
	errs = append(errs,
		confutil.Positive(key+".interval", h.Interval),
		confutil.Positive(key+".timeout", h.Timeout),
		confutil.AtLeastOne(key+".healthy_threshold", h.HealthyThreshold),
		confutil.AtLeastOne(key+".unhealthy_threshold", h.UnhealthyThreshold),
	)
	if h.Timeout > h.Interval && h.Interval > 0 {
		errs = append(errs, fmt.Errorf("%s.timeout: %s must not exceed %s.interval (%s)", key, h.Timeout, key, h.Interval))
	}
	return errors.Join(errs...)
}
