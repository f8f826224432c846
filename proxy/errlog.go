package proxy

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

// Requests fasthttp cannot read.
//
// fasthttp describes a request it could not parse with the request's head
// quoted in the error (Authorization and API key values included), and logs
// that error once per connection. The proxy's ErrorHandler answers such
// requests (431/414 for a head over the read buffer) and counts them by
// kind; the Logger below logs them without the quoted part, at most
// server.parse_error_log_rate lines a second, and sums up the rest in one
// line.

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
// the connection's sniffing (sniff.go), or fasthttp taking the record for a
// method.
func isTLSHandshake(msg string) bool {
	return strings.Contains(msg, tlsOnPlainText) || strings.Contains(msg, tlsMethod)
}

// headError answers a request whose head could not be read and counts it;
// false for the other read errors (timeouts, bodies), left to handleError.
func (s *Server) headError(ctx *fasthttp.RequestCtx, err error) bool {
	var small *fasthttp.ErrSmallBuffer
	msg := err.Error()
	switch {
	case errors.As(err, &small):
		clientFaultMalformed.Inc()
		status, text := fasthttp.StatusRequestHeaderFieldsTooLarge, "request headers larger than the read buffer"
		if !requestLineEnded(msg) {
			status, text = fasthttp.StatusRequestURITooLong, "request URI larger than the read buffer"
			parseErrURI.Inc()
		} else {
			parseErrFields.Inc()
		}
		var id [maxRequestIDLen]byte
		s.writeProblem(ctx, status, text, s.ids.appendID(id[:0]))
		ctx.SetConnectionClose()
		return true
	case isTLSHandshake(msg):
		parseErrTLS.Inc()
	case strings.Contains(msg, "error when reading request headers"):
		parseErrMalformed.Inc()
	}
	return false
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

// errorLog is the proxy server's fasthttp Logger.
type errorLog struct {
	log  *slog.Logger
	rate int // lines a second

	mu         sync.Mutex
	second     int64 // unix second of the current budget
	lines      int   // lines logged in it
	suppressed int   // lines dropped since the last summary
}

func newErrorLog(log *slog.Logger, rate int) *errorLog {
	return &errorLog{log: log, rate: rate}
}

// Printf logs one fasthttp message. A connection error is reduced to its
// kind and the peer's address; a TLS handshake is one short line.
func (l *errorLog) Printf(format string, args ...any) {
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
func (l *errorLog) summarize() {
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
