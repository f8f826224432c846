package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sentinel-gateway/sentinel/internal/config"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

var (
	reloadsOK     = metrics.NewCounter(`sentinel_config_reloads_total{result="applied"}`)
	reloadsFailed = metrics.NewCounter(`sentinel_config_reloads_total{result="invalid"}`)
	// configGeneration counts the configurations the process has served:
	// 1 from the start, one more for each reload that applied a change.
	configGeneration = metrics.NewGauge(`sentinel_config_generation`, nil)
	lastReloadOK     = metrics.NewGauge(`sentinel_config_last_reload_successful`, nil)
	lastReloadAt     = metrics.NewGauge(`sentinel_config_last_reload_success_timestamp_seconds`, nil)
)

// liveKeys is implemented by the section types some of whose keys a reload
// applies without a restart; a section without it applies none. The
// package that owns a section knows what it can change while running, so
// the root asks it rather than keeping its own list.
type liveKeys interface {
	// LiveKey reports whether a change of key applies on a reload. key is
	// relative to the section (limits.ip: "ip"; the section itself as one
	// value, such as routes or upstreams: ""), or the whole key for a
	// section squashed into the top of the file (proxy.Config).
	LiveKey(key string) bool
}

// markLoaded records a configuration that serves: the next generation.
func markLoaded(now time.Time) {
	configGeneration.Inc()
	lastReloadOK.Set(1)
	lastReloadAt.Set(float64(now.Unix()))
}

// reload re-reads the configuration, validates it and applies the
// reloadable keys that changed: a new limiter for the limits section, the
// config entries of tenants and rules, log.level, and a new routing (route
// table, pools, adaptive tunables and limiters) for routes, upstreams and
// the adaptive section. It returns the changed keys it applied and those
// that need a restart. An invalid configuration changes nothing and is
// returned as the error.
func (a *Gateway) Reload() (applied, restart []string, err error) {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	if a.opts.Load == nil {
		return nil, nil, errors.New("reload: this process cannot re-read its configuration")
	}
	next, err := a.opts.Load()
	if err != nil {
		reloadFailed(err)
		return nil, nil, err
	}
	files, err := a.stageFiles(next)
	if err != nil {
		reloadFailed(err)
		return nil, nil, err
	}
	changed := files.withFiles(diffKeys(flatten(a.cfg), flatten(next)))
	for _, k := range changed {
		if isReloadable(k) {
			applied = append(applied, k)
		} else {
			restart = append(restart, k)
		}
	}
	if err := a.apply(next, applied); err != nil {
		reloadFailed(err)
		return nil, restart, err
	}
	a.commitFiles(files, next)
	reloadsOK.Inc()
	lastReloadOK.Set(1)
	if len(applied) > 0 {
		markLoaded(time.Now())
	}
	slog.Info("config reloaded", "applied", strings.Join(applied, ","), "restart_required", strings.Join(restart, ","))
	return applied, restart, nil
}

// reloadFailed counts and logs a refused reload.
func reloadFailed(err error) {
	reloadsFailed.Inc()
	lastReloadOK.Set(0)
	slog.Error("config reload failed; keeping the running configuration", "error", err.Error())
}

// apply switches the parts whose keys changed to next's sections, all or
// nothing: the parts that can refuse are built first (the routing staged,
// the limiter and its catalog base set last), and only then switched.
func (a *Gateway) apply(next *Config, applied []string) error {
	has := func(prefix string) bool {
		return slices.ContainsFunc(applied, func(k string) bool { return strings.HasPrefix(k, prefix) })
	}
	var r *routing
	if has("routes") || has("upstreams") || has("adaptive.") {
		var err error
		if r, err = a.stageRouting(next); err != nil {
			return err
		}
	}
	if has("limits.") || has("tenants") || has("rules") || has("policies") {
		if err := a.applyLimits(next); err != nil {
			if r != nil {
				r.abort()
			}
			return err
		}
	}
	if r != nil {
		a.commitRouting(r, next)
	}
	if has("log.level") && a.opts.LogLevel != nil {
		a.opts.LogLevel.Set(next.Log.SlogLevel())
		a.cfg.Log.Level = next.Log.Level
	}
	return nil
}

// applyLimits switches to a new limiter and catalog base for next's limits,
// policies, tenants and rules.
func (a *Gateway) applyLimits(next *Config) error {
	// next's policies were checked when it loaded; the sync applies them
	// below, under the API's, and every limiter reads them from the sync.
	// The new limiter goes on from the old one's buckets, local share and
	// breakers: the store may be down right now, and then they alone know
	// what this pod let through. Their leases end and their cached
	// refusals are dropped, so that a changed limit or rule applies to the
	// next request.
	l, err := a.newLimiter(next.Limits, a.limiter.cur.Load())
	if err != nil {
		return err
	}
	// Rules take their defaults from the limits section.
	if err := a.sync.SetBase(next.Tenants, next.Rules); err != nil {
		l.Close()
		return err
	}
	if err := a.sync.SetPolicyBase(next.Policies, next.Limits.CatalogDefaults()); err != nil {
		l.Close()
		return err
	}
	a.limiter.swap(l)
	if ms, ok := a.store.(*store.MemoryStore); ok {
		ms.SetMaxKeys(next.Limits.MaxKeys)
	}
	a.cfg.Limits, a.cfg.Tenants, a.cfg.Rules, a.cfg.Policies = next.Limits, next.Tenants, next.Rules, next.Policies
	a.onStoreFailure.Store(&next.Limits.OnStoreFailure)
	return nil
}

// isReloadable reports whether a reload applies a change of key: whether
// a section of Config that owns the key says so. Two sections share
// server (Proxy's and Admin's keys), so the key is live when one of its
// owners says so.
func isReloadable(key string) bool {
	t := reflect.TypeFor[Config]()
	for i := 0; i < t.NumField(); i++ {
		tag, squash, ok := config.FieldKey(t.Field(i))
		if !ok {
			continue
		}
		rel := key
		if !squash {
			if rel, ok = sectionKey(key, tag); !ok {
				continue
			}
		}
		lk, ok := reflect.Zero(t.Field(i).Type).Interface().(liveKeys)
		if ok && lk.LiveKey(rel) {
			return true
		}
	}
	return false
}

// sectionKey is key relative to the section named tag ("" for the section
// itself, "[0].x" for an entry of a list), and false when key is not in it.
func sectionKey(key, tag string) (string, bool) {
	rest, ok := strings.CutPrefix(key, tag)
	switch {
	case !ok:
		return "", false
	case rest == "":
		return "", true
	case rest[0] == '.':
		return rest[1:], true
	case rest[0] == '[':
		return rest, true
	}
	return "", false
}

// diffKeys lists the keys whose values differ between a and b, sorted.
func diffKeys(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// flatten lists cfg's values by their YAML key (server.listen, limits.ip);
// a list or map counts as one value under its key.
func flatten(cfg *Config) map[string]string {
	out := make(map[string]string)
	config.KeyWalk{Visit: func(k config.Key) bool {
		if !k.Section {
			out[k.Name] = leafString(k.Value)
		}
		return k.Section
	}}.WalkValue(reflect.ValueOf(*cfg), "")
	return out
}

// leafString renders a value for comparison: JSON follows pointers and sorts
// map keys, so equal configurations render equally.
func leafString(v reflect.Value) string {
	if !v.IsValid() {
		return "<nil>"
	}
	if b, err := json.Marshal(v.Interface()); err == nil {
		return string(b)
	}
	return fmt.Sprintf("%+v", v)
}
