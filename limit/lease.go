package limit

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/sentinel-gateway/sentinel/limit/breaker"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// use is the permits one limit gave a request: their bucket and its
// lease generation, to return them when a later limit rejects.
type use struct {
	b   *bucket
	gen uint32
	// usedRef is not 0 when the permits were the Need part of a lease
	// call's grant: the store counts them from the call, not until the
	// lease expires, so they cannot return to the bucket (whose permits
	// may be used until then): returnUses returns them to the store.
	usedRef int64
	// ref is where the store counted the lease the permits came from
	// (0: unknown), for a reservation's return (see Reservation).
	ref int64
	// n is how many permits the limit took (a cost limit's estimate).
	n int64
	// alone: a concurrency limit's slot taken on the pod's share while
	// the store failed (see Limiter.takeSlot).
	alone bool
	// local says the permits came from the bucket's lease, without a
	// store call: decide counts these in sentinel_limit_local_hits_total,
	// once per request rather than once per limit (the counter is a word
	// every core's requests write).
	local bool
}

// one decides one limit. It returns where the permits came from (for a
// return when a later limit rejects), or a zero use.
func (l *Limiter) one(ctx context.Context, s *spec, tokens int64, strict bool, rid []byte, now int64) (verdict, use) {
	if tokens > s.most {
		return s.overMost(), use{}
	}
	if s.useRID {
		return l.direct(ctx, s, nil, tokens, rid), use{}
	}
	key := s.key()
	b := l.table.lookup(key, now)
	if b == nil {
		if d, ok := l.firstUse(s, tokens, strict, now); ok {
			return d, use{local: true}
		}
		b = l.table.get(key, now)
	}
	s.kept = b.key
	for attempt := 0; ; attempt++ {
		b.mu.Lock()
		if d, u, ok := b.decideLocally(s, tokens, now); ok {
			return d, u // decideLocally released b.mu
		}
		if f := b.fill; f != nil {
			if attempt >= 2 {
				// The call in flight outlasted two waits: this request asks
				// the store for its unleased tokens only and leaves the bucket's
				// lease to that call. Stragglers that each asked for a full
				// lease would, on a slow store, take the whole budget out
				// on leases and refuse clients under their limit.
				b.mu.Unlock()
				return l.direct(ctx, s, b, tokens, nil), use{}
			}
			l.waitFill(b, f, tokens)
			now = l.now().UnixNano()
			continue
		}
		contested := l.contestedNow(s, b, now)
		if !contested && b.answeredAt > 0 && l.heldByOthers(now) && !l.refusedAlone(s, b, now) {
			// Cut off from the others, or back before they read this
			// pod's heartbeat: see StoreReachable. (A key never answered
			// may be contested: the store decides it.)
			aloneWhileHeld.Inc()
			d := l.fallbackDecision(ctx, s, tokens, b, true, now)
			b.mu.Unlock()
			return d, use{}
		}
		f := &fill{done: make(chan struct{})}
		b.fill = f
		want := l.leaseSize(s, b, tokens, strict)
		ret := b.nextReport(s, now)
		ret.contested = contested
		if b.owes() {
			l.settleOwed(s, b, &ret, now)
		}
		b.mu.Unlock()
		return l.refill(ctx, s, b, f, tokens, want, ret)
	}
}

// overMost refuses more tokens than s can ever grant at once, without a
// store call.
func (s *spec) overMost() verdict {
	retry := s.window
	if retry <= 0 {
		retry = -1
	}
	return s.decision(false, 0, retry, 0)
}

// decideLocally decides from b alone when it can: from its leased permits
// (dropping them first when they expired) or from its cached refusal. When
// it decides (ok) it releases b.mu, which the caller holds.
func (b *bucket) decideLocally(s *spec, tokens, now int64) (d verdict, u use, ok bool) {
	if b.permits > 0 && now >= b.expires {
		b.expire()
	}
	if b.permits >= tokens {
		b.permits -= tokens
		b.uses += tokens
		d := s.decision(true, b.remaining+b.permits, 0, b.resetAt-now)
		u := use{b: b, gen: b.gen, ref: b.ref, local: true}
		b.mu.Unlock()
		return d, u, true
	}
	if r := b.rare; r != nil && now < r.deniedUntil && tokens >= r.deniedNeed {
		d := s.decision(false, 0, b.retryFrom(now), b.resetAt-now)
		b.mu.Unlock()
		cachedDenials.Inc()
		return d, use{}, true
	}
	return verdict{}, use{}, false
}

