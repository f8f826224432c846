package parseerr

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// Kinds of unreadable request heads, the values of
// sentinel_proxy_parse_errors_total{kind}.
const (
	headTLS           = "tls"
	headURITooLong    = "uri_too_long"
	headFieldsTooLong = "headers_too_large"
	headMalformed     = "malformed"
)

var (
	parseErrTLS       = parseErrors(headTLS)
	parseErrURI       = parseErrors(headURITooLong)
	parseErrFields    = parseErrors(headFieldsTooLong)
	parseErrMalformed = parseErrors(headMalformed)
)

func parseErrors(kind string) *metrics.Counter {
	return metrics.NewCounter(`sentinel_proxy_parse_errors_total{kind="` + kind + `"}`)
}

// tlsMethod is how fasthttp quotes a TLS record taken for a method: a
// handshake record (0x16) of TLS 1.x (0x03).
const tlsMethod = `method "\x16\x03`

// isTLSHandshake tells whether a read error comes from a TLS ClientHello:
// the connection's sniffing (Sniff), or fasthttp taking the record for a
// method.
func isTLSHandshake(msg string) bool {
	return strings.Contains(msg, tlsOnPlainText) || strings.Contains(msg, tlsMethod)
}

// Answer counts err, an error of fasthttp's reading a request, by kind
// when it is about the request's head, and returns the answer to a head
// over the read buffer: 431, or 414 when the request line did not fit. For
// any other error status is 0: the caller answers it as it answers the
// other unreadable requests (timeouts, bodies).
func Answer(err error) (status int, msg string) {
	var small *fasthttp.ErrSmallBuffer
	text := err.Error()
	switch {
	case errors.As(err, &small):
		if !requestLineEnded(text) {
			parseErrURI.Inc()
			return fasthttp.StatusRequestURITooLong, "request URI larger than the read buffer"
		}
		parseErrFields.Inc()
		return fasthttp.StatusRequestHeaderFieldsTooLarge, "request headers larger than the read buffer"
	case isTLSHandshake(text):
		parseErrTLS.Inc()
	case strings.Contains(text, "error when reading request headers"):
		parseErrMalformed.Inc()
	}
	return 0, ""
}

// requestLineEnded tells, from fasthttp's quote of the buffer in a small
// buffer error, whether the request line ended within the buffer: if it did,
// the headers are what did not fit. The quote keeps the buffer's first and
// last 200 bytes, so a request line longer than that followed by one huge
// header reads as a long URI.
func requestLineEnded(msg string) bool {
	i := strings.Index(msg, "contents: ")
	return i >= 0 && strings.Contains(msg[i:], `\n`)
}

// Log is the proxy server's fasthttp Logger: it logs what fasthttp reports
// without the request bytes it quotes, at most rate lines a second.
type Log struct {
	log  *slog.Logger
	rate int // lines a second

	mu         sync.Mutex
	second     int64 // unix second of the current budget
	lines      int   // lines logged in it
	suppressed int   // lines dropped since the last summary
}

// NewLog returns a Log that writes to log at most rate lines a second
// (server.parse_error_log_rate) and, for each second it dropped lines in,
// one line with their count.
func NewLog(log *slog.Logger, rate int) *Log {
	return &Log{log: log, rate: rate}
}

// Printf logs one fasthttp message. A connection error is reduced to its
// kind and the peer's address; a TLS handshake is one short line.
func (l *Log) Printf(format string, args ...any) {
	msg, attrs := describeLogLine(format, args)
	now := time.Now().Unix()
	l.mu.Lock()
	if now != l.second {
		l.second, l.lines = now, 0
	}
	ok := l.lines < l.rate
	if ok {
		l.lines++
	} else {
		if l.suppressed == 0 {
			time.AfterFunc(time.Until(time.Unix(now+1, 0)), l.summarize)
		}
		l.suppressed++
	}
	l.mu.Unlock()
	if ok {
		l.log.Warn(msg, attrs...)
	}
}

// summarize logs how many lines were dropped.
func (l *Log) summarize() {
	l.mu.Lock()
	n := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	if n > 0 {
		l.log.Warn("proxy: more unreadable requests, not logged (server.parse_error_log_rate)", "suppressed", n)
	}
}

// connErrorFormat is the format of fasthttp's per-connection error line,
// with the local address, the peer's and the error.
const connErrorFormat = "error when serving connection %q<->%q: %v"

// describeLogLine turns a fasthttp log call into a message and attributes
// that hold nothing the client sent but its address.
func describeLogLine(format string, args []any) (string, []any) {
	if format != connErrorFormat || len(args) != 3 {
		return "proxy: " + fmt.Sprintf(format, args...), nil
	}
	peer := fmt.Sprint(args[1])
	err, _ := args[2].(error)
	if err == nil {
		return "proxy: connection error", []any{"peer", peer}
	}
	msg := err.Error()
	if isTLSHandshake(msg) {
		return "proxy: TLS handshake on a plain-HTTP port", []any{"peer", peer}
	}
	return "proxy: unreadable request", []any{"peer", peer, "error", errorKind(msg)}
}

// errorKind keeps the part of a fasthttp error message before anything it
// quotes from the request ("malformed mime header: missing colon").
func errorKind(msg string) string {
	for _, cut := range []string{`"`, ": buffer size=", " in "} {
		if i := strings.Index(msg, cut); i >= 0 {
			msg = msg[:i]
		}
	}
	return strings.TrimRight(msg, ": ")
}
