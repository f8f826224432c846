package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"

	"github.com/VictoriaMetrics/metrics"
)

var (
	reloadsOK     = metrics.NewCounter(`sentinel_config_reloads_total{result="applied"}`)
	reloadsFailed = metrics.NewCounter(`sentinel_config_reloads_total{result="invalid"}`)
)

// reloadable are the config keys (and key prefixes, ending in ".") that a
// reload applies without a restart. Every other changed key is reported as
// needing one.
var reloadable = []string{"limits.", "tenants", "rules", "log.level"}

// reload re-reads the configuration, validates it and applies the
// reloadable keys that changed: a new limiter for the limits section, the
// config entries of tenants and rules, log.level. It returns the changed
// keys it applied and those that need a restart. An invalid configuration
// changes nothing and is returned as the error.
func (a *app) reload() (applied, restart []string, err error) {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	if a.load == nil {
		return nil, nil, errors.New("reload: this process cannot re-read its configuration")
	}
	next, err := a.load()
	if err != nil {
		reloadsFailed.Inc()
		slog.Error("config reload failed; keeping the running configuration", "error", err.Error())
		return nil, nil, err
	}
	changed := diffKeys(flatten(a.cfg), flatten(next))
	for _, k := range changed {
		if isReloadable(k) {
			applied = append(applied, k)
		} else {
			restart = append(restart, k)
		}
	}
	if err := a.apply(next, applied); err != nil {
		reloadsFailed.Inc()
		slog.Error("config reload failed; keeping the running configuration", "error", err.Error())
		return nil, restart, err
	}
	reloadsOK.Inc()
	slog.Info("config reloaded", "applied", strings.Join(applied, ","), "restart_required", strings.Join(restart, ","))
	return applied, restart, nil
}

// apply switches the parts whose keys changed to next's sections.
func (a *app) apply(next *Config, applied []string) error {
	has := func(prefix string) bool {
		return slices.ContainsFunc(applied, func(k string) bool { return strings.HasPrefix(k, prefix) })
	}
	if has("limits.") || has("tenants") || has("rules") {
		// A new limiter starts without the old one's local buckets and
		// cached refusals, so that a changed limit or rule applies to the
		// next request; the store keeps the counts.
		l, err := a.newLimiter(next.Limits)
		if err != nil {
			return err
		}
		// Rules take their defaults from the limits section.
		if err := a.sync.SetBase(next.Tenants, next.Rules); err != nil {
			l.Close()
			return err
		}
		a.limiter.swap(l)
		a.cfg.Limits, a.cfg.Tenants, a.cfg.Rules = next.Limits, next.Tenants, next.Rules
	}
	if has("log.level") && a.logLevel != nil {
		a.logLevel.Set(next.Log.SlogLevel())
		a.cfg.Log.Level = next.Log.Level
	}
	return nil
}

func isReloadable(key string) bool {
	for _, r := range reloadable {
		if key == r || (strings.HasSuffix(r, ".") && strings.HasPrefix(key, r)) ||
			strings.HasPrefix(key, r+"[") {
			return true
		}
	}
	return false
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

// flatten lists cfg's leaf values by their YAML key (server.listen,
// limits.ip); a list or map counts as one value under its key.
func flatten(cfg *Config) map[string]string {
	out := make(map[string]string)
	flattenValue(reflect.ValueOf(*cfg), "", out)
	return out
}

func flattenValue(v reflect.Value, prefix string, out map[string]string) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		key := prefix
		if opts != "squash" && tag != "" {
			key = joinKey(prefix, tag)
		} else if opts != "squash" {
			key = joinKey(prefix, strings.ToLower(f.Name))
		}
		fv := v.Field(i)
		for fv.Kind() == reflect.Pointer && !fv.IsNil() {
			fv = fv.Elem()
		}
		if fv.Kind() == reflect.Struct && fv.Type().PkgPath() != "time" && !implementsTextUnmarshaler(fv.Type()) {
			flattenValue(fv, key, out)
			continue
		}
		out[key] = leafString(fv)
	}
}

// leafString renders a leaf value for comparison: JSON follows pointers and
// sorts map keys, so equal configurations render equally.
func leafString(v reflect.Value) string {
	if !v.IsValid() {
		return "<nil>"
	}
	if b, err := json.Marshal(v.Interface()); err == nil {
		return string(b)
	}
	return fmt.Sprintf("%+v", v)
}

func joinKey(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}