// expire drops b's leased permits, which expired unused: the next lease
// call returns them, and the next lease is smaller (leaseSize). The caller
// holds b.mu.
func (b *bucket) expire() {
	expiredPermits.Add(int(b.permits))
	b.rateState().wasted = true
	b.expired += b.permits
	b.permits = 0
}

// waitFill waits for b's lease call in flight f, its tokens counted in the
// bucket's demand meanwhile (see leaseSize). The caller holds b.mu;
// waitFill releases it.
func (l *Limiter) waitFill(b *bucket, f *fill, tokens int64) {
	r := b.rateState()
	r.demand += tokens
	b.mu.Unlock()
	l.wait(f)
	b.mu.Lock()
	r.demand -= tokens
	b.mu.Unlock()
}

// wait blocks until the in-flight lease call ends, at most the store deadline.
func (l *Limiter) wait(f *fill) {
	t := time.NewTimer(l.cfg.StoreTimeout)
	defer t.Stop()
	select {
	case <-f.done:
	case <-t.C:
	}
}

// useWithin is how long after a store call its Need permits may still be
// used: the caller waits for the answer at most limits.store_timeout (a later
// answer's permits are returned). The answer arrives after the store dated the call,
// so counting the permits from the call alone would let a window see them up
// to that transit late. Capped by the lease lifetime (at least a thirtieth
// of the window), which is how long past the call the store counted them
// before they were counted apart: an answer slower than the lifetime (with
// the defaults, 50 ms against at least 33 ms for a 1 s window) is covered no
// worse than before, and the permits of a short window are not counted much
// longer than they are used.
// An in-process store answers at once.
func (l *Limiter) useWithin(s *spec) time.Duration {
	if !l.shared {
		return 0
	}
	return min(l.cfg.StoreTimeout, max(s.ttl, time.Millisecond))
}

// maxLogLease caps sliding_log leases below limits.max_lease: each permit is
// a sorted-set member that the lease's script writes (and the next one
// re-dates when the pod reports it used) while Redis runs nothing else, so a
// grant's cost grows with its size (BenchmarkRedisSlidingLogGrant in
// limit/store measures it).
const maxLogLease = 64

// leaseSize is how many permits to ask for: what this pod's traffic on the
// key uses within a lease lifetime (learned: doubled when a lease ran out
// within 3/4 of its lifetime, halved when permits expired unused), capped by a share of the remaining
// budget so that it falls to 1 near the limit; exactly tokens when strict.
// A key starts at 1, the request's tokens and no lease, and leaves it only
// when its own rate says a lease would be used (leaseRate.fits): a lease of 1 runs
// out at once, so its running out says nothing, and a key that comes back
// about once per lease lifetime, leased 2 on one close pair of requests,
// would mostly give its permit back unused.
// The caller holds b.mu.
func (l *Limiter) leaseSize(s *spec, b *bucket, tokens int64, strict bool) int64 {
	if strict || b.late.Load() > 0 {
		// An abandoned call of this bucket may still hold a lease in the
		// store until its answer comes: ask for no more than needed, so
		// that a slow store does not let leases pile up.
		return tokens
	}
	budget := b.remaining
	if budget < 0 {
		budget = s.limit
	}
	pods := int64(max(1, l.livePods()))
	most := min(l.cfg.MaxLease, s.most)
	if s.params.Algorithm == store.SlidingLog {
		most = min(most, maxLogLease)
	}
	limit := min(max(budget/(4*pods), 1), most)
	now := l.now().UnixNano()
	b.learnRate(now, tokens)
	// Without a rate yet (a key's first call): a lease of one, as the size
	// starts, and no requests waiting (their demand would have made one).
	size, demand := int64(1), int64(0)
	if r := b.rate; r != nil {
		switch {
		case r.size == 0:
			r.size = 1
		case r.wasted:
			r.size = max(1, r.size/2)
		case now-b.leasedAt < int64(s.ttl)*3/4 && (r.size > 1 || r.fits(s.ttl)):
			r.size = min(2*r.size, l.cfg.MaxLease)
		}
		r.wasted = false
		size, demand = r.size, r.demand
	}
	b.leasedAt = now
	// Requests waiting on the fill in flight will retry after it: ask for
	// them too, so that they do not each make a call.
	demand = min(demand+tokens, max(budget, 1), most)
	return max(min(size, limit), demand, tokens)
}

