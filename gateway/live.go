package gateway

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/store"
	"github.com/sentinel-gateway/sentinel/proxy"
)

// liveLimiter is the limiter the proxy, the admin API and the gRPC service
// call: one atomic load, then the current *limit.Limiter. A reload that
// changes the limits section builds a new limiter over the same store and
// swaps it in; requests already inside the old one finish there.
type liveLimiter struct {
	cur atomic.Pointer[limit.Limiter]
	// observe, when set (by tests), sees every decision with the instants
	// Allow was entered and returned: the decision was made between them.
	observe atomic.Pointer[decisionObserver]
}

// decisionObserver sees one decision made between from and to.
type decisionObserver func(req *limit.Request, d limit.Decision, from, to time.Time)

// retireAfter is how long a replaced limiter keeps running before it is
// closed: longer than any store call or lease wait of a request inside it.
const retireAfter = 5 * time.Second

func newLiveLimiter(l *limit.Limiter) *liveLimiter {
	ll := &liveLimiter{}
	ll.cur.Store(l)
	return ll
}

// Allow decides req on the current limiter.
func (ll *liveLimiter) Allow(ctx context.Context, req *limit.Request) limit.Decision {
	var d limit.Decision
	ll.Decide(ctx, req, &d)
	return d
}

// Decide is Allow writing the decision to d (the proxy's call).
func (ll *liveLimiter) Decide(ctx context.Context, req *limit.Request, d *limit.Decision) {
	obs := ll.observe.Load()
	if obs == nil {
		ll.cur.Load().Decide(ctx, req, d)
		return
	}
	from := time.Now()
	ll.cur.Load().Decide(ctx, req, d)
	(*obs)(req, *d, from, time.Now())
}

// MaxTokens asks the current limiter.
func (ll *liveLimiter) MaxTokens(req *limit.Request) (int64, limit.Scope) {
	return ll.cur.Load().MaxTokens(req)
}

// Status reports the current limiter's status.
func (ll *liveLimiter) Status() limit.LimiterStatus { return ll.cur.Load().Status() }

// Reset resets a counter through the current limiter (DELETE /v1/counters).
func (ll *liveLimiter) Reset(ctx context.Context, key []byte, p store.Params) error {
	return ll.cur.Load().Reset(ctx, key, p)
}

// Forget drops what the current limiter holds for a counter another pod
// reset. A limiter retiring after a reload keeps its buckets: its requests
// have finished within retireAfter.
func (ll *liveLimiter) Forget(key string) {
	if l := ll.cur.Load(); l != nil {
		l.Forget([]byte(key))
	}
}

// StoreReachable tells the current limiter that the store answers again
// (see limit.Limiter.StoreReachable).
func (ll *liveLimiter) StoreReachable(read time.Duration) { ll.cur.Load().StoreReachable(read) }

// StoreHealthy reports whether the current limiter's store breaker is closed.
func (ll *liveLimiter) StoreHealthy() bool { return ll.cur.Load().StoreHealthy() }

// swap makes l current and closes the previous limiter after retireAfter.
func (ll *liveLimiter) swap(l *limit.Limiter) {
	old := ll.cur.Swap(l)
	time.AfterFunc(retireAfter, old.Close)
}

// Close closes the current limiter.
func (ll *liveLimiter) Close() { ll.cur.Load().Close() }

// Settle settles a reservation on the current limiter: a reload's
// limiter takes over the buckets the reservation's permits came from.
func (ll *liveLimiter) Settle(r *limit.Reservation, actual int64) { ll.cur.Load().Settle(r, actual) }

// ReadsBody asks the current limiter.
func (ll *liveLimiter) ReadsBody(resource string) bool { return ll.cur.Load().ReadsBody(resource) }

// Usage asks the current limiter.
func (ll *liveLimiter) Usage(ctx context.Context, key []byte, p store.Params) (limit.Applied, error) {
	return ll.cur.Load().Usage(ctx, key, p)
}

// SlotUsage asks the current limiter.
func (ll *liveLimiter) SlotUsage(ctx context.Context, key []byte, n int64) (int64, error) {
	return ll.cur.Load().SlotUsage(ctx, key, n)
}

// Wait waits on the current limiter (see limit.Limiter.Wait).
func (ll *liveLimiter) Wait(ctx context.Context, req *limit.Request, d *limit.Decision, until time.Time) bool {
	return ll.cur.Load().Wait(ctx, req, d, until)
}

// The proxy settles cost limits and waits through the live limiter.
var _ proxy.Settler = (*liveLimiter)(nil)
