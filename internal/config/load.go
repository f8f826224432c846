// Package config loads a configuration struct from a YAML file and
// environment variables: every key is overridable by PREFIX_<KEY> (its YAML
// path in upper case, dots as underscores), a value that does not decode or
// a key that no field reads is named with what is wrong and, for a mistyped
// key, the known key closest to it. It knows nothing of the sections it
// loads: each is defaulted and validated by the package that owns it,
// through the Finish function the caller passes.
package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/agnivade/levenshtein"
	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// Options say how Load reads a configuration of type T.
type Options[T any] struct {
	// EnvPrefix is the prefix of the environment variables that override
	// keys (SENTINEL: SENTINEL_SERVER_LISTEN overrides server.listen);
	// PREFIX_CONFIG is left to the caller. Required.
	EnvPrefix string
	// Annotate may rewrite the lines of decode errors ("key: what is
	// wrong") with what the file holds around the key, such as the name of
	// the list entry the key is in. raw is the file and environment as
	// read. Optional.
	Annotate func(lines []string, raw map[string]any)
	// Finish fills the defaults of a decoded configuration and validates
	// it; its error's lines start with the key they name. Optional.
	Finish func(*T) error
}

// Load reads the YAML file at path (empty: defaults only), applies the
// environment overrides in environ ("NAME=value" entries), decodes into a
// T and calls opts.Finish. Every error names its key, and the environment
// variable that set it when one did; all the file's decode errors and
// unknown keys are reported together.
func Load[T any](path string, environ []string, opts Options[T]) (*T, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	if path != "" {
		v.SetConfigFile(path)
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("cannot read config %q: %w", path, err)
		}
	}
	fromEnv, err := applyEnv(v, environ, opts.EnvPrefix, reflect.TypeFor[T]())
	if err != nil {
		return nil, err
	}
	var cfg T
	var md mapstructure.Metadata
	err = v.Unmarshal(&cfg, viper.DecodeHook(decodeHooks), func(dc *mapstructure.DecoderConfig) {
		dc.Metadata = &md
	})
	if err == nil {
		if lines := unknownKeys(&md, nil, reflect.TypeFor[T]()); len(lines) > 0 {
			return nil, errors.New(strings.Join(lines, "\n"))
		}
		if opts.Finish != nil {
			if err := opts.Finish(&cfg); err != nil {
				return nil, fromEnvError(err, fromEnv)
			}
		}
		return &cfg, nil
	}
	lines, bad := decodeMessages(err, fromEnv)
	if opts.Annotate != nil {
		opts.Annotate(lines, v.AllSettings())
	}
	lenient, md := decodeLeniently[T](v)
	lines = append(lines, unknownKeys(&md, bad, reflect.TypeFor[T]())...)
	lines = append(lines, validationDespiteErrors(lenient, bad, fromEnv, opts.Finish)...)
	return nil, errors.New(strings.Join(lines, "\n"))
}

// validationDespiteErrors runs finish on cfg, a configuration decoded with
// the values that did not decode left unset, and returns its lines but
// those about a key that did not decode (bad), which would be about the
// value put in its place: a file's other mistakes are then reported in the
// same run as its decode errors, not once those are fixed.
func validationDespiteErrors[T any](cfg *T, bad map[string]bool, fromEnv map[string]string, finish func(*T) error) []string {
	if finish == nil {
		return nil
	}
	err := finish(cfg)
	if err == nil {
		return nil
	}
	var lines []string
	for _, line := range strings.Split(fromEnvError(err, fromEnv).Error(), "\n") {
		key, _, _ := strings.Cut(line, ": ")
		if !underBadKey(key, bad) {
			lines = append(lines, line)
		}
	}
	return lines
}

// underBadKey reports whether key is one of bad or inside one of them
// (bad limits names limits.tenant; a bad policies[0].limits names
// policies[0].limits[1].window).
func underBadKey(key string, bad map[string]bool) bool {
	for k := range bad {
		if key == k || strings.HasPrefix(key, k+".") || strings.HasPrefix(key, k+"[") {
			return true
		}
	}
	return false
}