// rateSamples is how many gaps between a key's uses leaseRate.fits averages
// before it trusts the average: one close pair of requests is chance.
const rateSamples = 2

// learnRate takes the gaps between the key's uses since its last lease
// call, made at b.leasedAt, into the rate's gap (a moving average of
// weight 1/4), for a lease call at now that asks for tokens. The caller
// holds b.mu.
func (b *bucket) learnRate(now, tokens int64) {
	if b.leasedAt > 0 && b.uses > 0 {
		r := b.rateState()
		sample := (now - b.leasedAt) / b.uses
		if r.gaps == 0 {
			r.gap = sample
		} else {
			r.gap += (sample - r.gap) / 4
		}
		r.gaps = min(r.gaps+1, rateSamples)
	}
	b.uses = tokens
}

// fits reports whether the key's rate fills a lease beyond the
// request's tokens: on average two uses or more within a lease lifetime,
// so that the next one comes within it (86% of the time for evenly random
// arrivals). From a single gap only when it is under a quarter of the
// lifetime: a burst, its requests a store round trip apart, leases at its
// second call. Of keys that come back twice a second (lifetime 250ms) one
// in eight has a first gap that short and leases once: the permit comes
// back unused, which halves the size to 1, and from then on the average
// decides.
// The caller holds b.mu.
func (r *leaseRate) fits(ttl time.Duration) bool {
	if r.gaps < rateSamples {
		return r.gaps > 0 && r.gap <= int64(ttl)/4
	}
	return r.gap <= int64(ttl)/2
}

// refill reports ret and asks the store for a lease of want permits (at
// least tokens: all or nothing) and takes tokens from it. The caller holds
// the bucket's fill and has emptied the bucket (endLease); refill releases
// the fill and returns where the request's permits came from, to return them
// (a zero use when none were granted).
func (l *Limiter) refill(ctx context.Context, s *spec, b *bucket, f *fill, tokens, want int64, ret report) (verdict, use) {
	// The call's own clock readings (before it was sent, when it was
	// answered) date the lease: no reading of their own beside them.
	req, res, at, err := l.callLease(ctx, s, b, tokens, want, ret)
	sent, now := at.sent, at.answered
	b.mu.Lock()
	defer func() {
		if b.fill == f { // one fill at a time: stragglers do not replace it (see one)
			b.fill = nil
		}
		b.mu.Unlock()
		close(f.done)
	}()
	if err != nil {
		return l.leaseFailed(ctx, s, b, tokens, ret, err, now), use{}
	}
	if n := ret.unleasedTotal(); n > 0 {
		reportedUnleased.Add(int(n))
	}
	leaseSize.Update(float64(want))
	if prevAt := b.seqAt; l.checkSeq(s, b, res, sent, now) {
		l.reportLost(s, b, res, &ret, prevAt, now)
	}
	b.remaining, b.slight = res.Remaining, l.slight(s, res.Remaining)
	b.answeredAt = now
	if b.alone != nil {
		b.alone.fallbackUsed = 0
	}
	b.resetAt = now + int64(res.Reset)
	b.setFree(res.FirstFree)
	if res.Reset < 0 {
		b.setFree(-1) // a bucket that never refills
	}
	g := grant{res: res}
	if res.Granted >= tokens && l.recovering(s, b, now) {
		g.res, g.keptRef, g.kept = l.keepShare(ctx, s, b, req, res, tokens, l.drains(s, b, now), now)
	}
	switch {
	case g.res.Granted >= tokens && b.leased > 0:
		u := l.grantBeside(ctx, s, b, req, g, tokens)
		return s.decision(true, b.remaining+b.permits, 0, b.resetAt-now), u
	case g.res.Granted >= tokens:
		l.keepLease(ctx, s, b, g, tokens, sent, now)
		if !g.kept {
			b.cacheSpent(res, now)
		}
		return s.decision(true, b.remaining+b.permits, 0, b.resetAt-now), freshUse(b, g.res)
	}
	b.cacheRefusal(g.res, tokens, now)
	return s.decision(false, 0, b.retryFrom(now), b.resetAt-now), use{}
}

