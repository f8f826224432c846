package upstream

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

func TestRoundRobinSpreadsEvenly(t *testing.T) {
	b1, b2, b3 := startBackend(t), startBackend(t), startBackend(t)
	_, p := testPool(t, nil, b1.URL, b2.URL, b3.URL)
	seen := map[string]int{}
	for range 300 {
		addr, code, err := get(t, p, "/")
		require.NoError(t, err)
		require.Equal(t, 200, code)
		seen[addr]++
	}
	assert.Equal(t, map[string]int{b1.addr: 100, b2.addr: 100, b3.addr: 100}, seen)
}

func TestLeastPendingAvoidsBusyTarget(t *testing.T) {
	b1, b2 := startBackend(t), startBackend(t)
	_, p := testPool(t, func(c *PoolConfig) { c.Balance = BalanceLeastPending }, b1.URL, b2.URL)

	// Idle targets tie, and ties rotate: an even spread.
	seen := map[string]int{}
	for range 20 {
		addr, _, err := get(t, p, "/")
		require.NoError(t, err)
		seen[addr]++
	}
	assert.Equal(t, map[string]int{b1.addr: 10, b2.addr: 10}, seen)

	// One request held on one target: every other request goes elsewhere.
	done := make(chan string, 1)
	go func() {
		addr, _, _ := get(t, p, "/block")
		done <- addr
	}()
	require.Eventually(t, func() bool { return p.Pending() == 1 }, 5*time.Second, time.Millisecond)
	busy := b1
	if p.target(b2.URL).pending.Load() == 1 {
		busy = b2
	}
	for range 20 {
		addr, _, err := get(t, p, "/")
		require.NoError(t, err)
		assert.NotEqual(t, busy.addr, addr)
	}
	close(b1.gate)
	close(b2.gate)
	assert.Equal(t, busy.addr, <-done)
}

func TestPanicModeWhenEveryTargetIsDown(t *testing.T) {
	b1, b2 := startBackend(t), startBackend(t)
	_, p := testPool(t, func(c *PoolConfig) {
		c.HealthCheck = HealthCheckConfig{Path: "/healthz", Interval: 10 * time.Millisecond, Timeout: 10 * time.Millisecond}
	}, b1.URL, b2.URL)
	p.target(b1.URL).healthy.Store(false)
	p.target(b2.URL).healthy.Store(false)
	panics := p.panics.Get()
	seen := map[string]bool{}
	for range 4 {
		addr, code, err := get(t, p, "/")
		require.NoError(t, err, "no usable target: the pool balances over all of them")
		assert.Equal(t, 200, code)
		seen[addr] = true
	}
	assert.Len(t, seen, 2, "panic mode spreads over every target")
	assert.EqualValues(t, 4, p.panics.Get()-panics)
}

func TestTimeoutOnSlowTarget(t *testing.T) {
	b := startBackend(t)
	b.delay.Store(int64(300 * time.Millisecond))
	_, p := testPool(t, func(c *PoolConfig) { c.Timeout = 50 * time.Millisecond }, b.URL)
	for _, method := range []string{fasthttp.MethodGet, fasthttp.MethodPost} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.Header.SetMethod(method)
		req.SetRequestURI("/slow")
		req.Header.SetHost("client.example")
		err := p.Do(req, resp)
		require.Error(t, err, method)
		assert.ErrorIs(t, err, ErrTimeout, method)
		assert.ErrorIs(t, err, fasthttp.ErrTimeout, method)
		var te *TargetError
		require.ErrorAs(t, err, &te)
		assert.Equal(t, b.URL, te.Target)
	}
}

func TestConnectionRefusedIsAConnectionFailure(t *testing.T) {
	down := closedURL(t)
	_, p := testPool(t, nil, down)
	_, _, err := get(t, p, "/")
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrTimeout)
	assert.NotErrorIs(t, err, ErrNoHealthy)
	var te *TargetError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, down, te.Target)
}

func TestRetryOnAnotherTargetWhenConnectFails(t *testing.T) {
	b := startBackend(t)
	_, p := testPool(t, nil, closedURL(t), b.URL)
	for _, method := range []string{fasthttp.MethodGet, fasthttp.MethodPost} {
		for range 4 {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			req.Header.SetMethod(method)
			req.SetRequestURI("/")
			req.Header.SetHost("client.example")
			req.SetBodyString("x")
			require.NoError(t, p.Do(req, resp), method)
			assert.Equal(t, 200, resp.StatusCode())
		}
	}
}