// envError is a validation error whose lines name the environment variable
// that set their key; Unwrap gives the validation error.
type envError struct {
	err  error
	text string
}

func (e *envError) Error() string { return e.text }
func (e *envError) Unwrap() error { return e.err }

// fromEnvError adds "(from PREFIX_...)" to each line of err whose key (or
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

// applyEnv sets every PREFIX_* variable that names a key of t. Viper's
// AutomaticEnv only consults the environment for keys it already knows, and
// a key absent from the file is unknown to it, so the keys are derived from
// t instead. Keys inside maps (upstreams.NAME.x) are reachable only when
// NAME is in the file, and then every key of its struct is. It returns the
// variable that set each key.
func applyEnv(v *viper.Viper, environ []string, prefix string, t reflect.Type) (map[string]string, error) {
	env := make(map[string]string)
	for _, kv := range environ {
		k, val, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, prefix+"_") {
			env[k] = val
		}
	}
	if len(env) == 0 {
		return nil, nil
	}
	keys := LeafKeys(t, "")
	keys = append(keys, mapEntryKeys(v, t)...)
	keys = append(keys, v.AllKeys()...)
	seen := make(map[string]bool, len(keys))
	fromEnv := make(map[string]string)
	for _, key := range keys {
		name := envName(prefix, key)
		if val, ok := env[name]; ok && !seen[name] {
			seen[name] = true
			fromEnv[key] = name
			v.Set(key, val)
		}
	}
	var unknown []string
	for name := range env {
		if !seen[name] && name != prefix+"_CONFIG" {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		return nil, unknownEnvError(unknown, keys, prefix)
	}
	return fromEnv, nil
}

// unknownEnvError names the variables that name no key, one a line, each
// with the variable closest to it (within two edits) that does, as a
// mistyped file key is named with the key it may mean.
func unknownEnvError(unknown, keys []string, prefix string) error {
	sort.Strings(unknown)
	names := make([]string, 0, len(keys))
	for _, key := range keys {
		names = append(names, envName(prefix, key))
	}
	lines := make([]string, len(unknown))
	for i, name := range unknown {
		lines[i] = "environment: " + name + " names no config key"
		best, bestD := "", 3
		for _, n := range names {
			if d := levenshtein.ComputeDistance(name, n); d > 0 && d < bestD {
				best, bestD = n, d
			}
		}
		if best != "" {
			lines[i] += "; did you mean " + best + "?"
		}
	}
	return errors.New(strings.Join(lines, "\n"))
}

// envName is the variable that overrides key: SENTINEL_SERVER_LISTEN for
// server.listen.
func envName(prefix, key string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// mapEntryKeys lists the keys of the entries that the file names in t's
// maps of structs: upstreams.api.x for every field x of a pool when the file
// has upstreams.api.
func mapEntryKeys(v *viper.Viper, t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, squash, ok := FieldKey(f)
		if !ok || squash || f.Type.Kind() != reflect.Map || f.Type.Elem().Kind() != reflect.Struct {
			continue
		}
		for name := range v.GetStringMap(tag) {
			keys = append(keys, LeafKeys(f.Type.Elem(), tag+"."+name)...)
		}
	}
	return keys
}

// unknownKeys names the keys that no field of t reads, with the known key
// closest to each when one is within two edits. Two squashed sections may
// share a key's parent (the proxy's and the admin listener's keys both
// under server), so a key is unknown only when it is left unused by every
// section that reads its parent; a key whose value did not decode (bad) is
// not unknown.
func unknownKeys(md *mapstructure.Metadata, bad map[string]bool, t reflect.Type) []string {
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
			known = KnownKeys(t)
		}
		line := k + ": unknown key"
		if s := Suggest(k, known); s != "" {
			line += "; did you mean " + s + "?"
		}
		lines = append(lines, line)
	}
	return lines
}