// callLease sends a bucket's lease call: ret's report and a lease of want
// permits, at least tokens. It counts the permits it returns and reports
// used, and returns the local share's count of the returned ones, whether
// or not the answer arrives: a return is never sent twice.
func (l *Limiter) callLease(ctx context.Context, s *spec, b *bucket, tokens, want int64, ret report) (*store.LeaseRequest, store.LeaseResult, callTimes, error) {
	req := &store.LeaseRequest{Key: []byte(b.key), Kept: b.key, Want: want, Need: tokens, LeaseTTL: s.ttl, UseWithin: l.useWithin(s), Return: ret.unused, ReturnRef: ret.ref, Used: ret.used, Unleased: ret.unleased, UnleasedAgo: ret.unleasedAgo, UnleasedBefore: ret.unleasedBefore,
		Level: ret.level, LevelAgo: ret.levelAgo, LevelKnown: ret.levelKnown,
		// Run after its caller gives up, the call would grant what only
		// returns, and take unleased permits that the caller reports again.
		RunWithin: l.cfg.StoreTimeout}
	res, at, err := l.lease(ctx, s, req, b, ret.at, ret.contested)
	if ret.unused > 0 {
		returnedPermits.Add(int(ret.unused))
		if ret.localRef != 0 { // 0: owed permits, which the local share did not take back either
			l.returnLocally(ctx, s, ret.unused, ret.localRef)
		}
	}
	if ret.used > 0 {
		reportedUsed.Add(int(ret.used))
	}
	return req, res, at, err
}

// leaseFailed decides a request whose bucket's lease call failed with err,
// by the failure policy. The caller holds b.mu.
func (l *Limiter) leaseFailed(ctx context.Context, s *spec, b *bucket, tokens int64, ret report, err error, now int64) verdict {
	open := errors.Is(err, ErrStoreUnavailable)
	if !errors.Is(err, errGaveUp) {
		// Not sent, or answered without them: the next call reports
		// them. (A call given up on puts them back when it ends without
		// an answer in time; see callStore.)
		b.reportLater(ret.at, &s.params, ret.unleased, ret.unleasedAgo, ret.unleasedBefore)
	}
	// The store's last answer counted these as this pod's (leased);
	// unused, they are room the pod need not share.
	b.failing(now)
	b.alone.fallbackUsed -= ret.unused
	return l.fallbackDecision(ctx, s, tokens, b, open || l.breakerOut(b), now)
}

// grant is a lease call's answer that covers the request: the store's
// result, and whether the local share counted it already and where
// (keepShare).
type grant struct {
	res     store.LeaseResult
	kept    bool
	keptRef int64
}

// grantBeside takes the request's tokens from a grant g while b holds a
// lease already. One fill runs at a time (a request that outwaits it
// decides alone, see one), so this is a guard: the bucket keeps that lease,
// and this one's permits beyond the request's return to the store. It
// returns the request's use, which is not from the bucket's lease. The
// caller holds b.mu.
func (l *Limiter) grantBeside(ctx context.Context, s *spec, b *bucket, req *store.LeaseRequest, g grant, tokens int64) use {
	if extra := g.res.Granted - tokens; extra > 0 {
		go l.returnPermits(req, extra, g.res.Ref)
		if g.kept {
			l.returnLocally(ctx, s, extra, g.keptRef)
		}
	}
	if !g.kept {
		l.useLocally(ctx, s, nil, tokens, g.res.Remaining)
	}
	if g.res.UsedRef != 0 {
		return freshUse(b, g.res)
	}
	return use{}
}

