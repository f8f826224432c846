package upstream

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// Pool is one upstream: its targets, the balancer over them and the pool
// timeout. It is safe for concurrent use; Do takes no lock in the common case.
type Pool struct {
	name        string
	targets     []*target
	leastPend   bool
	timeout     time.Duration
	next        atomic.Uint32 // round-robin cursor, also the tie-breaker of least_pending
	panicNext   atomic.Uint32 // round-robin cursor of panic mode
	watched     atomic.Bool   // the Set's background loop re-probes ejected targets
	latency     *metrics.PrometheusHistogram
	panics      *metrics.Counter
	errNoTarget error // ErrNoHealthy with the pool's name, built once
	removal     removal
}

func newPool(name string, cfg PoolConfig) *Pool {
	p := &Pool{
		name:        name,
		leastPend:   cfg.Balance == BalanceLeastPending,
		timeout:     cfg.Timeout,
		latency:     newLatency(name),
		panics:      metrics.GetOrCreateCounter(panicName(name)),
		errNoTarget: fmt.Errorf("upstream %s: %w", name, ErrNoHealthy),
	}
	p.removal.max = maxRemoved(len(cfg.Targets), cfg.MaxEjectionPercent)
	for _, u := range cfg.Targets {
		p.targets = append(p.targets, newTarget(name, u, &cfg, &p.removal))
	}
	return p
}

// Do sends req to one of the pool's targets and reads the answer into resp.
//
// The target is picked among those that are healthy, not ejected and whose
// breaker admits the request, by round robin or least pending. When none is,
// the pool is in panic mode: it balances over all its targets, whatever
// their state, rather than refuse everything (an outage of the health view
// must not become an outage of the service). The
// connection always goes to that configured target, whatever req's URI or
// Host header says: only the scheme of req's URI is set here (to the
// target's), and its path and query are sent as they are. The Host header
// sent follows fasthttp's rules: the URI's host (which, unless the caller
// changed the URI, is req's Host header), or req's Host header as it is when
// req.UseHostHeader is set; when both are empty, the target's host.
//
// The whole call, including one retry on another target when the first could
// not be connected to (nothing was sent, so any method may be retried), is
// bounded by the pool timeout. A request body stream (req.SetBodyStream) is
// sent as it is read; fasthttp's own retry of a dead keep-alive connection
// covers idempotent requests without a body stream only.
//
// The response is buffered whole unless the caller sets resp.StreamBody
// before the call. Then the pool timeout ends with the answer's head, and
// the body's reads are bounded by body_idle_timeout each and, when set, by
// body_timeout from start; a body cut by either fails its read with a
// timeout error and is counted in sentinel_upstream_cut_answers_total and
// logged (at most a few lines a second). An answer whose Content-Length is
// at most WholeAnswerMax is still read whole before Do returns (its result
// and latency include the body; a body cut so is an error of Do, a
// timeout: 504); a larger one, or one of unknown
// length, is streamed: Do returns after the head and the caller must read
// or close resp.BodyStream (the fasthttp server does so when resp is the
// RequestCtx's response), and results and latency are those of the head.
// A pipelined answer is read whole within the pool timeout.
//
// Only answers of the upstream count against a target (see Classify): a
// request body that the client fails to deliver (a *ClientBodyError from
// req's body stream) is returned as it is, and a 503 or 429 answer
// (backpressure) neither trips the breaker nor ejects.
//
// Errors: a *ClientBodyError when the client's body failed, ErrTimeout when
// the timeout passed, any other error is a connection failure (all but the
// first are *TargetError). Test them with errors.Is / errors.As, or sort
// them with Classify.
func (p *Pool) Do(req *fasthttp.Request, resp *fasthttp.Response) error {
	_, err := p.DoAt(req, resp, time.Now())
	return err
}

// DoAt is Do for a request sent at start, a time the caller has read
// already; it returns when the answer (or the failure) came, the one clock
// read of the call, for the caller to reuse.
func (p *Pool) DoAt(req *fasthttp.Request, resp *fasthttp.Response, start time.Time) (end time.Time, err error) {
	deadline := start.Add(p.timeout)
	t, trial := p.pick(start.UnixNano(), nil)
	if t == nil {
		if t = p.panicPick(); t == nil {
			return time.Now(), p.errNoTarget
		}
	}
	end, dialFailed, err := p.attempt(t, trial, req, resp, start.UnixNano(), deadline)
	if dialFailed && len(p.targets) > 1 {
		if t2, trial2 := p.pick(end.UnixNano(), t); t2 != nil {
			t = t2
			end, _, err = p.attempt(t2, trial2, req, resp, end.UnixNano(), deadline)
		}
	}
	p.latency.Update(end.Sub(start).Seconds())
	return end, err
}

