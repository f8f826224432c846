// Package deadline bounds a server's connections in time with a coarse clock
// instead of a socket deadline per request.
//
// A fasthttp server with read, write and idle timeouts sets two or three
// socket deadlines on every request, and each is a time read, a lock and a
// timer moved in the runtime's heap, a cost that shows on a saturated check
// or refusal path (BenchmarkServer and BenchmarkClient measure it against
// the sweeper). A Listener gives the same bounds the way
// nginx does, without reading the clock per request: a connection publishes
// its phase (a request arriving, its answer being written, waiting for the
// next one) and whether it is blocked in the socket with an atomic operation
// around each read and write; a sweeper, every tick (a tenth of the smallest
// timeout, at most a second), stamps each phase it sees for the first time
// with the time of that tick and ends an operation blocked past its phase's
// bound by setting a deadline in the past on that one socket, so the server
// sees the timeout error a socket deadline gives. A phase starts no later
// than its stamp, so a bound is never cut short; it is enforced at most two
// ticks late.
//
// The phases follow fasthttp's own use of its timeouts:
//   - from the accept until the first byte, and from the first byte of a
//     request until the server writes its answer: Read;
//   - from the first write of an answer until the server reads again: Write
//     (pipelined requests answered from one read share it);
//   - from the next read until a byte arrives: Idle.
//
// A connection whose owner sets a deadline itself (fasthttp does when it
// hands a connection to a hijack handler, crypto/tls when it closes) is the
// owner's from then on, in that direction.
//
// A client connection, whose owner sets its own deadlines, is kept by a
// Sweeper instead (sweeper.go). The listener does not keep fasthttp's
// timeouts on Sweeper-wrapped connections: fasthttp would still read the
// clock for each of its two or three deadlines per request, which the
// phases avoid.
package deadline

import (
	"crypto/tls"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Timeouts are a listener's bounds; zero leaves that phase unbounded.
type Timeouts struct {
	// Read bounds reading one request, from the accept (the first request)
	// or its first byte (the next ones) until the answer starts.
	Read time.Duration
	// Write bounds writing one answer.
	Write time.Duration
	// Idle bounds a keep-alive connection's wait for its next request.
	Idle time.Duration
}

// phase is what a connection is doing, by the bound that applies.
type phase uint64

const (
	phaseFirst phase = iota // accepted, no byte yet (a TLS handshake included): Read
	phaseRead               // a request is arriving or being handled: Read
	phaseWrite              // an answer is being written: Write
	phaseIdle               // waiting for the next request: Idle
)

var phaseNames = [...]string{"read", "read", "write", "idle"}

// A connection's state word, shared with the sweeper: whether an operation
// is blocked in the socket (a TLS handshake: both ways), the phase, and the
// sweeper's stamp of the phase in nanoseconds since the listener's epoch
// (unstamped: 0; the first tick comes after the epoch).
const (
	stateBlocked   = 1 << 0
	stateHandshake = 1 << 1
	phaseShift     = 2
	sinceShift     = 4
)

func pack(since int64, p phase, flags uint64) uint64 {
	return uint64(since)<<sinceShift | uint64(p)<<phaseShift | flags
}

func unpack(s uint64) (since int64, p phase) {
	return int64(s >> sinceShift), phase(s>>phaseShift) & 3
}

const connShards = 16

type connShard struct {
	mu    sync.Mutex
	conns []*conn // each knows its index (conn.at)
}

// Listener is a net.Listener whose connections are bounded by Timeouts.
type Listener struct {
	net.Listener
	limits [4]int64 // per phase, in ns; 0 = none
	tick   time.Duration
	epoch  time.Time
	coarse atomic.Int64 // the sweeper's last tick (ns since epoch)
	closed atomic.Bool

	// The open connections, in shards so that a sweep (which holds one
	// shard at a time) delays an accept or a close by a shard's share only.
	shards [connShards]connShard
	next   atomic.Uint32 // round-robin shard of the next accept
	open   atomic.Int64

	stop      chan struct{}
	stopOnce  sync.Once
	closeOnce sync.Once
	closeErr  error
	timeouts  [4]*metrics.Counter
	drained   *metrics.Counter // idle connections ended by CloseIdle
}

// Listen wraps ln. name labels sentinel_conn_timeouts_total{listener}. With
// no timeout set, ln is returned as it is.
func Listen(ln net.Listener, name string, t Timeouts) net.Listener {
	if t.Read <= 0 && t.Write <= 0 && t.Idle <= 0 {
		return ln
	}
	l := &Listener{
		Listener: ln,
		epoch:    time.Now(),
		stop:     make(chan struct{}),
	}
	smallest := time.Duration(0)
	for p, d := range [4]time.Duration{t.Read, t.Read, t.Write, t.Idle} {
		if d > 0 {
			l.limits[p] = int64(d)
			if smallest == 0 || d < smallest {
				smallest = d
			}
		}
		l.timeouts[p] = metrics.GetOrCreateCounter(`sentinel_conn_timeouts_total{listener="` + name + `",phase="` + phaseNames[p] + `"}`)
	}
	l.drained = metrics.GetOrCreateCounter(`sentinel_conn_drain_closed_total{listener="` + name + `"}`)
	l.tick = min(max(smallest/10, time.Millisecond), time.Second)
	go l.sweep()
	return l
}

// past reports whether a phase stamped at since is over its bound at now.
func (l *Listener) past(p phase, since, now int64) bool {
	limit := l.limits[p]
	return limit > 0 && since > 0 && now-since > limit
}

// Accept accepts a connection and starts its first phase.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	dc := &conn{Conn: c, l: l, shard: &l.shards[l.next.Add(1)%connShards], peer: PeerAddr(c.RemoteAddr())}
	l.open.Add(1)
	dc.shard.mu.Lock()
	dc.at = len(dc.shard.conns)
	dc.shard.conns = append(dc.shard.conns, dc)
	dc.shard.mu.Unlock()
	if _, ok := c.(*tls.Conn); ok {
		return tlsConn{dc}, nil
	}
	return dc, nil
}