// keepLease puts the permits of grant g beyond the request's tokens into b,
// as its lease. The permits expire one lease lifetime after the call was
// sent (before the store dated it); the store counts them until then plus
// the window, and a return is worth sending until about half a window after
// their expiry. The request's unleased permits count apart (UsedRef) when the
// store dates them at the call: they are not part of the lease that
// returns. The caller holds b.mu.
func (l *Limiter) keepLease(ctx context.Context, s *spec, b *bucket, g grant, tokens, sent, now int64) {
	leased := g.res.Granted
	if g.res.UsedRef != 0 {
		leased -= tokens
	}
	l.kept.spillShare(b, now, l.shareSlack()) // the last lease's count, if b holds it
	b.permits, b.leased, b.ref = g.res.Granted-tokens, leased, g.res.Ref
	b.localRef = g.keptRef
	if !g.kept {
		b.localRef = l.useLocally(ctx, s, b, g.res.Granted, g.res.Remaining)
	}
	b.expires = sent + int64(s.ttl)
	if s.params.Algorithm == store.Quota {
		b.clipToPeriod(g.res, sent)
	}
	b.forgetRefusal()
}

// clipToPeriod ends a quota's lease at the end of the period it was
// granted in: its permits count in that period only, so one used past the
// boundary would be a use the next period never counted. The store's Reset
// is until the period's end from when it ran the call, after sent: counted
// from sent it ends the lease a little early, never late. Unused permits
// return to the period until its end (later the store drops a return):
// a quota's permits do not stop counting a window after the lease expires,
// so a lease that expired long ago is still worth returning. The caller
// holds b.mu.
func (b *bucket) clipToPeriod(res store.LeaseResult, sent int64) {
	end := sent + int64(res.Reset)
	b.expires = min(b.expires, end)
}

// cacheRefusal remembers the store's refusal of tokens in b, so that the
// key is refused locally until its retry-after (at most maxCachedDenial).
// The caller holds b.mu.
func (b *bucket) cacheRefusal(res store.LeaseResult, tokens, now int64) {
	r := b.rareState()
	r.retryAfter, r.deniedNeed, r.deniedAt = int64(res.RetryAfter), tokens, now
	switch {
	case b.late.Load() > 0:
		// The refusal may come from this pod's own late leases, which
		// return as soon as they are answered: do not cache it.
	case res.RetryAfter < 0:
		r.deniedUntil = now + int64(maxCachedNeverDenial)
	case res.RetryAfter > 0:
		r.deniedUntil = now + int64(min(res.RetryAfter, maxCachedDenial))
	}
}

// cacheSpent remembers that the grant res, answered at now, left the key
// no budget: once b's lease is used, the key is refused locally until its
// first counted permit leaves (at most maxCachedDenial), as the store's
// refusal of the next call would be cached (cacheRefusal). Without it a
// flooded key cost two store calls for every permit that freed: the
// grant, and a refusal. The caller holds b.mu.
func (b *bucket) cacheSpent(res store.LeaseResult, now int64) {
	if res.Remaining > 0 || res.FirstFree <= 0 || b.late.Load() > 0 {
		return
	}
	b.cacheRefusal(store.LeaseResult{RetryAfter: res.FirstFree}, 1, now)
}

// freshUse is the use of a request's permits granted by a lease call
// of b. The caller holds b.mu.
func freshUse(b *bucket, res store.LeaseResult) use {
	if res.UsedRef != 0 {
		return use{b: b, usedRef: res.UsedRef}
	}
	return use{b: b, gen: b.gen, ref: b.ref}
}

