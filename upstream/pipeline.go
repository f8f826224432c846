package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/deadline"
)

// MaxPipeline is the largest `upstreams.NAME.pipeline`: pipelining pays off
// when many requests share a connection, so a few connections are enough.
const MaxPipeline = 64

// pipelineStall is how long a pipeline with requests in flight may go
// without an answer before new requests take connections of their own: an
// answer that takes longer holds every request behind it on its connection
// (head-of-line blocking), and one slow request, such as an expensive
// search an attacker repeats, must not hold the traffic that follows it.
// A pipelined request that took longer than this sends the requests of the
// next pipelineBackoff on connections of their own: a target answers a
// connection's requests one after another, so a target whose answers take
// 50 ms serves one pipelined connection 20 requests a second, where it
// would serve many connections in parallel. After the back-off the
// pipeline carries one request at a time (a probe, queued behind nothing)
// until one is answered within pipelineStall; a new pipeline starts so.
const (
	pipelineStall   = 20 * time.Millisecond
	pipelineBackoff = time.Second
)

// pipelineMaxAnswer bounds what a pipelined connection reads for one
// answer (give or take its read-ahead): the pipeline reads answers whole,
// and one larger than this breaks its connection and is fetched again on a
// connection of its own, streamed. Without it one large answer (a download
// on a pipelined pool, or a target that sends without end) would be held
// in memory whole.
const pipelineMaxAnswer = 1 << 20

// pipeline sends a target's GET requests without a body over at most
// `pipeline` connections, each written without waiting for the answers
// before it (HTTP/1.1 pipelining, fasthttp.PipelineClient): the requests of
// many clients leave in one write and their answers come back in one read,
// on the gateway and on the target, instead of one of each per request.
//
// What it changes for the requests it carries:
//   - Their answers are read whole into memory before they are passed on,
//     not streamed: pipeline is for upstreams with small answers. An answer
//     over pipelineMaxAnswer is fetched again on a connection of its own.
//   - An answer waits for the ones before it on its connection: a slow
//     answer delays the requests behind it (head-of-line blocking).
//   - A request whose connection broke before its answer came (the target
//     closed it, or the connection could not be made) is sent again, once,
//     on a connection of its own (the HostClient), as fasthttp does for an
//     idempotent request on a dead keep-alive connection; only the result
//     of that attempt counts against the target.
//
// A request alone in flight to the target takes the HostClient: the
// pipeline pays off only when requests overlap.
//
// HEAD (whose answer has a length but no body, which the pipelined reader
// does not know), requests with a body and every other method take the
// HostClient, as do all requests while the pipeline cannot connect (down):
// those fail at once with the connection error, so the pool's retry on
// another target and passive ejection work as without pipelining. A success
// of the target on the HostClient brings the pipeline back. New requests
// also take the HostClient while the pipeline is stalled (requests in
// flight and no answer for pipelineStall; the next answer ends the stall)
// and for pipelineBackoff after a pipelined request took longer than
// pipelineStall.
type pipeline struct {
	pc *fasthttp.PipelineClient
	// down is set while the pipeline's last attempt to connect failed;
	// reset by a success of the target (up).
	down atomic.Bool
	// inflight counts the requests in the pipeline; answered is when the
	// last answer came, or when the first request of a busy spell went in
	// (unix nanoseconds).
	inflight atomic.Int32
	answered atomic.Int64
	// stall is pipelineStall (a test on a busy machine may make it longer).
	stall time.Duration
	// slowUntil is when the back-off after a slow pipelined answer ends
	// (unix nanoseconds); until a probe is answered quickly it stays set
	// (not 0), and the pipeline takes one request at a time.
	slowUntil atomic.Int64
	// The requests answered through the pipeline (sent), sent again on a
	// connection of their own after the pipeline broke (resent), and sent
	// on the HostClient while the pipeline was down (bypassed) or stalled
	// (stalled) or nothing else was in flight to the target (idle), and
	// fetched again on their own connection for an answer over
	// pipelineMaxAnswer (large).
	sent, resent, bypassed, stalled, idle, large *metrics.Counter
}