// Close closes the listener; its sweeper runs on until the connections it
// accepted are closed too. Closing again does nothing and returns nil (a
// draining server closes its listener before the server's own shutdown
// does).
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.Listener.Close()
		l.closed.Store(true)
		if l.open.Load() == 0 {
			l.stopOnce.Do(func() { close(l.stop) })
		}
	})
	return l.closeErr
}

// Serving returns the number of open connections the listener still
// bounds: those not handed to an owner that sets its own deadlines (an
// upgraded WebSocket connection is not counted).
func (l *Listener) Serving() int {
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for _, c := range sh.conns {
			if !c.ownRead.Load() {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// CloseIdle ends the kept-alive connections that have waited at least
// minIdle for their next request, and returns how many: their server's
// read fails as on an idle timeout (the server closes them without an
// answer), counted in sentinel_conn_drain_closed_total, not as a timeout.
// A connection still waiting for its first request is left to the read
// timeout: a client that opened it may be about to send. A client that
// sends on a connection as it is closed loses that request, so a draining
// server first answers every request with Connection: close and closes
// only connections its clients have left idle.
func (l *Listener) CloseIdle(minIdle time.Duration) int {
	now := int64(time.Since(l.epoch))
	var idle []*conn
	var states []uint64
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for _, c := range sh.conns {
			s := c.state.Load()
			since, p := unpack(s)
			if p == phaseIdle && s&stateBlocked != 0 && since > 0 && now-since >= int64(minIdle) && !c.ownRead.Load() {
				idle = append(idle, c)
				states = append(states, s)
			}
		}
		sh.mu.Unlock()
	}
	n := 0
	for i, c := range idle {
		if c.state.Load() != states[i] || !c.counted.CompareAndSwap(false, true) {
			continue // a request began meanwhile, or a timeout ended it
		}
		_ = c.Conn.SetReadDeadline(aLongTimeAgo)
		if c.state.Load() != states[i] {
			// The read returned: with a request's first bytes that came
			// just before the deadline (the request goes on: lift it),
			// or with the deadline's error (the server closes the
			// connection whatever the deadline now says).
			_ = c.Conn.SetReadDeadline(time.Time{})
		}
		l.drained.Inc()
		n++
	}
	return n
}

// remove forgets a closed connection (once, however often it is closed); a
// closed listener's sweeper stops with its last connection.
func (l *Listener) remove(c *conn) {
	sh := c.shard
	sh.mu.Lock()
	if c.at < 0 {
		sh.mu.Unlock()
		return
	}
	last := sh.conns[len(sh.conns)-1]
	sh.conns[c.at], last.at = last, c.at
	sh.conns[len(sh.conns)-1] = nil
	sh.conns = sh.conns[:len(sh.conns)-1]
	c.at = -1
	sh.mu.Unlock()
	if l.open.Add(-1) == 0 && l.closed.Load() {
		l.stopOnce.Do(func() { close(l.stop) })
	}
}

// sweep stamps, every tick, the phases it has not seen before, ends the
// operations blocked past their phase's bound and advances the coarse clock
// that operations starting in a phase check themselves against.
func (l *Listener) sweep() {
	t := time.NewTicker(l.tick)
	defer t.Stop()
	type cut struct {
		c     *conn
		state uint64
	}
	var late []cut
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		now := int64(time.Since(l.epoch))
		l.coarse.Store(now)
		late = late[:0]
		for i := range l.shards {
			sh := &l.shards[i]
			sh.mu.Lock()
			for _, c := range sh.conns {
				s := c.state.Load()
				since, p := unpack(s)
				switch {
				case since == 0:
					// The serving goroutine keeps a stamp it finds (its
					// operations set and clear their bits atomically); one
					// lost to a phase change is simply for the next phase.
					c.state.CompareAndSwap(s, s|uint64(now)<<sinceShift)
				case s&(stateBlocked|stateHandshake) != 0 && l.past(p, since, now):
					late = append(late, cut{c, s})
				}
			}
			sh.mu.Unlock()
		}
		for _, k := range late {
			k.c.expire(k.state)
		}
	}
}

// conn is an accepted connection. Its phase is the serving goroutine's own;
// state shares it, the stamp and the blocked bits with the sweeper.
type conn struct {
	net.Conn
	l     *Listener
	shard *connShard
	at    int // index in shard.conns, -1 once removed (under shard.mu)
	phase phase
	state atomic.Uint64

	// ownRead and ownWrite: the owner has set a deadline in that direction
	// and bounds it from then on.
	ownRead, ownWrite atomic.Bool
	counted           atomic.Bool // a timeout of this connection is counted

	peer netip.Addr // RemoteAddr's IP, read once at accept (see PeerAddr)
}

// PeerAddr is the IP address of the connection's peer (IPv4-mapped IPv6
// addresses unmapped; the zero Addr when RemoteAddr is not an IP address).
// A server that reads it for each request on a kept-alive connection
// saves converting RemoteAddr every time.
func (c *conn) PeerAddr() netip.Addr { return c.peer }

// Inner is the accepted connection under the Listener's bounds, for a
// caller that watches the socket itself (it must not read from it nor set
// its deadlines while the server may).
func (c *conn) Inner() net.Conn { return c.Conn }

// PeerAddr is addr's IP address, IPv4-mapped addresses unmapped; the zero
// Addr when it has none. It allocates nothing.
func PeerAddr(addr net.Addr) netip.Addr {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	case *net.UDPAddr:
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// enter starts an operation in phase p: a new phase (unstamped) or the
// current one, which fails when it is already past its bound by the coarse
// clock (which lags, so never early).
func (c *conn) enter(op string, p phase, flag uint64) error {
	if p != c.phase {
		c.phase = p
		c.state.Store(pack(0, p, flag))
		return nil
	}
	if since, _ := unpack(c.state.Load()); c.l.past(p, since, c.l.coarse.Load()) {
		c.count(p)
		return timeoutError(c.Conn, op)
	}
	c.state.Or(flag)
	return nil
}

// Read starts the idle phase after an answer and the read phase with a
// request's first byte.
func (c *conn) Read(b []byte) (int, error) {
	if c.ownRead.Load() {
		return c.Conn.Read(b)
	}
	p := c.phase
	if p == phaseWrite {
		p = phaseIdle
	}
	if err := c.enter("read", p, stateBlocked); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	if n > 0 && (p == phaseFirst || p == phaseIdle) {
		c.phase = phaseRead
		c.state.Store(pack(0, phaseRead, 0))
	} else {
		c.state.And(^uint64(stateBlocked))
	}
	return n, err
}

// Write starts the write phase with an answer's first write.
func (c *conn) Write(b []byte) (int, error) {
	if c.ownWrite.Load() {
		return c.Conn.Write(b)
	}
	if err := c.enter("write", phaseWrite, stateBlocked); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	c.state.And(^uint64(stateBlocked))
	return n, err
}

func (c *conn) count(p phase) {
	if c.counted.CompareAndSwap(false, true) {
		c.l.timeouts[p].Inc()
	}
}

// expire ends the operation the sweeper found blocked past its bound (state
// is what it found) with a deadline in the past: the operation returns the
// timeout error a socket deadline gives, and so does every later one in
// that direction. A stalled TLS handshake is ended both ways.
func (c *conn) expire(state uint64) {
	if c.state.Load() != state {
		return // the operation returned meanwhile
	}
	_, p := unpack(state)
	c.count(p)
	if state&stateHandshake != 0 || p == phaseWrite {
		if !c.ownWrite.Load() {
			_ = c.Conn.SetWriteDeadline(aLongTimeAgo)
		}
	}
	if state&stateHandshake != 0 || p != phaseWrite {
		if !c.ownRead.Load() {
			_ = c.Conn.SetReadDeadline(aLongTimeAgo)
		}
	}
}

// timeoutError is the error of an operation on c refused because its bound
// or deadline has passed: what a socket deadline gives (a *net.OpError
// whose Timeout is true).
func timeoutError(c net.Conn, op string) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.ErrDeadlineExceeded}
}

// aLongTimeAgo is a deadline that has passed.
var aLongTimeAgo = time.Unix(1, 0)

func (c *conn) SetDeadline(t time.Time) error {
	c.ownRead.Store(true)
	c.ownWrite.Store(true)
	return c.Conn.SetDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.ownRead.Store(true)
	return c.Conn.SetReadDeadline(t)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.ownWrite.Store(true)
	return c.Conn.SetWriteDeadline(t)
}

func (c *conn) Close() error {
	c.l.remove(c)
	return c.Conn.Close()
}

// tlsConn is a conn over a TLS connection. The server finds the TLS state
// through it (fasthttp's IsTLS) and runs the handshake, in the first phase,
// before the first read.
type tlsConn struct{ *conn }

func (c tlsConn) Handshake() error {
	tc := c.Conn.(*tls.Conn)
	if c.ownRead.Load() || c.ownWrite.Load() {
		return tc.Handshake()
	}
	c.state.Or(stateHandshake)
	err := tc.Handshake()
	c.state.And(^uint64(stateHandshake))
	return err
}

func (c tlsConn) ConnectionState() tls.ConnectionState {
	return c.Conn.(*tls.Conn).ConnectionState()
}