// direct decides with one store call, outside the local buckets: sliding_log
// with a trusted request ID, which the store must see to skip a retry, and a
// request that outwaited its bucket's slow lease call (rid nil; b is that bucket,
// which reports what the local policy lets through here).
func (l *Limiter) direct(ctx context.Context, s *spec, b *bucket, tokens int64, rid []byte) verdict {
	// A late answer's permit stays counted: its request ID is recorded.
	req := &store.LeaseRequest{Key: bytes.Clone(s.key()), Want: tokens, Need: tokens, RequestID: bytes.Clone(rid),
		RequestIDRetries: l.cfg.IDRetries(), RequestIDWindow: l.cfg.IDWindow(), UseWithin: l.useWithin(s)}
	res, _, err := l.lease(ctx, s, req, nil, 0, false)
	if err != nil {
		open := errors.Is(err, ErrStoreUnavailable)
		if b == nil {
			return l.fallbackDecision(ctx, s, tokens, nil, open, 0)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		now := l.now().UnixNano()
		b.failing(now)
		return l.fallbackDecision(ctx, s, tokens, b, open || l.breakerOut(b), now)
	}
	leaseSize.Update(float64(tokens))
	countRepeat(&res)
	if b != nil && res.Granted >= tokens {
		b.mu.Lock()
		now, kept := l.now().UnixNano(), false
		if l.recovering(s, b, now) {
			res, _, kept = l.keepShare(ctx, s, b, req, res, tokens, l.drains(s, b, now), now)
		}
		b.mu.Unlock()
		if kept {
			return s.decision(true, res.Remaining, res.RetryAfter, int64(res.Reset))
		}
	}
	l.useLocally(ctx, s, nil, res.Granted, res.Remaining)
	return s.decision(res.Granted >= tokens || res.Duplicate, res.Remaining, res.RetryAfter, int64(res.Reset))
}

// callTimes are a store call's clock readings (unix nanoseconds): sent
// just before the call, answered when it returned (or failed; sent when
// it was not made).
type callTimes struct{ sent, answered int64 }

// lease makes one store call under the deadline and the breaker; req gets
// the spec's params. With a bucket, the permits of an answer that comes after
// the deadline return to the store (see callStore).
func (l *Limiter) lease(ctx context.Context, s *spec, req *store.LeaseRequest, b *bucket, unleasedAt int64, contested bool) (store.LeaseResult, callTimes, error) {
	start := l.now().UnixNano()
	br := l.breakers.For(req.Key)
	ok, probe := br.Allow(start)
	if !ok {
		storeCallsSkipped.Inc()
		return store.LeaseResult{}, callTimes{start, start}, ErrStoreUnavailable
	}
	req.Params = l.storeParams(s, start, contested)
	res, err := l.callStore(ctx, req, b, unleasedAt, callBreaker{br, probe})
	timedOut := errors.Is(err, errGaveUp) || errors.Is(err, store.ErrStoreLate) || errors.Is(err, context.DeadlineExceeded)
	if err != nil {
		storeErrors.Inc()
		if timedOut {
			storeCallsTimeout.Inc()
		} else {
			storeCallsError.Inc()
		}
		end := l.now().UnixNano()
		if !errors.Is(err, errGaveUp) { // callStore recorded that one
			br.Failure(probe, end)
		}
		l.breakers.Failed(req.Key)
		return store.LeaseResult{}, callTimes{start, end}, err // the store's errors name the store and the key
	}
	storeCallsOK.Inc()
	br.Success(probe)
	end := l.now().UnixNano()
	if took := end - start; took > 0 {
		old := l.rtt.Load()
		l.rtt.Store(old + (took-old)/8) // a lost update among racing calls is harmless
	}
	return res, callTimes{start, end}, nil
}

// breakerOut tells that the breaker of b's store node is not closed after
// a failed call: the call was the half-open probe, or its failure opened
// the breaker. The store is out for this pod (as when a call is skipped),
// not slow for one call: the probe's failure is decided like the calls the
// open breaker skips, not like a timeout among answered calls.
func (l *Limiter) breakerOut(b *bucket) bool {
	return l.breakers.For([]byte(b.key)).State() != breaker.Closed
}

// ErrStoreUnavailable is returned while the store's breaker is open.
var ErrStoreUnavailable = errors.New("limit: store unavailable")