func newPipeline(t *target, addr string, isTLS bool, cfg *PoolConfig) *pipeline {
	p := &pipeline{stall: pipelineStall}
	p.slowUntil.Store(1) // a probe first: the target's speed is not known yet
	l := `{upstream="` + escapeLabel(t.pool) + `",target="` + escapeLabel(t.url) + `",path="`
	counter := func(path string) *metrics.Counter {
		name := `sentinel_upstream_pipeline_requests_total` + l + path + `"}`
		t.m.names = append(t.m.names, name)
		return metrics.GetOrCreateCounter(name)
	}
	p.sent, p.resent, p.bypassed, p.stalled, p.idle, p.large = counter("pipelined"), counter("resent"), counter("bypassed"),
		counter("stalled"), counter("idle"), counter("large")
	p.pc = &fasthttp.PipelineClient{
		Addr:     addr,
		IsTLS:    isTLS,
		MaxConns: cfg.Pipeline,
		Dial:     p.dialer(cfg.ConnectTimeout, t.sweeper),
		// A connection left idle this long closes, as the HostClient's do.
		MaxIdleConnDuration: cfg.MaxIdleConnDuration,
		// An answer that does not come within the pool timeout breaks its
		// connection (every request behind it is sent again or times out):
		// a stuck answer must not hold the connection for good.
		ReadTimeout:              cfg.Timeout,
		WriteTimeout:             cfg.Timeout,
		DisablePathNormalizing:   true,
		NoDefaultUserAgentHeader: true,
		ReadBufferSize:           8 << 10,
		Logger:                   pipelineLogger{pool: t.pool, target: t.url},
	}
	return p
}

// takes tells whether req, sent at now, goes through the pipeline: a GET
// without a body while the pipeline is up and not stalled, and while
// another request to the target is in flight (busy). Alone, a request
// gains nothing from the pipeline and pays for its goroutine hand-offs
// (the one-connection rows of make bench-compare measure it).
func (p *pipeline) takes(req *fasthttp.Request, now int64, busy bool) bool {
	if !req.Header.IsGet() || req.IsBodyStream() || len(req.Body()) != 0 || req.Header.ConnectionClose() {
		return false
	}
	if !busy {
		p.idle.Inc()
		return false
	}
	if p.down.Load() {
		p.bypassed.Inc()
		return false
	}
	if p.inflight.Load() > 0 && (now-p.answered.Load() > int64(p.stall) || p.slowUntil.Load() != 0) ||
		now < p.slowUntil.Load() {
		p.stalled.Inc()
		return false
	}
	return true
}

// do sends req, taken at now, through the pipeline, and once more on hc
// when the pipeline broke before the answer; resp is read whole (see
// pipeline). piped tells whether the result is the pipeline's (not hc's).
// The caller reports the end with done.
func (p *pipeline) do(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response, now int64, deadline time.Time) (piped bool, err error) {
	if p.inflight.Add(1) == 1 {
		p.answered.Store(now) // a busy spell starts: no answer is late yet
	}
	stream := resp.StreamBody
	resp.StreamBody = false
	err = p.pc.DoDeadline(req, resp, deadline)
	if err == nil {
		// The answer's connection (the pipeline stamps each answer with it,
		// fasthttp's Response.ParseNetConn): its answer is complete, the next
		// one counts from here.
		if c, ok := resp.LocalAddr().(*countedAddr); ok {
			c.conn.read.Store(0)
		}
		p.sent.Inc()
		return true, nil
	}
	if _, timedOut := errorKind(err); timedOut || !time.Now().Before(deadline) {
		return true, err
	}
	// The connection broke (closed by the target, reset, never made, or
	// cut by the answer size) before this answer: the GET may not have
	// reached the target, and may be sent again.
	if errors.Is(err, errAnswerTooLarge) {
		p.large.Inc()
	} else {
		p.resent.Inc()
	}
	resp.Reset()
	resp.StreamBody = stream
	return false, hc.DoDeadline(req, resp, deadline)
}

// done ends a request that do took at start, at end, with do's results:
// an answer (err nil) ends a stall; a pipelined answer (or timeout) that
// took longer than pipelineStall starts a back-off, a quick one ends it.
func (p *pipeline) done(err error, piped bool, start, end int64) {
	if err == nil {
		p.answered.Store(end)
	}
	switch {
	case !piped:
	case end-start > int64(p.stall):
		p.slowUntil.Store(end + int64(pipelineBackoff))
	case err == nil && p.slowUntil.Load() != 0:
		p.slowUntil.Store(0) // a quick answer: the pipeline is open
	}
	p.inflight.Add(-1)
}

