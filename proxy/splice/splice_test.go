package splice

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pipePair is a spliced pair's two far ends: what the client and the
// upstream hold.
func pipePair(t *testing.T, u *Set, upstreamFirst string, idle time.Duration) (client, upstream net.Conn, done chan struct{}) {
	t.Helper()
	client, clientNear := net.Pipe()
	upstream, upstreamNear := net.Pipe()
	t.Cleanup(func() { client.Close(); upstream.Close() })
	done = make(chan struct{})
	br := bufio.NewReader(strings.NewReader(upstreamFirst))
	go func() {
		u.Splice(clientNear, upstreamNear, br, idle)
		close(done)
	}()
	return client, upstream, done
}

func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	require.NoError(t, err)
	return string(b)
}

func waitDone(t *testing.T, done chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Splice did not return")
	}
}

func TestSpliceBothWays(t *testing.T) {
	var u Set
	client, upstream, done := pipePair(t, &u, "early", time.Minute)
	assert.Equal(t, "early", readN(t, client, 5), "bytes read with the 101 come first")
	go func() { _, _ = upstream.Write([]byte("down")) }()
	assert.Equal(t, "down", readN(t, client, 4))
	go func() { _, _ = client.Write([]byte("up")) }()
	assert.Equal(t, "up", readN(t, upstream, 2))
	before := closedClient.Get()
	client.Close()
	waitDone(t, done)
	assert.EqualValues(t, 1, closedClient.Get()-before)
}

func TestSpliceIdle(t *testing.T) {
	var u Set
	_, _, done := pipePair(t, &u, "", 50*time.Millisecond)
	before := closedIdle.Get()
	waitDone(t, done)
	assert.EqualValues(t, 1, closedIdle.Get()-before)
}

func TestCloseAll(t *testing.T) {
	var u Set
	_, _, done := pipePair(t, &u, "", time.Minute)
	require.Eventually(t, func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		return len(u.conns) == 1
	}, 5*time.Second, time.Millisecond)
	u.CloseAll()
	waitDone(t, done)
	// A pair spliced after CloseAll is closed at once.
	_, _, late := pipePair(t, &u, "", time.Minute)
	waitDone(t, late)
}
