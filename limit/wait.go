package limit

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/puzpuzpuz/xsync/v4"
)

// A limit with max_wait lets a request it refuses wait for its permit or
// slot instead of a 429, in a queue per key: PREMIUM before STANDARD before
// FREE (and anonymous), first come first served within a plan. The queue's
// head is woken when its permit may be free (the refusal's retry-after: a
// timer, no polling) or when a slot is given back, and decides again; a
// request that arrives while the key has waiters joins the queue rather
// than take the permit the head waits for (so the waiters are served in
// order, at the limit's rate, as nginx's limit_req burst serves its queue).
// A request whose wait could not end in time (its retry-after is past its
// deadline), or that finds the queue full, is refused at once.

// waitPlans are the queues' plans in the order they are served.
const waitPlans = 3

// planRank is req's place in the order of plans: PREMIUM 0, STANDARD 1,
// FREE and anonymous 2.
func planRank(plan string) int {
	switch plan {
	case "PREMIUM":
		return 0
	case "STANDARD":
		return 1
	}
	return 2
}

// waiter is one request waiting for its key.
type waiter struct {
	wake chan struct{} // a token when it may decide again
	plan int
	el   *list.Element
}

// waitQueue is one key's waiters.
type waitQueue struct {
	mu      sync.Mutex
	plans   [waitPlans]list.List
	n       int
	timer   *time.Timer
	armedAt int64 // unix nanos the timer fires (0: not armed)
}

// waits are the limiter's queues by key, and the waiters in all of them.
type waits struct {
	queues  *xsync.Map[string, *waitQueue]
	total   atomic.Int64
	perKey  int
	maximum int
}

// queued reports whether key has requests waiting. It allocates nothing.
func (w *waits) queued(key []byte) bool {
	if w.total.Load() == 0 {
		return false
	}
	q, ok := w.queues.Load(unsafe.String(unsafe.SliceData(key), len(key)))
	if !ok {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n > 0
}

// join adds a waiter of plan to key's queue, at the back of its plan (or
// at its front: a waiter that lost its turn); nil when the queue is full.
func (w *waits) join(key string, plan int, front bool) (*waitQueue, *waiter) {
	if w.total.Add(1) > int64(w.maximum) {
		w.total.Add(-1)
		return nil, nil
	}
	q, _ := w.queues.LoadOrCompute(key, func() (*waitQueue, bool) { return new(waitQueue), false })
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n >= w.perKey {
		w.total.Add(-1)
		return nil, nil
	}
	wt := &waiter{wake: make(chan struct{}, 1), plan: plan}
	if front {
		wt.el = q.plans[plan].PushFront(wt)
	} else {
		wt.el = q.plans[plan].PushBack(wt)
	}
	q.n++
	return q, wt
}

// leave takes wt out of q (it was admitted or gave up); a key without
// waiters leaves the map.
func (w *waits) leave(key string, q *waitQueue, wt *waiter) {
	q.mu.Lock()
	if wt.el != nil {
		q.plans[wt.plan].Remove(wt.el)
		wt.el = nil
		q.n--
		w.total.Add(-1)
	}
	empty := q.n == 0
	q.mu.Unlock()
	if empty {
		w.queues.Compute(key, func(old *waitQueue, loaded bool) (*waitQueue, xsync.ComputeOp) {
			if loaded && old == q {
				q.mu.Lock()
				defer q.mu.Unlock()
				if q.n == 0 {
					return nil, xsync.DeleteOp
				}
			}
			return old, xsync.CancelOp
		})
	}
}

// wakeHead lets q's first waiter decide again.
func (q *waitQueue) wakeHead() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.armedAt = 0
	for i := range q.plans {
		if e := q.plans[i].Front(); e != nil {
			select {
			case e.Value.(*waiter).wake <- struct{}{}:
			default:
			}
			return
		}
	}
}

// wakeAt wakes q's head at the unix nanos at, unless it is woken sooner.
func (q *waitQueue) wakeAt(at, now int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.armedAt != 0 && q.armedAt <= at {
		return
	}
	d := time.Duration(max(at-now, 0))
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.wakeHead)
	} else {
		q.timer.Reset(d)
	}
	q.armedAt = at
}

// Wait holds a request that d refused, and that its refusing limit lets
// wait (d.MaxWait > 0), until the permit or slot it needs may be free, and
// decides it again (into d), until it is admitted or until (the smaller of
// max_wait and the client's deadline, on the limiter's clock) passes; it
// reports whether it was admitted. It refuses at once (false) when d's
// retry-after is past until, or when the queue is full. While it waits the
// goroutine sleeps on a channel.
func (l *Limiter) Wait(ctx context.Context, req *Request, d *Decision, until time.Time) bool {
	if d.Allowed {
		return true
	}
	start := l.now()
	plan := planRank(req.Plan)
	if req.Tenant == "" {
		plan = waitPlans - 1
	}
	for front := false; ; front = true { // a waiter that lost its turn is first again
		now, key, c := l.now(), d.waitOn, d.waitCounters
		if d.MaxWait <= 0 || key == "" || d.RetryAfter < 0 || now.Add(d.RetryAfter).After(until) {
			c.Wait(false, false, true, 0)
			return false
		}
		q, wt := l.waits.join(key, plan, front)
		if q == nil {
			c.Wait(false, false, true, 0)
			return false
		}
		c.Queued(1)
		q.wakeAt(now.Add(max(d.RetryAfter, time.Millisecond)).UnixNano(), now.UnixNano())
		ok := l.sleep(ctx, wt, until.Sub(now))
		if ok {
			// Decided now, not when the request arrived (the proxy's
			// Arrived): what freed since counts.
			arrived := req.Arrived
			req.waiting, req.Arrived = true, time.Time{}
			l.Decide(ctx, req, d)
			req.waiting, req.Arrived = false, arrived
		}
		l.waits.leave(key, q, wt)
		c.Queued(-1)
		if !ok || d.Allowed {
			q.wakeHead() // the next may be admitted too (or learn when), or take what this one gave up
		}
		if !ok {
			c.Wait(false, true, false, 0)
			return false
		}
		if d.Allowed {
			c.Wait(true, false, false, l.now().Sub(start))
			return true
		}
	}
}

// sleep waits for wt's turn, at most d; false when d passed first or ctx
// ended.
func (l *Limiter) sleep(ctx context.Context, wt *waiter, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wt.wake:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// wakeWaiters lets the first request waiting for key decide again (a slot
// was given back).
func (l *Limiter) wakeWaiters(key string) {
	if l.waits.total.Load() == 0 {
		return
	}
	if q, ok := l.waits.queues.Load(key); ok {
		q.wakeHead()
	}
}