func TestTargetIsAlwaysTheConfiguredOne(t *testing.T) {
	b := startBackend(t)
	_, p := testPool(t, nil, b.URL)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.Header.SetHost("client.example")
	req.SetRequestURI("http://evil.example:1/x?y=1") // absolute-form, another host
	require.NoError(t, p.Do(req, resp))
	_, uri := b.last()
	assert.Equal(t, "/x?y=1", uri)
	assert.EqualValues(t, 1, b.hits.Load())

	// The Host header as the proxy decided is kept.
	req.Reset()
	req.SetRequestURI("/a%2Fb//c")
	req.Header.SetHost("client.example")
	require.NoError(t, p.Do(req, resp))
	host, uri := b.last()
	assert.Equal(t, "client.example", host)
	assert.Equal(t, "/a%2Fb//c", uri, "the path goes as the client sent it")

	// No Host at all: the target's.
	req.Reset()
	req.SetRequestURI("/h")
	require.NoError(t, p.Do(req, resp))
	host, _ = b.last()
	assert.Equal(t, b.addr, host)
}

func TestRequestBodyStream(t *testing.T) {
	b := startBackend(t)
	_, p := testPool(t, nil, b.URL)
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1MiB
	for _, size := range []int{len(body), -1} {             // known length, then chunked
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("/echo")
		req.Header.SetHost("client.example")
		req.SetBodyStream(bytes.NewReader(body), size)
		require.True(t, req.IsBodyStream())
		require.NoError(t, p.Do(req, resp), "size %d", size)
		assert.Equal(t, 200, resp.StatusCode())
		assert.True(t, bytes.Equal(body, resp.Body()), "size %d: echoed %d bytes", size, len(resp.Body()))
	}
}

// TestStreamingResponseThroughAProxy runs a proxy-shaped fasthttp server
// that hands its RequestCtx's response to Do with StreamBody set, and checks
// that a large answer arrives whole and the upstream connection is reused.
func TestStreamingResponseThroughAProxy(t *testing.T) {
	b := startBackend(t)
	_, p := testPool(t, nil, b.URL)
	front := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		req := fasthttp.AcquireRequest()
		defer fasthttp.ReleaseRequest(req)
		ctx.Request.Header.CopyTo(&req.Header)
		req.SetRequestURIBytes(ctx.Request.RequestURI())
		ctx.Response.StreamBody = true
		if err := p.Do(req, &ctx.Response); err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadGateway)
		}
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = front.Serve(ln) }()
	t.Cleanup(func() { _ = front.Shutdown() })

	c := &fasthttp.HostClient{Addr: ln.Addr().String()}
	for range 3 {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://front/big?size=4194304")
		require.NoError(t, c.Do(req, resp))
		require.Equal(t, 200, resp.StatusCode())
		assert.Len(t, resp.Body(), 4<<20)
	}
	assert.Equal(t, 1, p.target(b.URL).hc.ConnsCount(), "the upstream connection is reused")

	// The caller may also read the stream itself.
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI("/big?size=1048576")
	req.Header.SetHost("x")
	resp.StreamBody = true
	require.NoError(t, p.Do(req, resp))
	require.True(t, resp.IsBodyStream())
	n, err := io.Copy(io.Discard, resp.BodyStream())
	require.NoError(t, err)
	assert.EqualValues(t, 1<<20, n)
	require.NoError(t, resp.CloseBodyStream())
}

func TestErrorsAreTyped(t *testing.T) {
	assert.ErrorIs(t, ErrTimeout, fasthttp.ErrTimeout)
	e := &TargetError{Upstream: "api", Target: "http://x", Err: errors.New("boom")}
	assert.Equal(t, "upstream api: target http://x: boom", e.Error())
}

func TestBodyTimeoutsConfig(t *testing.T) {
	c := Config{"api": {Targets: []string{"http://127.0.0.1:1"}, Timeout: 5 * time.Second}}
	c.SetDefaults()
	require.NoError(t, c.Validate())
	assert.Equal(t, 5*time.Second, c["api"].BodyIdleTimeout, "body_idle_timeout defaults to the pool timeout")

	c = Config{"api": {Targets: []string{"http://127.0.0.1:1"}, Timeout: 5 * time.Second, BodyIdleTimeout: -time.Second, BodyTimeout: time.Second}}
	c.SetDefaults()
	err := c.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "upstreams.api.body_idle_timeout: -1s is not a positive duration")
	assert.Contains(t, err.Error(), "upstreams.api.body_timeout: 1s must be 0 (none) or at least upstreams.api.timeout (5s)")
}
