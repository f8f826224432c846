package upstream

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// ErrClientGone is the error of a forward whose client went away before
// the answer's head came, and which the caller aborted (Aborter): a
// *ClientBodyError wraps it, so that it counts against the client, never
// against the target.
var ErrClientGone = errors.New("the client went away before the answer")

// Aborter ends a forward before its answer's head came, for a caller whose
// client went away (the request held a concurrency slot: the backend is
// not left working for nobody). Register it with Watch for the request
// before Pool.Do, and Unwatch after. Safe for concurrent use.
type Aborter struct {
	mu      sync.Mutex
	conn    net.Conn // the connection the request is on while its head is awaited
	aborted bool
}

// aborting holds the Aborters of requests that have one, by request.
var aborting sync.Map // *fasthttp.Request → *Aborter

// Watch lets a abort req's forward (see Aborter).
func Watch(req *fasthttp.Request, a *Aborter) { aborting.Store(req, a) }

// Unwatch ends Watch.
func Unwatch(req *fasthttp.Request) { aborting.Delete(req) }

// Abort closes the forward's connection when it awaits the answer's head,
// or the one it takes next; it returns at once.
func (a *Aborter) Abort() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.aborted = true
	if a.conn != nil {
		_ = a.conn.SetDeadline(aLongTimeAgo)
	}
}

// aLongTimeAgo is a deadline that has passed.
var aLongTimeAgo = time.Unix(1, 0)

// aborterOf is req's Aborter, or nil. It allocates nothing.
func aborterOf(req *fasthttp.Request) *Aborter {
	if v, ok := aborting.Load(req); ok {
		return v.(*Aborter)
	}
	return nil
}

// awaiting records the connection req's head is awaited on (nil: no
// longer); a forward already aborted has its deadline passed at once.
func (a *Aborter) awaiting(conn net.Conn) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.conn = conn
	if a.aborted && conn != nil {
		_ = conn.SetDeadline(aLongTimeAgo)
	}
}

// gone turns a forward's failure into ErrClientGone when it was aborted.
func (a *Aborter) gone(err error) error {
	if a == nil || err == nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.aborted {
		return &ClientBodyError{Err: ErrClientGone}
	}
	return err
}
