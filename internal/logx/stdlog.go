package logx

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"strings"
	"sync"
)

// Libraries write to the standard log package, some of them from their
// package initializers, before main has read the configuration: the metrics
// library notes "INFO: metrics: disable exposing PSI metrics because of failed
// init: ..." on hosts without cgroup v2 pressure files, and logs later scrape
// errors the same way. Left alone, those lines come out first and in another
// format than the configured one. This package is initialized before the
// metrics library (it imports far less; a test checks the order), so its
// init holds the standard log's output back until RouteStdlog sends it,
// and everything after it, through the configured logger.

// maxEarly bounds what is held before RouteStdlog (a process that never
// calls it, such as -check, keeps at most this much).
const maxEarly = 64 << 10

var early struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

type earlyWriter struct{}

func (earlyWriter) Write(p []byte) (int, error) {
	early.mu.Lock()
	if early.buf.Len()+len(p) <= maxEarly {
		early.buf.Write(p)
	}
	early.mu.Unlock()
	return len(p), nil
}

func init() {
	log.SetFlags(0)
	log.SetOutput(earlyWriter{})
}

// RouteStdlog sends the standard log package's output to l, one record per
// line, at the level its "INFO: ", "WARN: " or "ERROR: " prefix names (info
// without one); the lines held back since the start go first. Call it once
// the configured logger exists. Note that slog.SetDefault also redirects the
// standard log, but at info level for every line: call RouteStdlog after it.
func RouteStdlog(l *slog.Logger) {
	w := &stdlogWriter{l: l}
	early.mu.Lock()
	held := append([]byte(nil), early.buf.Bytes()...)
	early.buf.Reset()
	early.mu.Unlock()
	log.SetFlags(0)
	log.SetOutput(w)
	_, _ = w.Write(held)
}

// stdlogWriter turns standard log lines into records of l.
type stdlogWriter struct{ l *slog.Logger }

func (w *stdlogWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line == "" {
			continue
		}
		level, msg := stdlogLevel(line)
		w.l.Log(context.Background(), level, msg)
	}
	return len(p), nil
}

// stdlogLevel reads the level prefix that libraries put on standard log
// lines ("ERROR: metrics: cannot ..."), and returns the line without it.
func stdlogLevel(line string) (slog.Level, string) {
	prefix, rest, ok := strings.Cut(line, ": ")
	if !ok {
		return slog.LevelInfo, line
	}
	switch prefix {
	case "INFO":
		return slog.LevelInfo, rest
	case "WARN", "WARNING":
		return slog.LevelWarn, rest
	case "ERROR", "FATAL", "PANIC":
		return slog.LevelError, rest
	}
	return slog.LevelInfo, line
}
