package limit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/ants/v2"

	"github.com/sentinel-gateway/sentinel/limit/breaker"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// errGaveUp is the error of a store call whose caller stopped waiting at
// limits.store_timeout.
var errGaveUp = errors.New("limit: store call timed out")

// storeCall is one store call that its caller may stop waiting for.
type storeCall struct {
	state atomic.Int32 // callRunning, callAnswered or callAbandoned
	res   store.LeaseResult
	err   error
	done  chan struct{} // closed once answered in time
}

const (
	callRunning int32 = iota
	callAnswered
	callAbandoned
)

// lateWait is how long a store call may still answer after its caller
// stopped waiting: the call runs under this deadline, so that an answer that
// is merely late (a busy pod or Redis) is still read and its permits given
// back, and Redis grants nothing to a call it runs later than that (see
// RedisStore.Lease).
func (l *Limiter) lateWait() time.Duration {
	return max(10*l.cfg.StoreTimeout, 500*time.Millisecond)
}

// callStore runs req and waits for the answer at most limits.store_timeout
// (or until ctx is done). The call itself goes on in the background; when
// its caller gave up and b is not nil, the permits of its answer return to
// the store in one more call (never retried), so a timed-out lease does not
// hold budget nobody can use, and when no answer comes in time (the store
// takes unleased permits only from a call it runs before the deadline) the
// unleased permits it reported go back into b, for
// the next call to report (their times are measured from unleasedAt). b.late counts such calls
// until then.
//
// A call given up on counts as a failure of the store node (cb) when its
// caller stops waiting. If its answer comes later and says the store ran
// it before its deadline, the store was up and only the way back was slow
// (a busy pod or machine): the answer ends the run of failures
// (cb.answered), so that timeouts of a busy pod with answers between them
// do not open the breaker.
//
// An in-process store (MemoryStore) answers at once and cannot be late: it
// is called directly, without the goroutine, channel and timer.
func (l *Limiter) callStore(ctx context.Context, req *store.LeaseRequest, b *bucket, unleasedAt int64, cb callBreaker) (store.LeaseResult, error) {
	if !l.shared {
		return l.store.Lease(ctx, req)
	}
	c := &storeCall{done: make(chan struct{})}
	runCall(func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.lateWait())
		res, err := l.store.Lease(sctx, req)
		cancel()
		c.res, c.err = res, err
		if c.state.CompareAndSwap(callRunning, callAnswered) {
			close(c.done)
			return
		}
		l.lateAnswer(req, res, err, b, unleasedAt, cb)
	})
	t := time.NewTimer(l.cfg.StoreTimeout)
	defer t.Stop()
	select {
	case <-c.done:
		return c.res, c.err
	case <-t.C:
	case <-ctx.Done():
	}
	if b != nil {
		b.late.Add(1) // before the abandon: the call's goroutine takes it back
	}
	cb.failed(l.now().UnixNano()) // before the abandon: a late answer ends the run after
	if c.state.CompareAndSwap(callRunning, callAbandoned) {
		return store.LeaseResult{}, errGaveUp
	}
	cb.answered()
	if b != nil {
		b.late.Add(-1)
	}
	<-c.done // answered just now
	return c.res, c.err
}

// lateAnswer ends a call whose caller stopped waiting: an answer ends the
// breaker's run of failures and gives back the permits it granted; a
// failure puts the unleased permits it carried back into b.
func (l *Limiter) lateAnswer(req *store.LeaseRequest, res store.LeaseResult, err error, b *bucket, unleasedAt int64, cb callBreaker) {
	if err == nil {
		cb.answered()
		storeAnswersLate.Inc()
	}
	if b == nil {
		return
	}
	if err != nil {
		b.mu.Lock()
		b.reportLater(unleasedAt, &req.Params, req.Unleased, req.UnleasedAgo, req.UnleasedBefore)
		b.mu.Unlock()
	} else if res.Granted > 0 && l.returnGrant(req, res) {
		lateReturns.Inc()
	}
	b.late.Add(-1)
}

// callBreaker is the breaker of a call's store node, and whether the call
// is its half-open probe; the zero value records nothing.
type callBreaker struct {
	br    *breaker.Breaker
	probe bool
}

func (cb callBreaker) failed(now int64) {
	if cb.br != nil {
		cb.br.Failure(cb.probe, now)
	}
}

func (cb callBreaker) answered() {
	if cb.br != nil {
		cb.br.Answered()
	}
}

// callWorkers run the store calls of every limiter of the process: a call
// goes to a goroutine that has run calls before, whose stack has already
// grown to the store client's depth. A goroutine started for each call
// grew its stack anew every time: runtime.morestack took a fifth of the
// gateway's CPU on rare keys (make bench-rls, the 100k row). A worker ends
// after callWorkerIdle without a call; past callWorkers busy ones (a
// store that does not answer holds each call up to lateWait), a call gets
// a goroutine of its own, as before.
var callWorkers = sync.OnceValue(func() *ants.Pool {
	p, err := ants.NewPool(callWorkersMax, ants.WithNonblocking(true), ants.WithExpiryDuration(callWorkerIdle))
	if err != nil {
		panic(err) // only for options out of range
	}
	return p
})

const (
	callWorkersMax = 256
	callWorkerIdle = 10 * time.Second
)

// runCall runs f on a call worker, or on a goroutine of its own when none
// is free.
func runCall(f func()) {
	if callWorkers().Submit(f) != nil {
		go f()
	}
}
