package deadline

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

const sweepTick = 20 * time.Millisecond

// pair returns a client connection wrapped by s and the server's end of it.
func pair(t *testing.T, s *Sweeper) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server = <-accepted
	client = s.Wrap(c)
	// A sweeper that never cuts fails the test instead of hanging it.
	stop := time.AfterFunc(eventually, func() { client.Close(); server.Close() })
	t.Cleanup(func() { stop.Stop(); client.Close(); server.Close() })
	return client, server
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestSweeperEndsABlockedReadAtItsDeadline(t *testing.T) {
	client, _ := pair(t, NewSweeper(sweepTick))
	start := time.Now()
	require.NoError(t, client.SetReadDeadline(start.Add(150*time.Millisecond)))
	_, err := client.Read(make([]byte, 1))
	took := time.Since(start)
	assert.True(t, isTimeout(err), "not a timeout error: %v", err)
	assert.GreaterOrEqual(t, took, 150*time.Millisecond, "cut before its deadline")
	assert.Less(t, took, eventually)

	// Every later read of an expired deadline fails at once, as on a socket.
	_, err = client.Read(make([]byte, 1))
	assert.True(t, isTimeout(err))
}

func TestSweeperEndsABlockedWriteAtItsDeadline(t *testing.T) {
	client, _ := pair(t, NewSweeper(sweepTick)) // the server never reads
	start := time.Now()
	require.NoError(t, client.SetWriteDeadline(start.Add(150*time.Millisecond)))
	big := make([]byte, 1<<20)
	var err error
	for err == nil && time.Since(start) < eventually {
		_, err = client.Write(big)
	}
	assert.True(t, isTimeout(err), "not a timeout error: %v", err)
	assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
}

// A read started after its deadline has passed fails, even with data
// waiting, as on a socket.
func TestSweeperReadAfterItsDeadlineFails(t *testing.T) {
	client, server := pair(t, NewSweeper(sweepTick))
	require.NoError(t, client.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	time.Sleep(50*time.Millisecond + 3*sweepTick)
	_, err := server.Write([]byte("a"))
	require.NoError(t, err)
	_, err = client.Read(make([]byte, 1))
	assert.True(t, isTimeout(err), "read past its deadline: %v", err)
}

// A deadline moved later before it passes holds; a connection whose read
// was cut reads again once a new deadline is set.
func TestSweeperFollowsNewDeadlines(t *testing.T) {
	client, server := pair(t, NewSweeper(sweepTick))
	require.NoError(t, client.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	require.NoError(t, client.SetReadDeadline(time.Now().Add(eventually)))
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = server.Write([]byte("a"))
	}()
	b := make([]byte, 1)
	_, err := client.Read(b)
	require.NoError(t, err, "the earlier deadline cut the read")

	require.NoError(t, client.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err = client.Read(b)
	require.True(t, isTimeout(err), "not a timeout error: %v", err)

	require.NoError(t, client.SetReadDeadline(time.Time{}))
	_, err = server.Write([]byte("b"))
	require.NoError(t, err)
	_, err = client.Read(b)
	require.NoError(t, err, "the cut outlived the new deadline")
	assert.Equal(t, "b", string(b))
}

// A deadline in the past wakes a read blocked without one (the usual way to
// interrupt a reader).
func TestSweeperPastDeadlineWakesABlockedRead(t *testing.T) {
	client, _ := pair(t, NewSweeper(time.Minute)) // no sweep during the test
	done := make(chan error, 1)
	go func() {
		_, err := client.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, client.SetReadDeadline(time.Now().Add(-time.Second)))
	select {
	case err := <-done:
		assert.True(t, isTimeout(err), "not a timeout error: %v", err)
	case <-time.After(eventually):
		t.Fatal("the blocked read was not woken")
	}
}

// A fasthttp client on wrapped connections gets its ErrTimeout from a
// server that never answers, and its answers from one that does.
func TestSweeperUnderHostClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	stall := make(chan struct{})
	var release sync.Once
	// A sweeper that never cuts lets the stalled answer come (and the test
	// fail) instead of hanging the test.
	watchdog := time.AfterFunc(eventually, func() { release.Do(func() { close(stall) }) })
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/stall" {
			<-stall
		}
		hello(ctx)
	}}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		watchdog.Stop()
		release.Do(func() { close(stall) })
		_ = srv.Shutdown()
	}()
	s := NewSweeper(sweepTick)
	client := &fasthttp.HostClient{Addr: ln.Addr().String(), DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
		c, err := fasthttp.DialTimeout(addr, timeout)
		if err != nil {
			return nil, err
		}
		return s.Wrap(c), nil
	}}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	for range 3 {
		req.SetRequestURI("http://" + ln.Addr().String() + "/")
		require.NoError(t, client.DoTimeout(req, resp, time.Second))
		assert.Equal(t, "hello", string(resp.Body()))
	}
	req.SetRequestURI("http://" + ln.Addr().String() + "/stall")
	start := time.Now()
	err = client.DoTimeout(req, resp, 200*time.Millisecond)
	assert.ErrorIs(t, err, fasthttp.ErrTimeout)
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	assert.Less(t, time.Since(start), eventually)
}

