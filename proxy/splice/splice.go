package splice

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

var (
	open atomic.Int64
	_    = metrics.NewGauge(`sentinel_proxy_websocket_open`, func() float64 { return float64(open.Load()) })

	closedClient   = metrics.NewCounter(`sentinel_proxy_websocket_closed_total{by="client"}`)
	closedUpstream = metrics.NewCounter(`sentinel_proxy_websocket_closed_total{by="upstream"}`)
	closedIdle     = metrics.NewCounter(`sentinel_proxy_websocket_closed_total{by="idle"}`)
	closedShutdown = metrics.NewCounter(`sentinel_proxy_websocket_closed_total{by="shutdown"}`)
)

// Set tracks the spliced connections so that CloseAll can close them. Its
// zero value is ready to use.
type Set struct {
	mu     sync.Mutex
	conns  map[*pair]struct{}
	closed bool
}

// pair is one upgraded connection pair.
type pair struct {
	client, upstream net.Conn
	last             atomic.Int64 // unix nanos of the last byte either way
	by               atomic.Pointer[metrics.Counter]
}

// Splice copies both ways until either side closes or both are idle for
// idle; br holds upstream bytes already read. It runs on the client
// connection's server goroutine and returns when the pair is closed. After
// CloseAll it closes up and returns at once.
func (u *Set) Splice(client, up net.Conn, br *bufio.Reader, idle time.Duration) {
	p := &pair{client: client, upstream: up}
	p.last.Store(time.Now().UnixNano())
	// The server's write deadline of the 101 would cut the stream.
	_ = client.SetWriteDeadline(time.Time{})
	if !u.add(p) {
		up.Close()
		return
	}
	open.Add(1)
	done := make(chan struct{})
	go func() {
		p.copy(client, io.MultiReader(br, up), up, closedUpstream, idle)
		close(done)
	}()
	p.copy(up, client, client, closedClient, idle)
	<-done
	u.remove(p)
	open.Add(-1)
	if c := p.by.Load(); c != nil {
		c.Inc()
	}
}

// copy copies src (reading from conn, whose deadline it moves) to dst until
// an error; an end by src counts against by, an idle timeout as idle. Then
// it closes both connections, which ends the other direction.
func (p *pair) copy(dst io.Writer, src io.Reader, conn net.Conn, by *metrics.Counter, idle time.Duration) {
	buf := make([]byte, 16<<10)
	for {
		_ = conn.SetReadDeadline(time.Unix(0, p.last.Load()).Add(idle))
		n, err := src.Read(buf)
		if n > 0 {
			p.last.Store(time.Now().UnixNano())
			if _, werr := dst.Write(buf[:n]); werr != nil {
				p.end(nil)
				return
			}
		}
		if err == nil {
			continue
		}
		if isTimeout(err) {
			if time.Since(time.Unix(0, p.last.Load())) < idle {
				continue // the other direction was active
			}
			p.end(closedIdle)
			return
		}
		p.end(by)
		return
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// end records why the pair ends (the first reason wins) and closes both.
func (p *pair) end(by *metrics.Counter) {
	if by != nil {
		p.by.CompareAndSwap(nil, by)
	}
	p.client.Close()
	p.upstream.Close()
}

func (u *Set) add(p *pair) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return false
	}
	if u.conns == nil {
		u.conns = make(map[*pair]struct{})
	}
	u.conns[p] = struct{}{}
	return true
}

func (u *Set) remove(p *pair) {
	u.mu.Lock()
	delete(u.conns, p)
	u.mu.Unlock()
}

// CloseAll closes every spliced connection, and any spliced later.
func (u *Set) CloseAll() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	for p := range u.conns {
		p.end(closedShutdown)
	}
}
