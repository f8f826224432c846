package parseerr

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestDescribeLogLineDropsTheQuotedRequest(t *testing.T) {
	peer := "192.0.2.7:4000"
	f := func(err error, wantMsg string, wantAttrs ...any) {
		t.Helper()
		msg, attrs := describeLogLine(connErrorFormat, []any{"127.0.0.1:8080", peer, err})
		assert.Equal(t, wantMsg, msg)
		assert.Equal(t, wantAttrs, attrs)
	}
	f(errors.New(`error when reading request headers: malformed mime header: missing colon "GET / HTTP/1.1\r\nAuthorization: Bearer secret\r\nBad"`),
		"proxy: unreadable request", "peer", peer, "error", "error when reading request headers: malformed mime header: missing colon")
	f(errTLSOnPlain, "proxy: TLS handshake on a plain-HTTP port", "peer", peer)
	f(errors.New(`cannot parse `+tlsMethod+`\x01"`), "proxy: TLS handshake on a plain-HTTP port", "peer", peer)
	f(nil, "proxy: connection error", "peer", peer)

	msg, attrs := describeLogLine("other %d", []any{7})
	assert.Equal(t, "proxy: other 7", msg)
	assert.Nil(t, attrs)
}

func TestErrorKind(t *testing.T) {
	assert.Equal(t, "error when reading request headers: malformed mime header: missing colon",
		errorKind(`error when reading request headers: malformed mime header: missing colon "Bad Header"`))
	assert.Equal(t, "cannot find http request method", errorKind(`cannot find http request method in "\x16\x03"`))
}

func TestLogRate(t *testing.T) {
	var out syncBuffer
	l := NewLog(slog.New(slog.NewTextHandler(&out, nil)), 3)
	for range 10 {
		l.Printf("line %d", 1)
	}
	// The second may turn between two calls; then up to twice the rate.
	n := strings.Count(out.String(), "\n")
	assert.GreaterOrEqual(t, n, 3)
	assert.LessOrEqual(t, n, 6)
	assert.Eventually(t, func() bool { return strings.Contains(out.String(), "suppressed=") },
		5*time.Second, 10*time.Millisecond, "the dropped lines are summed up")
}

// syncBuffer is a bytes.Buffer for a logger that the summary's timer
// writes to from its own goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAnswerCountsKinds(t *testing.T) {
	tls, malformed := parseErrTLS.Get(), parseErrMalformed.Get()
	status, _ := Answer(errTLSOnPlain)
	assert.Zero(t, status)
	status, _ = Answer(errors.New(`error when reading request headers: malformed mime header "x"`))
	assert.Zero(t, status)
	status, _ = Answer(errors.New("read timeout"))
	assert.Zero(t, status)
	assert.EqualValues(t, 1, parseErrTLS.Get()-tls)
	assert.EqualValues(t, 1, parseErrMalformed.Get()-malformed)
}
