package deadline

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/tlsconf/tlstest"
)

// The bounds below are small so that the tests are quick; every check is
// "not before the bound" (which a slow machine cannot break) and "within a
// generous while after it".
const (
	readBound  = 300 * time.Millisecond
	writeBound = 300 * time.Millisecond
	idleBound  = 600 * time.Millisecond
	eventually = 10 * time.Second
)

// serve runs a fasthttp server without timeouts of its own on a loopback
// listener bounded by tm, under the label name. It answers a request that
// failed with a timeout error 408 (as the gateway's own error handlers do),
// any other failure 400.
func serve(t *testing.T, name string, tm Timeouts, h fasthttp.RequestHandler, wrap func(net.Listener) net.Listener) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	srv := &fasthttp.Server{Handler: h, ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			ctx.Error("timeout", fasthttp.StatusRequestTimeout)
			return
		}
		ctx.Error(err.Error(), fasthttp.StatusBadRequest)
	}}
	go func() { _ = srv.Serve(Listen(ln, name, tm)) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return addr
}

func hello(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("hello") }

// counted returns, for a listener label, how many timeouts each phase has
// counted since it was called.
func counted(name string) func(phase string) uint64 {
	at := map[string]uint64{}
	c := func(phase string) *metrics.Counter {
		return metrics.GetOrCreateCounter(`sentinel_conn_timeouts_total{listener="` + name + `",phase="` + phase + `"}`)
	}
	for _, p := range []string{"read", "write", "idle"} {
		at[p] = c(p).Get()
	}
	return func(phase string) uint64 { return c(phase).Get() - at[phase] }
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// closedAfter waits for the server to close c and returns how long that took
// from start (reading and dropping what the server sends).
func closedAfter(t *testing.T, c net.Conn, start time.Time) (time.Duration, string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(eventually)))
	got, err := io.ReadAll(c)
	require.NoError(t, err, "the server did not close the connection within %s", eventually)
	return time.Since(start), string(got)
}

func get(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	_, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	var resp fasthttp.Response
	require.NoError(t, resp.Read(br))
	require.Equal(t, "hello", string(resp.Body()))
}

func TestIdleConnectionClosedAfterIdleTimeout(t *testing.T) {
	timeouts := counted("t-idle")
	addr := serve(t, "t-idle", Timeouts{Read: readBound, Write: writeBound, Idle: idleBound}, hello, nil)
	c := dial(t, addr)
	get(t, c, bufio.NewReader(c))
	answered := time.Now()
	took, _ := closedAfter(t, c, answered)
	assert.GreaterOrEqual(t, took, idleBound, "closed before idle_timeout")
	assert.Equal(t, uint64(1), timeouts("idle"))
	assert.Zero(t, timeouts("read"), "an idle keep-alive connection is bounded by idle_timeout, not read_timeout")
}

// A connection that keeps sending requests is never idle for long, however
// long it lives.
func TestBusyConnectionOutlivesIdleTimeout(t *testing.T) {
	timeouts := counted("t-busy")
	addr := serve(t, "t-busy", Timeouts{Read: readBound, Write: writeBound, Idle: 2 * time.Second}, hello, nil)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	for start := time.Now(); time.Since(start) < 5*time.Second; {
		get(t, c, br)
		time.Sleep(100 * time.Millisecond)
	}
	assert.Zero(t, timeouts("idle")+timeouts("read")+timeouts("write"))
}

// A client that connects and sends nothing has read_timeout, not the longer
// idle_timeout.
func TestSilentClientClosedAfterReadTimeout(t *testing.T) {
	timeouts := counted("t-silent")
	addr := serve(t, "t-silent", Timeouts{Read: readBound, Write: writeBound, Idle: 5 * time.Second}, hello, nil)
	start := time.Now()
	c := dial(t, addr)
	took, _ := closedAfter(t, c, start)
	assert.GreaterOrEqual(t, took, readBound)
	assert.Less(t, took, 5*time.Second, "held for idle_timeout")
	assert.Equal(t, uint64(1), timeouts("read"))
}

