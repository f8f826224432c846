package deadline

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A Sweeper keeps the deadlines of the client connections it wraps. A
// fasthttp client sets a write and a read deadline on its connection for
// every request; on a wrapped connection setting one is an atomic store
// instead of a timer moved in the runtime's heap under a lock. A goroutine,
// every tick while a wrapped connection is open, ends an operation blocked
// past its deadline by setting a deadline in the past on that socket, and
// an operation that starts past its deadline fails at once: the caller sees
// the timeout error a socket deadline gives, never early and at most a tick
// late.
type Sweeper struct {
	tick   time.Duration
	epoch  time.Time
	coarse atomic.Int64 // the last tick, in ns since epoch

	mu      sync.Mutex
	conns   map[*clientConn]struct{}
	running bool
}

// NewSweeper returns a sweeper that checks every tick (at least a
// millisecond): the most a deadline is kept late.
func NewSweeper(tick time.Duration) *Sweeper {
	return &Sweeper{tick: max(tick, time.Millisecond), epoch: time.Now(), conns: map[*clientConn]struct{}{}}
}

// Wrap returns c with its deadlines kept by s.
func (s *Sweeper) Wrap(c net.Conn) net.Conn {
	cc := &clientConn{Conn: c, s: s}
	cc.local = &connAddr{Addr: c.LocalAddr(), c: cc}
	s.mu.Lock()
	s.conns[cc] = struct{}{}
	if !s.running {
		s.running = true
		s.coarse.Store(int64(time.Since(s.epoch)))
		go s.run()
	}
	s.mu.Unlock()
	return cc
}

// run sweeps until no wrapped connection is left open.
func (s *Sweeper) run() {
	t := time.NewTicker(s.tick)
	defer t.Stop()
	var late []*clientConn
	for range t.C {
		now := int64(time.Since(s.epoch))
		s.coarse.Store(now)
		late = late[:0]
		s.mu.Lock()
		if len(s.conns) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		for c := range s.conns {
			if c.r.late(now) || c.w.late(now) {
				late = append(late, c)
			}
		}
		s.mu.Unlock()
		for _, c := range late {
			c.cut(&c.r, now, c.Conn.SetReadDeadline)
			c.cut(&c.w, now, c.Conn.SetWriteDeadline)
		}
	}
}

// at is a deadline in ns since the sweeper's epoch: 0 for none, at least 1
// for one in the past.
func (s *Sweeper) at(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(int64(t.Sub(s.epoch)), 1)
}

// clientConn is a wrapped connection; r and w are its two directions.
type clientConn struct {
	net.Conn
	s    *Sweeper
	r, w direction
	// mu orders the socket deadline changes of the sweeper (a cut) and of
	// the owner (undoing a cut when it sets a new deadline).
	mu sync.Mutex
	// local is the connection's local address, which leads back to it
	// (fasthttp stamps a Response with it): see Body.
	local *connAddr
	// body holds Body's bounds while on is set: from Body until the
	// owner's next read deadline. The reads of the body and the next
	// owner's calls follow Body in order (the pool hands the connection
	// on), so only on is atomic.
	body bodyBounds
}

// connAddr is a wrapped connection's local address.
type connAddr struct {
	net.Addr
	c *clientConn
}

// BodyLimits bound the reading of a streamed answer's body.
type BodyLimits struct {
	// Idle is the longest wait for the next bytes (0: none).
	Idle time.Duration
	// End, when not zero, is when the whole body must have been read.
	End time.Time
	// OnCut, when set, is called once when a read fails because of a
	// bound: idle says which (false: End). It runs on the reading
	// goroutine and must not block.
	OnCut func(idle bool)
}

// bodyBounds are BodyLimits in the sweeper's clock (ns since its epoch).
type bodyBounds struct {
	on        atomic.Bool
	idle, end int64
	onCut     func(idle bool)
	reported  bool
}

// Body bounds the reads of a streamed body on the connection whose local
// address is addr (a fasthttp Response's LocalAddr after a request on a
// wrapped connection) by lim instead of the read deadline the request
// set, until the connection's owner sets a read deadline again (its next
// request). It reports false when addr is not a wrapped connection's.
// Each read gets the deadline now + Idle (by the coarse clock plus a tick,
// so never early), or End when that is sooner.
func Body(addr net.Addr, lim BodyLimits) bool {
	a, ok := addr.(*connAddr)
	if !ok {
		return false
	}
	c := a.c
	b := &c.body
	b.idle, b.end, b.onCut, b.reported = int64(lim.Idle), 0, lim.OnCut, false
	if !lim.End.IsZero() {
		b.end = c.s.at(lim.End)
	}
	b.on.Store(true)
	return true
}

