package adaptive

import (
	"reflect"
	"slices"
	"strings"
)

// RestartKeys are the keys of the adaptive section, under "adaptive.",
// that a reload cannot change: the switches decide which goroutines and
// limiters exist, and the cluster timings are shared with the other pods'
// view of this one. Every other key of the section changes live (Stage).
var RestartKeys = []string{"enabled", "sample_interval", "cluster_interval", "pressure_ttl", "concurrency.enabled"}

// LiveKey reports whether a changed key of the section (its YAML path
// after "adaptive.") applies on a reload: every key but RestartKeys.
func (Config) LiveKey(key string) bool { return Live(key) }

// Live reports whether a changed key of the adaptive section (its YAML
// path after "adaptive.") applies on a reload.
func Live(key string) bool {
	return !slices.ContainsFunc(RestartKeys, func(k string) bool {
		return key == k || strings.HasPrefix(key, k+".")
	})
}

// KeepRestartKeys returns c with the values of RestartKeys taken from
// running: the section as a reload applies it.
func (c Config) KeepRestartKeys(running Config) Config {
	c.Enabled, c.SampleInterval = running.Enabled, running.SampleInterval
	c.ClusterInterval, c.PressureTTL = running.ClusterInterval, running.PressureTTL
	c.Concurrency.Enabled = running.Concurrency.Enabled
	return c
}

// Update is a staged reconfiguration of a Controller, built by Stage: the
// new thresholds, weights and objectives, and a concurrency limiter per
// upstream, where an upstream whose limiter configuration did not change
// keeps its running limiter (its learned limit and its requests in flight)
// and every other gets a new one starting at initial_limit. Nothing changes
// until Commit; an Update that is not committed is dropped as it is.
type Update struct {
	c        *Controller
	cfg      *Config
	limiters map[string]*ConcurrencyLimiter
}

// Stage prepares the limiters of upstreams for cfg, a provisioned section
// (Config.SetDefaults, Config.Validate), with the running values of
// RestartKeys. Nothing changes until Commit.
func (c *Controller) Stage(cfg Config, upstreams []string) (*Update, error) {
	cfg = cfg.KeepRestartKeys(c.cfg)
	u := &Update{c: c, cfg: &cfg, limiters: make(map[string]*ConcurrencyLimiter, len(upstreams))}
	if !c.limited() {
		return u, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range upstreams {
		lc := cfg.Concurrency.For(name)
		if l := c.concurrency[name]; l != nil && reflect.DeepEqual(l.cfg, lc) {
			u.limiters[name] = l
			continue
		}
		u.limiters[name] = newConcurrencyLimiter(name, lc, &c.gatewayDelay)
	}
	return u, nil
}

// Concurrency returns the update's limiter of upstream, or nil.
func (u *Update) Concurrency(upstream string) *ConcurrencyLimiter {
	return u.limiters[upstream]
}

// Commit makes the update current: the next sample uses its configuration,
// its new limiters get their series and the series of the limiters it
// drops are unregistered. A dropped limiter keeps serving the requests
// that hold it. Commit before the route table that binds the new
// limiters is published.
func (u *Update) Commit() {
	c := u.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, l := range c.concurrency {
		if u.limiters[name] != l {
			l.removeMetrics(c.set)
		}
	}
	for name, l := range u.limiters {
		if c.concurrency[name] != l {
			l.addMetrics(c.set)
		}
	}
	c.concurrency = u.limiters
	c.tune.Store(u.cfg)
}