// A slow client that trickles its head a byte at a time is cut read_timeout
// after its first byte: each byte does not start the bound again.
//
// The client is still sending when the server closes, so the kernel may
// answer its next byte with a reset that discards the 408 before it is read
// (seen about once in a dozen runs under load). A reset is then proof of the
// cut, and the server's count of a read timeout proves what cut it; the time
// of the cut, well before the trickle ends, proves it was not extended.
func TestTricklingHeadCutAfterReadTimeout(t *testing.T) {
	timeouts := counted("t-trickle")
	addr := serve(t, "t-trickle", Timeouts{Read: readBound, Write: writeBound, Idle: 5 * time.Second}, hello, nil)
	c := dial(t, addr)
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, b := range []byte("GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 200)) {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(eventually)))
	got, err := io.ReadAll(c)
	took := time.Since(start)
	reset := errors.Is(err, syscall.ECONNRESET)
	if !reset {
		require.NoError(t, err, "the server did not close the connection within %s", eventually)
	}
	<-done
	assert.GreaterOrEqual(t, took, readBound)
	assert.Less(t, took, 4*time.Second, "the trickle extended the bound (it lasts 4.5 s)")
	assert.Equal(t, uint64(1), timeouts("read"), "the cut was not counted as a read timeout")
	if reset {
		t.Logf("the client's next byte was answered with a reset after %v; answer read before it: %q", took, got)
	}
	if !reset || len(got) > 0 {
		assert.Contains(t, string(got), "408", "the server did not see a timeout error")
	}
}

// A client that does not read its answer is cut write_timeout after the
// answer started.
func TestUnreadAnswerCutAfterWriteTimeout(t *testing.T) {
	big := strings.Repeat("x", 64<<20) // far more than the socket buffers hold
	written := make(chan time.Time, 1)
	h := func(ctx *fasthttp.RequestCtx) {
		ctx.SetBodyString(big)
		written <- time.Now()
	}
	timeouts := counted("t-write")
	addr := serve(t, "t-write", Timeouts{Read: readBound, Write: writeBound, Idle: 5 * time.Second}, h, nil)
	c := dial(t, addr)
	_, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	start := <-written
	for timeouts("write") == 0 {
		require.Less(t, time.Since(start), eventually, "the unread answer was never cut")
		time.Sleep(10 * time.Millisecond)
	}
	assert.GreaterOrEqual(t, time.Since(start), writeBound)
	took, got := closedAfter(t, c, start)
	assert.Less(t, len(got), len(big), "the whole answer was written")
	assert.GreaterOrEqual(t, took, writeBound)
}

// A hijacked connection is its new owner's: the listener's bounds no longer
// apply to it.
func TestHijackedConnectionIsTheOwners(t *testing.T) {
	h := func(ctx *fasthttp.RequestCtx) {
		ctx.Hijack(func(c net.Conn) { _, _ = io.Copy(c, c) })
	}
	timeouts := counted("t-hijack")
	addr := serve(t, "t-hijack", Timeouts{Read: readBound, Write: writeBound, Idle: readBound}, h, nil)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	_, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	var resp fasthttp.Response
	require.NoError(t, resp.Read(br))
	time.Sleep(3 * readBound)
	_, err = c.Write([]byte("ping"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(eventually)))
	got := make([]byte, 4)
	_, err = io.ReadFull(br, got)
	require.NoError(t, err, "the hijacked connection was cut")
	assert.Equal(t, "ping", string(got))
	assert.Zero(t, timeouts("idle")+timeouts("read")+timeouts("write"))
}

// Behind TLS the server still sees a TLS connection (fasthttp's IsTLS), and
// a client that stops in the middle of its handshake has read_timeout.
func TestTLSConnectionsKeepTheirState(t *testing.T) {
	pair := tlstest.Write(t, t.TempDir(), "deadline")
	cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
	require.NoError(t, err)
	wrap := func(ln net.Listener) net.Listener {
		return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
	}
	h := func(ctx *fasthttp.RequestCtx) {
		if ctx.IsTLS() && ctx.TLSConnectionState() != nil {
			ctx.SetBodyString("tls")
		}
	}
	addr := serve(t, "t-tls", Timeouts{Read: readBound, Write: writeBound, Idle: 5 * time.Second}, h, wrap)
	c := &fasthttp.Client{TLSConfig: &tls.Config{RootCAs: pair.Pool}}
	code, body, err := c.Get(nil, "https://"+addr+"/")
	require.NoError(t, err)
	assert.Equal(t, 200, code)
	assert.Equal(t, "tls", string(body))

	start := time.Now()
	raw := dial(t, addr)
	_, err = raw.Write([]byte{0x16, 0x03, 0x01}) // a handshake record that never ends
	require.NoError(t, err)
	took, _ := closedAfter(t, raw, start)
	assert.GreaterOrEqual(t, took, readBound)
	assert.Less(t, took, 5*time.Second, "a stalled handshake was held for idle_timeout")
}

// A closed listener's sweeper stops once its last connection is closed.
func TestSweeperStopsWithListenerAndConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := Listen(ln, "t-stop", Timeouts{Idle: time.Minute}).(*Listener)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	client := dial(t, ln.Addr().String())
	defer client.Close()
	c := <-accepted
	require.NoError(t, l.Close())
	select {
	case <-l.stop:
		t.Fatal("the sweeper stopped while a connection was open")
	default:
	}
	require.NoError(t, c.Close())
	select {
	case <-l.stop:
	case <-time.After(eventually):
		t.Fatal("the sweeper did not stop")
	}
}

