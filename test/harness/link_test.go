package harness

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// ping sends PING on conn and returns the reply line, or the error.
func ping(conn net.Conn) (string, error) {
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(conn).ReadString('\n')
}

func dialPing(t *testing.T, addr string) (string, error) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	return ping(conn)
}

// A link relays to the real redis-server; Cut breaks the open connection
// and refuses new ones, Restore lets them through again, and Slow delays
// every relayed read (a PING's round trip crosses it twice).
func TestLinkCutRestoreSlow(t *testing.T) {
	srv := redistest.Start(t)
	l := Listen(t, srv.Addr)
	open, err := net.Dial("tcp", l.Addr())
	require.NoError(t, err)
	defer open.Close()
	reply, err := ping(open)
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", reply)

	l.Cut()
	_, err = ping(open)
	require.Error(t, err, "a connection open at the cut is broken")
	_, err = dialPing(t, l.Addr())
	require.Error(t, err, "a new connection is refused while cut")

	l.Restore()
	reply, err = dialPing(t, l.Addr())
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", reply)

	const d = 100 * time.Millisecond
	l.Slow(d)
	start := time.Now()
	reply, err = dialPing(t, l.Addr())
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", reply)
	require.GreaterOrEqual(t, time.Since(start), 2*d, "the request and the reply each wait d")
}