// attempt sends req to t at now (unix nanoseconds) and records the result;
// end is when it came.
func (p *Pool) attempt(t *target, trial int64, req *fasthttp.Request, resp *fasthttp.Response, now int64, deadline time.Time) (end time.Time, dialFailed bool, err error) {
	uri := req.URI()
	uri.SetSchemeBytes(t.scheme)
	if len(uri.Host()) == 0 && len(req.Header.Host()) == 0 {
		uri.SetHostBytes(t.host)
	}
	busy := t.pending.Add(1) > 1
	if pipe := t.pipe; pipe != nil && pipe.takes(req, now, busy) {
		var piped bool
		piped, err = pipe.do(t.hc, req, resp, now, deadline)
		end = time.Now()
		pipe.done(err, piped, now, end.UnixNano())
	} else {
		err = t.hc.DoDeadline(req, resp, deadline)
		end = time.Now()
	}
	t.pending.Add(-1)
	now = end.UnixNano()
	var status int
	if err == nil {
		status = resp.StatusCode()
	}
	class := Classify(err, status)
	if t.pipe != nil && (class == Success || class == Backpressure) {
		t.pipe.up() // the target answers: its pipeline may connect again
	}
	switch class {
	case Success:
		t.observe(false, trial, now)
		t.m.success.Inc()
		return end, false, nil
	case Backpressure:
		t.breaker.cancel(trial) // alive and answering: no verdict either way
		t.m.backpressure.Inc()
		return end, false, nil
	case ClientFault:
		t.breaker.cancel(trial)
		return end, false, err
	}
	t.observe(true, trial, now)
	if err == nil {
		t.m.failure.Inc()
		return end, false, nil
	}
	dialFailed, timedOut := errorKind(err)
	if timedOut {
		t.m.timeout.Inc()
		return end, false, &TargetError{Upstream: p.name, Target: t.url, Kind: ErrTimeout, Err: err}
	}
	t.m.failure.Inc()
	return end, dialFailed, &TargetError{Upstream: p.name, Target: t.url, Err: err}
}

// pick returns a target other than skip that admits a request at now, and
// the breaker trial to report back; nil when there is none.
func (p *Pool) pick(now int64, skip *target) (*target, int64) {
	n := uint32(len(p.targets))
	start := p.next.Add(1)
	watched := p.watched.Load()
	if p.leastPend {
		if t := p.leastPending(now, start, skip, watched); t != nil {
			if ok, trial := t.breaker.admit(now); ok {
				return t, trial
			}
		}
		// The least pending target's half-open breaker has no trial left:
		// fall back to the first that admits.
	}
	for i := range n {
		t := p.targets[(start+i)%n]
		if t == skip || !t.usable(now, watched) {
			continue
		}
		if ok, trial := t.breaker.admit(now); ok {
			return t, trial
		}
	}
	return nil, 0
}

// panicPick returns the next target by round robin among all of them,
// usable or not: see Do.
func (p *Pool) panicPick() *target {
	n := uint32(len(p.targets))
	if n == 0 {
		return nil
	}
	p.panics.Inc()
	return p.targets[p.panicNext.Add(1)%n]
}

// leastPending returns the usable target with the fewest requests in flight;
// ties go to the first from start, which rotates.
func (p *Pool) leastPending(now int64, start uint32, skip *target, watched bool) *target {
	n := uint32(len(p.targets))
	var best *target
	var bestPending int32
	for i := range n {
		t := p.targets[(start+i)%n]
		if t == skip || !t.usable(now, watched) {
			continue
		}
		if pend := t.pending.Load(); best == nil || pend < bestPending {
			best, bestPending = t, pend
		}
	}
	return best
}

// Timeout is the pool timeout: the longest Do may take.
func (p *Pool) Timeout() time.Duration { return p.timeout }

// Pending returns the number of requests in flight through p.
func (p *Pool) Pending() int {
	n := 0
	for _, t := range p.targets {
		n += int(t.pending.Load())
	}
	return n
}