func TestNoTimeoutsLeaveTheListenerAlone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	assert.Same(t, ln, Listen(ln, "t-none", Timeouts{}))
}

// Connections closed in any order (and twice) leave every other one where
// the sweeper finds it.
func TestConnectionsComeAndGo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := Listen(ln, "t-registry", Timeouts{Idle: time.Minute}).(*Listener)
	defer l.Close()
	const n = 3 * connShards
	accepted := make([]net.Conn, 0, n)
	for range n {
		dial(t, ln.Addr().String())
		c, err := l.Accept()
		require.NoError(t, err)
		accepted = append(accepted, c)
	}
	check := func(open int) {
		t.Helper()
		assert.Equal(t, int64(open), l.open.Load())
		total := 0
		for i := range l.shards {
			sh := &l.shards[i]
			sh.mu.Lock()
			for j, c := range sh.conns {
				assert.Equal(t, j, c.at, "a connection's index")
				assert.Same(t, sh, c.shard)
			}
			total += len(sh.conns)
			sh.mu.Unlock()
		}
		assert.Equal(t, open, total, "connections in the shards")
	}
	check(n)
	for i := 0; i < n; i += 2 {
		require.NoError(t, accepted[i].Close())
		_ = accepted[i].Close() // fasthttp may close a connection twice
	}
	check(n / 2)
	for i := n - 1; i > 0; i -= 2 {
		require.NoError(t, accepted[i].Close())
	}
	check(0)
}

// TestCloseIdle: CloseIdle ends a kept-alive connection only once it has
// waited minIdle for its next request (its server closes it without an
// answer, counted as drained, not as a timeout); a connection still
// waiting for its first request is left alone; Close is idempotent.
func TestCloseIdle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := Listen(ln, "drain_test", Timeouts{Idle: time.Minute, Read: time.Minute, Write: time.Minute}).(*Listener)
	srv := &fasthttp.Server{Handler: hello}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	drained := metrics.GetOrCreateCounter(`sentinel_conn_drain_closed_total{listener="drain_test"}`)
	idleTimeouts := counted("drain_test")

	kept := dial(t, ln.Addr().String())
	_, err = io.WriteString(kept, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(kept), nil)
	require.NoError(t, err)
	resp.Body.Close()
	fresh := dial(t, ln.Addr().String())
	eventually2(t, func() bool { return l.Serving() == 2 })

	before := drained.Get()
	assert.Equal(t, 0, l.CloseIdle(time.Hour), "not idle for an hour")
	idleSince := time.Now()
	var n int
	eventually2(t, func() bool { n += l.CloseIdle(200 * time.Millisecond); return n > 0 })
	assert.GreaterOrEqual(t, time.Since(idleSince), 200*time.Millisecond, "closed before minIdle")
	assert.Equal(t, 1, n)
	took, got := closedAfter(t, kept, time.Now())
	assert.Empty(t, got, "closed without an answer")
	assert.Less(t, took, eventually)
	assert.Equal(t, uint64(1), drained.Get()-before)
	assert.Equal(t, uint64(0), idleTimeouts("idle"), "a drain close is no timeout")

	assert.Equal(t, 0, l.CloseIdle(0), "a connection without a request yet is left to the read timeout")
	_, err = io.WriteString(fresh, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	resp, err = http.ReadResponse(bufio.NewReader(fresh), nil)
	require.NoError(t, err, "the fresh connection still serves")
	resp.Body.Close()

	require.NoError(t, l.Close())
	assert.NoError(t, l.Close(), "a second Close does nothing")
}

// eventually2 polls cond every 10ms for up to eventually.
func eventually2(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(eventually); !cond(); time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(end), "condition not met within %v", eventually)
	}
}
