package harness

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Link is a TCP relay on a free loopback port in front of one target
// (a redis-server, say): a gateway given Addr instead of the target reaches
// it through the link, which a test can cut (a partition of that gateway
// alone) or slow down while the others still reach the target directly.
// It stops when the test ends.
type Link struct {
	target string
	ln     net.Listener
	cut    atomic.Bool
	slow   atomic.Int64 // nanoseconds each read waits before it is relayed

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
	wg    sync.WaitGroup
}

// Listen starts a link to target ("host:port") on a free 127.0.0.1 port.
func Listen(t testing.TB, target string) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := &Link{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	t.Cleanup(l.Close)
	return l
}

// Addr is the link's address, "127.0.0.1:port".
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Cut breaks every relayed connection and refuses new ones (they are
// accepted and closed at once) until Restore: to the client, the target
// went away.
func (l *Link) Cut() {
	l.cut.Store(true)
	l.closeConns()
}

// Restore lets new connections through again after Cut.
func (l *Link) Restore() { l.cut.Store(false) }

// Slow delays each read relayed in either direction by d from now on (0
// undoes it).
func (l *Link) Slow(d time.Duration) { l.slow.Store(int64(d)) }

// Close stops the link: it closes the listener and every connection and
// waits for the relaying goroutines (idempotent).
func (l *Link) Close() {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	l.done = true
	l.mu.Unlock()
	_ = l.ln.Close()
	l.closeConns()
	l.wg.Wait()
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		if l.cut.Load() {
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", l.target, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !l.track(c, up) {
			continue // cut meanwhile, or closing: Accept fails next
		}
		l.wg.Add(2)
		go l.pipe(up, c)
		go l.pipe(c, up)
	}
}

// track registers both ends of a relayed connection, or closes them and
// reports false when the link was cut meanwhile or is closing.
func (l *Link) track(a, b net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done || l.cut.Load() {
		_ = a.Close()
		_ = b.Close()
		return false
	}
	l.conns[a], l.conns[b] = struct{}{}, struct{}{}
	return true
}

// pipe copies from src to dst, each read delayed by Slow, until either
// side closes; then it closes both.
func (l *Link) pipe(dst, src net.Conn) {
	defer l.wg.Done()
	defer l.forget(dst, src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(l.slow.Load()); d > 0 {
				time.Sleep(d)
			}
			if l.cut.Load() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or a closed end
			return
		}
	}
}

func (l *Link) forget(a, b net.Conn) {
	_ = a.Close()
	_ = b.Close()
	l.mu.Lock()
	delete(l.conns, a)
	delete(l.conns, b)
	l.mu.Unlock()
}

func (l *Link) closeConns() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		_ = c.Close()
	}
}
