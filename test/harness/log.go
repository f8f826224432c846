package harness

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// LogBuffer is a buffer that one goroutine (a logger, a child process)
// writes while the test reads it.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *LogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *LogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// CaptureLog sends the process's slog lines to a buffer until the test
// ends.
func CaptureLog(t testing.TB) *LogBuffer {
	t.Helper()
	buf := &LogBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return buf
}
