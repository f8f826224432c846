package proxy

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// clientWatch notices that a request's client closed its connection while
// the request waits for the upstream's answer: a request holding a
// concurrency slot has its forward aborted then (upstream.Aborter), so that
// the backend is not left working for nobody while the slot is taken again.
// It waits in the runtime's poller for the socket to become readable (no
// polling) and peeks: end of stream means the client is gone; bytes (a
// pipelined request) mean it is not, and the watch ends.
type clientWatch struct {
	tcp  *net.TCPConn
	done chan struct{}
}

// watchClient starts watching c, calling gone once if its client closes
// it; nil when c is not a TCP connection it can watch.
func watchClient(c net.Conn, gone func()) *clientWatch {
	tcp := tcpOf(c)
	if tcp == nil {
		return nil
	}
	rc, err := tcp.SyscallConn()
	if err != nil {
		return nil
	}
	w := &clientWatch{tcp: tcp, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var b [1]byte
		closed := false
		_ = rc.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if errors.Is(err, syscall.EAGAIN) {
				return false // wait until readable
			}
			closed = n == 0 || err != nil
			return true
		})
		if closed {
			gone()
		}
	}()
	return w
}

// stop ends the watch before the server uses the connection again: a
// passed read deadline wakes the watcher, which is waited for; then the
// deadline is cleared (the connection's bounds are the Listener's, which
// sets none on the socket while a request is served).
func (w *clientWatch) stop() {
	if w == nil {
		return
	}
	_ = w.tcp.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	_ = w.tcp.SetReadDeadline(time.Time{})
}

// tcpOf is the TCP connection under c's wrappers (the Listener's bounds, the
// TLS sniffer, TLS), or nil.
func tcpOf(c net.Conn) *net.TCPConn {
	for range 8 {
		switch v := c.(type) {
		case *net.TCPConn:
			return v
		case interface{ Inner() net.Conn }:
			c = v.Inner()
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}