// direction is one way of a connection: its deadline, whether an operation
// is blocked in the socket, and whether the socket's own deadline has been
// set in the past (a cut) and must be cleared before the next operation.
type direction struct {
	at      atomic.Int64
	blocked atomic.Bool
	cutDone atomic.Bool
}

func (d *direction) late(now int64) bool {
	at := d.at.Load()
	return at != 0 && at < now && d.blocked.Load() && !d.cutDone.Load()
}

// cut ends d's blocked operation if it is still blocked past the deadline
// the sweep saw. cutDone is set before the deadline is read again and the
// owner sets the deadline before it reads cutDone (both sequentially
// consistent), so that either the sweep sees the new deadline and leaves
// the socket alone, or the owner sees the cut and undoes it under mu.
func (c *clientConn) cut(d *direction, now int64, set func(time.Time) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.cutDone.Load() {
		return
	}
	d.cutDone.Store(true)
	if at := d.at.Load(); at == 0 || at >= now || !d.blocked.Load() {
		d.cutDone.Store(false)
		return
	}
	_ = set(aLongTimeAgo)
}

// setDeadline keeps t as d's deadline; one already past by the coarse clock
// goes to the socket at once (a past deadline wakes a blocked operation).
func (c *clientConn) setDeadline(d *direction, t time.Time, set func(time.Time) error) error {
	at := c.s.at(t)
	d.at.Store(at)
	if at != 0 && at < c.s.coarse.Load() {
		c.mu.Lock()
		defer c.mu.Unlock()
		d.cutDone.Store(true)
		return set(t)
	}
	if d.cutDone.Load() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if d.cutDone.Load() {
			d.cutDone.Store(false)
			return set(time.Time{})
		}
	}
	return nil
}

func (c *clientConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

func (c *clientConn) SetReadDeadline(t time.Time) error {
	if c.body.on.Load() {
		c.body.on.Store(false)
	}
	return c.setDeadline(&c.r, t, c.Conn.SetReadDeadline)
}

func (c *clientConn) SetWriteDeadline(t time.Time) error {
	return c.setDeadline(&c.w, t, c.Conn.SetWriteDeadline)
}

// past reports whether d's deadline has passed by the coarse clock (which
// lags: never early).
func (c *clientConn) past(d *direction) bool {
	at := d.at.Load()
	return at != 0 && at < c.s.coarse.Load()
}

func (c *clientConn) Read(b []byte) (int, error) {
	var body *bodyBounds
	if c.body.on.Load() {
		body = &c.body
		c.r.at.Store(body.deadline(c.s))
	}
	if c.past(&c.r) {
		body.report(c.r.at.Load())
		return 0, timeoutError(c.Conn, "read")
	}
	c.r.blocked.Store(true)
	n, err := c.Conn.Read(b)
	c.r.blocked.Store(false)
	if err != nil && body != nil && c.r.cutDone.Load() {
		body.report(c.r.at.Load())
	}
	return n, err
}

// deadline is the next read's: a tick past the coarse clock (which lags
// by up to a tick) plus idle, or the end when that is sooner.
func (b *bodyBounds) deadline(s *Sweeper) int64 {
	at := int64(0)
	if b.idle > 0 {
		at = s.coarse.Load() + int64(s.tick) + b.idle
	}
	if b.end != 0 && (at == 0 || b.end < at) {
		at = b.end
	}
	return at
}

// report calls onCut once for a read that failed at the deadline at (b may
// be nil: no body bounds).
func (b *bodyBounds) report(at int64) {
	if b == nil || b.onCut == nil || b.reported {
		return
	}
	b.reported = true
	b.onCut(b.end == 0 || at < b.end)
}

func (c *clientConn) Write(b []byte) (int, error) {
	if c.past(&c.w) {
		return 0, timeoutError(c.Conn, "write")
	}
	c.w.blocked.Store(true)
	n, err := c.Conn.Write(b)
	c.w.blocked.Store(false)
	return n, err
}

// LocalAddr returns the connection's local address, which leads Body back
// to the connection.
func (c *clientConn) LocalAddr() net.Addr { return c.local }

func (c *clientConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}
