// Package logx sets up the process's log/slog logger from the log section of
// the configuration (format, level, access log) and offers a throttle for
// lines that a failure or a flood could repeat many times a second.
package logx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
)

// Config is the YAML section `log`.
type Config struct {
	// Format is "text" (default: key=value lines) or "json" (one JSON
	// object a line).
	Format Format `mapstructure:"format"`
	// Level is the least severe level written: debug, info (default), warn
	// or error. It can change on reload.
	Level Level `mapstructure:"level"`
	// Access writes one line per proxied request (the access log). Default
	// false.
	Access bool `mapstructure:"access"`
	// AccessRefusals caps the access log lines of refused requests (429,
	// 503 shed) per second; the lines over the cap are counted and summed
	// up in one line a second. Default 100.
	AccessRefusals int `mapstructure:"access_refusals_per_second"`
}

// Format is log.format: "text" or "json". It decodes from its name, in
// any case.
type Format string

// Formats of log.format.
const (
	FormatText Format = "text"
	FormatJSON Format = "json"
)

// ParseFormat returns the format of a name of log.format, in any case.
func ParseFormat(name string) (Format, error) {
	return confutil.OneOf(strings.ToLower(name), FormatText, FormatJSON)
}

// UnmarshalText parses a name; empty text leaves the default.
func (f *Format) UnmarshalText(text []byte) error {
	return confutil.UnmarshalName(f, text, ParseFormat)
}

// Level is log.level: "debug", "info", "warn" or "error". It decodes from
// its name, in any case.
type Level string

var levels = map[Level]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// ParseLevel returns the level of a name of log.level, in any case.
func ParseLevel(name string) (Level, error) {
	l := Level(strings.ToLower(name))
	if _, ok := levels[l]; !ok {
		return "", fmt.Errorf("%q is not one of debug, info, warn, error", l)
	}
	return l, nil
}

// UnmarshalText parses a name; empty text leaves the default.
func (l *Level) UnmarshalText(text []byte) error {
	return confutil.UnmarshalName(l, text, ParseLevel)
}

// LiveKey reports whether a changed key of the section (after "log.")
// applies on a reload: the level only, a slog.LevelVar the handler reads;
// the format and the access log are set up once at start.
func (Config) LiveKey(key string) bool { return key == "level" }

// DefaultAccessRefusals is the default of log.access_refusals_per_second.
const DefaultAccessRefusals = 100

// SetDefaults fills zero values with the defaults.
func (c *Config) SetDefaults() {
	if c.Format == "" {
		c.Format = FormatText
	}
	if c.Level == "" {
		c.Level = "info"
	}
	if c.AccessRefusals == 0 {
		c.AccessRefusals = DefaultAccessRefusals
	}
}

// Validate checks every key; the error joins one line per bad key.
func (c *Config) Validate() error {
	var errs []error
	// A value set in Go was not decoded: the same parsers check it (and
	// write it in lower case).
	var err error
	if c.Format, err = ParseFormat(string(c.Format)); err != nil {
		errs = append(errs, fmt.Errorf("log.format: %w", err))
	}
	if c.Level, err = ParseLevel(string(c.Level)); err != nil {
		errs = append(errs, fmt.Errorf("log.level: %w", err))
	}
	if c.AccessRefusals < 0 {
		errs = append(errs, fmt.Errorf("log.access_refusals_per_second: %d is negative", c.AccessRefusals))
	}
	return errors.Join(errs...)
}

// SlogLevel is Level as a slog.Level (info for an unknown name).
func (c *Config) SlogLevel() slog.Level { return levels[c.Level] }

// New returns a logger writing to w in cfg's format at the level held by
// level, which the caller may change later (a reload of log.level).
func New(cfg Config, w io.Writer, level *slog.LevelVar) *slog.Logger {
	level.Set(cfg.SlogLevel())
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Format == FormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Throttle lets at most n events a second through; the events it holds back
// are counted and reported by the next event that passes (Allow's second
// result). It is safe for concurrent use and allocates nothing.
type Throttle struct {
	n int

	mu         sync.Mutex
	second     int64 // unix second of the current count
	count      int   // events let through in second
	suppressed int   // events held back since the last one let through
}

// NewThrottle returns a throttle of n events a second (n <= 0: none pass).
func NewThrottle(n int) *Throttle { return &Throttle{n: n} }

// Allow reports whether the event at now may be logged and, when it may,
// how many events were held back before it.
func (t *Throttle) Allow(now time.Time) (ok bool, suppressed int) {
	sec := now.Unix()
	t.mu.Lock()
	defer t.mu.Unlock()
	if sec != t.second {
		t.second, t.count = sec, 0
	}
	if t.count >= t.n {
		t.suppressed++
		return false, 0
	}
	t.count++
	suppressed, t.suppressed = t.suppressed, 0
	return true, suppressed
}

// Printf returns a printf-style function that logs its message through
// slog.Default at level, for parts that take a Logf callback.
func Printf(level slog.Level) func(format string, args ...any) {
	return func(format string, args ...any) {
		slog.Default().Log(context.Background(), level, fmt.Sprintf(format, args...))
	}
}