// up records a success of the target: the pipeline may connect again.
func (p *pipeline) up() {
	if p.down.Load() {
		p.down.Store(false)
	}
}

// dialer connects the pipeline's connections. A failed connect marks the
// pipeline down and answers a connection that fails every write: the
// PipelineClient would otherwise keep the requests already queued for it
// until their deadline (it redials in a loop and fails no request on a
// dial error), while this way they fail at once and are sent again on the
// HostClient, which reports the connect error. sw keeps the connections'
// deadlines (the PipelineClient sets one per answer).
func (p *pipeline) dialer(connectTimeout time.Duration, sw *deadline.Sweeper) fasthttp.DialFunc {
	return func(addr string) (net.Conn, error) {
		c, err := fasthttp.DialTimeout(addr, connectTimeout)
		if err != nil {
			p.down.Store(true)
			return newFailedConn(&dialError{err: err}), nil
		}
		return newCountedConn(sw.Wrap(c)), nil
	}
}

// errAnswerTooLarge cuts a pipelined connection whose answer outgrew
// pipelineMaxAnswer.
var errAnswerTooLarge = errors.New("upstream: pipelined answer over " + strconv.Itoa(pipelineMaxAnswer>>20) + " MiB")

// countedConn is a pipelined connection that counts the bytes read since
// its last complete answer (do resets the count) and fails its reads past
// pipelineMaxAnswer. Its LocalAddr leads back to it from a Response.
type countedConn struct {
	net.Conn
	read  atomic.Int64
	local *countedAddr
}

// countedAddr is a countedConn's local address.
type countedAddr struct {
	net.Addr
	conn *countedConn
}

func newCountedConn(c net.Conn) *countedConn {
	cc := &countedConn{Conn: c}
	cc.local = &countedAddr{Addr: c.LocalAddr(), conn: cc}
	return cc
}

func (c *countedConn) Read(b []byte) (int, error) {
	room := pipelineMaxAnswer + 1 - c.read.Load()
	if room <= 0 {
		return 0, errAnswerTooLarge
	}
	if int64(len(b)) > room {
		b = b[:room] // a large body is read straight into its buffer: no read may pass the bound
	}
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

func (c *countedConn) LocalAddr() net.Addr { return c.local }

// failedConn stands for a connection that could not be made: writes (and,
// to an https target, the TLS handshake) fail with the connect error; reads
// wait until it is closed (a read that failed at once would make the
// PipelineClient redial in a busy loop while no request waits).
type failedConn struct {
	err    error
	closed chan struct{}
	once   sync.Once
}

func newFailedConn(err error) *failedConn {
	return &failedConn{err: err, closed: make(chan struct{})}
}

func (c *failedConn) Read([]byte) (int, error) {
	<-c.closed
	return 0, c.err
}

func (c *failedConn) Write([]byte) (int, error) { return 0, c.err }

// Handshake fails: fasthttp takes a connection with a Handshake method for
// one that is TLS already and does not wrap it.
func (c *failedConn) Handshake() error { return c.err }

func (c *failedConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

func (c *failedConn) LocalAddr() net.Addr              { return failedAddr{} }
func (c *failedConn) RemoteAddr() net.Addr             { return failedAddr{} }
func (c *failedConn) SetDeadline(time.Time) error      { return nil }
func (c *failedConn) SetReadDeadline(time.Time) error  { return nil }
func (c *failedConn) SetWriteDeadline(time.Time) error { return nil }

type failedAddr struct{}

func (failedAddr) Network() string { return "tcp" }
func (failedAddr) String() string  { return "unconnected" }

// pipelineLogger sends the PipelineClient's messages (a connection that
// broke or could not be made, once per event) to the debug log: what they
// cost requests shows in sentinel_upstream_pipeline_requests_total.
type pipelineLogger struct{ pool, target string }

func (l pipelineLogger) Printf(format string, args ...any) {
	if slog.Default().Enabled(context.Background(), slog.LevelDebug) {
		slog.Debug("upstream pipeline", "upstream", l.pool, "target", l.target, "event", fmt.Sprintf(format, args...))
	}
}