// The sweeper's goroutine runs only while a wrapped connection is open.
func TestSweeperStopsWithItsLastConnection(t *testing.T) {
	s := NewSweeper(sweepTick)
	client, _ := pair(t, s)
	require.NoError(t, client.Close())
	for deadline := time.Now().Add(eventually); ; {
		s.mu.Lock()
		running := s.running
		s.mu.Unlock()
		if !running {
			break
		}
		require.True(t, time.Now().Before(deadline), "the sweeper still runs with no connection")
		time.Sleep(sweepTick)
	}
	again, _ := pair(t, s)
	require.NoError(t, again.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err := again.Read(make([]byte, 1))
	assert.True(t, isTimeout(err), "a new connection is not swept: %v", err)
}

// TestSweeperBodyIdle: under Body, a read that gets bytes within Idle
// goes on past the request's read deadline; one that waits longer than
// Idle is cut and reported once as idle; the owner's next read deadline
// ends the body's bounds.
func TestSweeperBodyIdle(t *testing.T) {
	client, server := pair(t, NewSweeper(sweepTick))
	start := time.Now()
	require.NoError(t, client.SetReadDeadline(start.Add(100*time.Millisecond)), "the head's deadline")
	var cuts []bool
	require.True(t, Body(client.LocalAddr(), BodyLimits{Idle: 200 * time.Millisecond, OnCut: func(idle bool) { cuts = append(cuts, idle) }}))
	buf := make([]byte, 1)
	for i := range 4 { // 4 × 60ms: past the head's deadline, each within Idle
		time.Sleep(60 * time.Millisecond)
		_, err := server.Write([]byte{'x'})
		require.NoError(t, err)
		_, err = client.Read(buf)
		require.NoError(t, err, "read %d, %v after the head", i, time.Since(start))
	}
	stalled := time.Now()
	_, err := client.Read(buf)
	took := time.Since(stalled)
	assert.True(t, isTimeout(err), "not a timeout error: %v", err)
	assert.GreaterOrEqual(t, took, 200*time.Millisecond, "cut before Idle")
	_, err = client.Read(buf)
	assert.True(t, isTimeout(err))
	assert.Equal(t, []bool{true}, cuts, "reported once, as idle")
}

// TestSweeperBodyEnd: End bounds the whole body however live it is, and
// the cut is reported as not idle.
func TestSweeperBodyEnd(t *testing.T) {
	client, server := pair(t, NewSweeper(sweepTick))
	var cuts []bool
	end := time.Now().Add(250 * time.Millisecond)
	require.True(t, Body(client.LocalAddr(), BodyLimits{Idle: time.Second, End: end, OnCut: func(idle bool) { cuts = append(cuts, idle) }}))
	buf := make([]byte, 1)
	var err error
	for err == nil {
		if _, werr := server.Write([]byte{'x'}); werr != nil {
			break
		}
		_, err = client.Read(buf)
		time.Sleep(20 * time.Millisecond)
	}
	assert.True(t, isTimeout(err), "not a timeout error: %v", err)
	assert.False(t, time.Now().Before(end), "cut before End")
	assert.Equal(t, []bool{false}, cuts)
}

// TestSweeperBodyEndsWithNextDeadline: a read deadline set by the owner
// (its next request) replaces the body's bounds; Body refuses an address
// that is not a wrapped connection's.
func TestSweeperBodyEndsWithNextDeadline(t *testing.T) {
	client, server := pair(t, NewSweeper(sweepTick))
	cut := false
	require.True(t, Body(client.LocalAddr(), BodyLimits{Idle: time.Hour, OnCut: func(bool) { cut = true }}))
	start := time.Now()
	require.NoError(t, client.SetReadDeadline(start.Add(100*time.Millisecond)))
	_, err := client.Read(make([]byte, 1))
	assert.True(t, isTimeout(err), "the new deadline holds, not the body's hour: %v", err)
	assert.False(t, cut, "a request's deadline is no body cut")
	assert.False(t, Body(server.LocalAddr(), BodyLimits{Idle: time.Second}))
}
