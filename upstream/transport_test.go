package upstream

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// stream sends method path through p as the proxy does (resp.StreamBody)
// and returns the answer, its body read, and whether it came as a stream.
func stream(t *testing.T, p *Pool, method, path string) (status int, body []byte, streamed bool, err error) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	req.Header.SetHost("client.example")
	resp.StreamBody = true
	if err = p.Do(req, resp); err != nil {
		return 0, nil, false, err
	}
	streamed = resp.IsBodyStream()
	if streamed {
		body, err = io.ReadAll(resp.BodyStream())
		require.NoError(t, resp.CloseBodyStream())
	} else {
		body = append(body, resp.Body()...)
	}
	return resp.StatusCode(), body, streamed, err
}

func TestSmallAnswersAreReadWholeLargeOnesStreamed(t *testing.T) {
	b := startBackend(t)
	_, p := testPool(t, nil, b.URL)
	for _, c := range []struct {
		query    string
		size     int
		streamed bool
	}{
		{"size=0", 0, false},
		{"size=10", 10, false},
		{"size=" + strconv.Itoa(WholeAnswerMax), WholeAnswerMax, false},
		{"size=" + strconv.Itoa(WholeAnswerMax+1), WholeAnswerMax + 1, true},
		{"size=10&chunked", 10, true}, // no length: streamed, however small
		{"size=3000000&chunked", 3000000, true},
	} {
		status, body, streamed, err := stream(t, p, "GET", "/?"+c.query)
		require.NoError(t, err, c.query)
		assert.Equal(t, 200, status, c.query)
		assert.Len(t, body, c.size, c.query)
		assert.Equal(t, c.streamed, streamed, c.query)
	}
	// No body, whatever the head says.
	status, body, streamed, err := stream(t, p, "HEAD", "/?size=100000")
	require.NoError(t, err)
	assert.Equal(t, 200, status)
	assert.Empty(t, body)
	assert.False(t, streamed)
	for _, code := range []int{204, 304} {
		b.status.Store(int32(code))
		status, body, streamed, err = stream(t, p, "GET", "/")
		require.NoError(t, err)
		assert.Equal(t, code, status)
		assert.Empty(t, body)
		assert.False(t, streamed)
	}
	assert.Equal(t, 1, p.target(b.URL).hc.ConnsCount(), "every answer gave its connection back")

	// A stream closed before its end closes its connection.
	b.status.Store(200)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI("/?size=1000000")
	req.Header.SetHost("client.example")
	resp.StreamBody = true
	require.NoError(t, p.Do(req, resp))
	_, err = resp.BodyStream().Read(make([]byte, 100))
	require.NoError(t, err)
	require.NoError(t, resp.CloseBodyStream())
	assert.Equal(t, 0, p.target(b.URL).hc.ConnsCount())
}

// rawUpstream answers every request on its connections with head, then
// writes body one byte every gap; a head with "Connection: close" ends the
// connection after its body.
func rawUpstream(t *testing.T, head string, body []byte, gap time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					var req fasthttp.Request
					if req.Read(br) != nil {
						return
					}
					if _, err := io.WriteString(c, head); err != nil {
						return
					}
					for _, b := range body {
						time.Sleep(gap)
						if _, err := c.Write([]byte{b}); err != nil {
							return
						}
					}
					if strings.Contains(head, "Connection: close") {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

func TestSlowSmallAnswerArrivesWhole(t *testing.T) {
	// 10 bytes over about 1.5 s, through a 500 ms pool timeout: each comes
	// within body_idle_timeout.
	up := rawUpstream(t, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", []byte("0123456789"), 150*time.Millisecond)
	_, p := testPool(t, func(c *PoolConfig) { c.Timeout, c.BodyIdleTimeout = 500*time.Millisecond, 400*time.Millisecond }, up)
	start := time.Now()
	status, body, streamed, err := stream(t, p, "GET", "/")
	require.NoError(t, err)
	assert.Equal(t, 200, status)
	assert.Equal(t, "0123456789", string(body))
	assert.False(t, streamed)
	assert.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond)
	assert.Zero(t, p.target(up).m.cutIdle.Get())
}

func TestStalledSmallAnswerIsCut(t *testing.T) {
	// 2 of 10 bytes, then nothing for longer than body_idle_timeout.
	up := rawUpstream(t, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", []byte("01"), 0)
	_, p := testPool(t, func(c *PoolConfig) { c.Timeout, c.BodyIdleTimeout = 2*time.Second, 300*time.Millisecond }, up)
	start := time.Now()
	_, _, _, err := stream(t, p, "GET", "/")
	took := time.Since(start)
	require.ErrorIs(t, err, ErrTimeout, "a body cut before its end fails the call: nothing was passed on yet")
	assert.GreaterOrEqual(t, took, 300*time.Millisecond)
	assert.Less(t, took, 2*time.Second, "cut by body_idle_timeout, not the pool timeout")
	assert.EqualValues(t, 1, p.target(up).m.cutIdle.Get())
	assert.Equal(t, 0, p.target(up).hc.ConnsCount(), "the connection of a cut answer is closed")
}

func TestSlowSmallAnswerIsCutAtBodyTimeout(t *testing.T) {
	// 10 bytes over about 1.5 s, each within body_idle_timeout, but the
	// whole answer bounded at 600 ms from the start.
	up := rawUpstream(t, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", []byte("0123456789"), 150*time.Millisecond)
	_, p := testPool(t, func(c *PoolConfig) {
		c.Timeout, c.BodyIdleTimeout, c.BodyTimeout = 300*time.Millisecond, time.Second, 600*time.Millisecond
	}, up)
	start := time.Now()
	_, _, _, err := stream(t, p, "GET", "/")
	took := time.Since(start)
	require.ErrorIs(t, err, ErrTimeout)
	assert.GreaterOrEqual(t, took, 600*time.Millisecond)
	assert.Less(t, took, 1400*time.Millisecond)
	assert.EqualValues(t, 1, p.target(up).m.cutTotal.Get())
	assert.Zero(t, p.target(up).m.cutIdle.Get())
}

func TestAnswerUntilCloseIsStreamed(t *testing.T) {
	// No Content-Length, not chunked: the body ends when the connection does.
	up := rawUpstream(t, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", []byte("until the end"), 0)
	_, p := testPool(t, nil, up)
	status, body, streamed, err := stream(t, p, "GET", "/")
	require.NoError(t, err)
	assert.Equal(t, 200, status)
	assert.Equal(t, "until the end", string(body))
	assert.True(t, streamed)
	assert.Equal(t, 0, p.target(up).hc.ConnsCount())
}
