package limit

import (
	"bytes"
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Limiter decides whether a request may pass every limit that applies to it.
// Each pod keeps, per active key, a local bucket of permits leased from the
// store; a request is approved from it without a store call, and only a pod
// whose bucket is empty asks the store for a new lease (one call shared by
// the concurrent requests that found it empty). The store counts every lease
// whole, so the pods together never approve more than the limit in any
// window; the lease size shrinks to 1 as the budget nears its end.
type Limiter struct {
	cfg      Config
	alg      store.Algorithm // limits.algorithm, parsed once
	policy   FailurePolicy   // limits.on_store_failure, parsed once
	store    store.Store
	fallback *store.MemoryStore // the local policy's per-pod limits
	// shared: the store is another process's (Redis): it can fail (the
	// local policy takes over) and its answers take a round trip. When
	// false the store is in-process (MemoryStore) and answers at once.
	shared   bool
	adj      Adjuster
	livePods func() int
	catalog  *catalog.Catalog
	now      func() time.Time

	table *bucketTable
	// breakers holds one store breaker per store node (nodes maps a key to
	// its node; nil: one node, breakers[0]), so that a failed node of a
	// cluster sends only its keys to the failure policy.
	breakers [store.MaxNodes]storeBreaker
	nodes    store.NodeMap
	rtt      atomic.Int64 // moving average of a store call, nanos

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// Limits on the local refusal cache: a refusal is remembered for the store's
// retry-after, but at most this long, so that a key comes back to the store
// soon after budget frees up.
const (
	maxCachedDenial      = 50 * time.Millisecond
	maxCachedNeverDenial = time.Second
)

// NewLimiter returns a Limiter over store. cfg must have its defaults set.
func NewLimiter(cfg Config, st store.Store, opts Options) (*Limiter, error) {
	if st == nil {
		return nil, errors.New("limit: NewLimiter needs a store")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LivePods == nil {
		opts.LivePods = func() int { return 1 }
	}
	alg, _ := store.ParseAlgorithm(cfg.Algorithm)       // validated above
	policy, _ := ParseFailurePolicy(cfg.OnStoreFailure) // validated above
	l := &Limiter{
		cfg:      cfg,
		alg:      alg,
		policy:   policy,
		store:    st,
		fallback: store.NewMemoryStore(store.MemoryOptions{MaxKeys: cfg.MaxKeys, Now: opts.Now}),
		adj:      opts.Adjuster,
		livePods: opts.LivePods,
		catalog:  opts.Catalog,
		now:      opts.Now,
		table:    newBucketTable(cfg.MaxKeys),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	l.nodes, _ = st.(store.NodeMap)
	for i := range l.breakers {
		l.breakers[i] = storeBreaker{failures: int64(cfg.BreakerFailures), cooldown: cfg.BreakerCooldown}
		l.breakers[i].onChange = func(to int32) { l.breakerChanged(i, to) }
		l.nodeMetrics(i)
	}
	_, local := st.(*store.MemoryStore)
	l.shared = !local
	live.Store(l, struct{}{})
	go l.sweepLoop()
	return l, nil
}

// Close stops the background sweep and the fallback store. It does not close
// the store, which belongs to the caller. Idempotent.
func (l *Limiter) Close() {
	l.stopOnce.Do(func() {
		close(l.stop)
		<-l.done
		l.fallback.Close()
		live.Delete(l)
	})
}

func (l *Limiter) sweepLoop() {
	defer close(l.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	idle := max(10*time.Second, 2*l.cfg.Window)
	for {
		select {
		case <-l.stop:
			return
		case now := <-t.C:
			l.table.sweep(now.Add(-idle).UnixNano())
		}
	}
}

// LimiterStatus is the limiter's state for GET /v1/state.
type LimiterStatus struct {
	Breaker        string `json:"store_breaker"`
	OnStoreFailure string `json:"on_store_failure"`
	LocalFastPath  bool   `json:"local_fast_path"`
	LocalBuckets   int    `json:"local_buckets"`
	LivePods       int    `json:"live_pods"`
}

// Status reports the store breaker and the local state.
func (l *Limiter) Status() LimiterStatus {
	return LimiterStatus{
		Breaker:        breakerStateName(l.breakerState()),
		OnStoreFailure: l.cfg.OnStoreFailure,
		LocalFastPath:  l.cfg.FastPath(),
		LocalBuckets:   l.table.len(),
		LivePods:       max(1, l.livePods()),
	}
}

// StoreHealthy reports whether decisions go to the store (every node's
// breaker is closed).
func (l *Limiter) StoreHealthy() bool { return l.breakerState() == breakerClosed }

// breakerState is the worst state of the store breakers.
func (l *Limiter) breakerState() int32 {
	st := breakerClosed
	for i := range l.breakers {
		st = max(st, l.breakers[i].state.Load())
	}
	return st
}

// breakerFor returns the breaker of the store node that holds key.
func (l *Limiter) breakerFor(key []byte) *storeBreaker {
	if l.nodes == nil {
		return &l.breakers[0]
	}
	return &l.breakers[min(max(l.nodes.NodeOf(key), 0), store.MaxNodes-1)]
}

// keyBufLen is the room for a key on the stack; longer keys allocate.
const keyBufLen = 160

// spec is one limit that applies to a request.
type spec struct {
	scope  Scope
	params store.Params
	limit  int64         // Limit or Capacity, as shown in decisions
	most   int64         // the most tokens one decision can take
	window time.Duration // for RateLimit-Policy
	ttl    time.Duration // lease lifetime
	shadow bool
	useRID bool // sliding_log with a trusted request ID: always ask the store
	// The key is buf[:keyLen], or big when it did not fit. The spec never
	// holds a slice of its own buf, so that it can stay on the stack.
	keyLen int
	big    string
	buf    [keyBufLen]byte
}

// setKey records a key built by appending to s.buf[:0].
func (s *spec) setKey(k []byte) {
	if len(k) <= keyBufLen && cap(k) == keyBufLen {
		s.keyLen, s.big = len(k), ""
		return
	}
	s.keyLen, s.big = 0, string(k)
}

// key returns the spec's key; it allocates only for a key longer than the
// buffer.
func (s *spec) key() []byte {
	if s.big != "" {
		return []byte(s.big)
	}
	return s.buf[:s.keyLen]
}

// Allow decides one request. It returns within the store deadline and
// allocates nothing when every limit is served from a local lease.
func (l *Limiter) Allow(ctx context.Context, req *Request) Decision {
	start := l.now()
	now := start.UnixNano()
	tokens := max(req.Tokens, 1)
	mult, strict := 1.0, !l.cfg.FastPath()
	if l.adj != nil {
		m, s := l.adj.LimitAdjustment()
		if m > 0 && m < 1 {
			mult = m
		}
		strict = strict || s
	}
	var specs [4]spec
	n := l.specs(&specs, req, mult)
	counters := catalog.CountersFor(req.Tenant, req.Resource)
	counters.Requests.Inc()

	var taken [4]taking
	best := Decision{Allowed: true, Remaining: math.MaxInt64}
	shadowed := false
	for i := 0; i < n; i++ {
		s := &specs[i]
		d, tk := l.one(ctx, s, tokens, strict, req.RequestID, now)
		if d.Unavailable {
			l.refund(taken[:i], specs[:i], tokens)
			counters.Blocked.Inc()
			l.observe(start)
			return d
		}
		if !d.Allowed {
			if s.shadow || l.cfg.Shadow {
				shadowed = true
				counters.ShadowBlocked.Inc()
				if d.Remaining <= best.Remaining {
					best = d
				}
				continue
			}
			l.refund(taken[:i], specs[:i], tokens)
			counters.Blocked.Inc()
			l.observe(start)
			return d
		}
		taken[i] = tk
		if d.Remaining < best.Remaining {
			best = d
		}
	}
	if n == 0 {
		best.Remaining = 0
	}
	best.Allowed, best.Shadowed = true, shadowed
	if shadowed {
		best.RetryAfter = 0
	}
	counters.Allowed.Inc()
	l.observe(start)
	return best
}

func (l *Limiter) observe(start time.Time) {
	decisionLatency.Update(float64(l.now().Sub(start)) / 1e6)
}

// specs fills the limits that apply to req and returns how many: the rule
// first (usually the tightest), then tenant, API key and IP.
func (l *Limiter) specs(specs *[4]spec, req *Request, mult float64) int {
	n := 0
	if l.catalog != nil {
		if r, anon := l.catalog.Lookup(req.Tenant, req.Resource, len(req.IP) > 0); r != nil {
			s := &specs[n]
			s.scope = ScopeRule
			s.params = r.Params
			s.shadow = r.Shadow
			if s.params.Algorithm == store.TokenBucket {
				s.params.Capacity = scale(s.params.Capacity, mult)
				s.params.RefillRate *= mult
			} else {
				s.params.Limit = scale(s.params.Limit, mult)
			}
			s.setKey(appendRuleKey(s.buf[:0], req, anon))
			l.finish(s, req)
			n++
		}
	}
	if l.cfg.Tenant > 0 && req.Tenant != "" {
		s := l.baseSpec(&specs[n], ScopeTenant, scale(l.tenantLimit(req.Plan), mult))
		s.setKey(store.AppendKeyStrings(s.buf[:0], "", "tenant", req.Tenant))
		l.finish(s, req)
		n++
	}
	if l.cfg.APIKey > 0 && len(req.APIKey) > 0 {
		s := l.baseSpec(&specs[n], ScopeAPIKey, scale(l.cfg.APIKey, mult))
		s.setKey(store.AppendKey(s.buf[:0], "", "key", req.APIKey))
		l.finish(s, req)
		n++
	}
	if l.cfg.IP > 0 && len(req.IP) > 0 {
		s := l.baseSpec(&specs[n], ScopeIP, scale(l.cfg.IP, mult))
		s.setKey(store.AppendKey(s.buf[:0], "", "ip", req.IP))
		l.finish(s, req)
		n++
	}
	return n
}

// baseSpec makes s a limit of the base configuration (tenant, API key, IP)
// for scope, under the configured default algorithm.
func (l *Limiter) baseSpec(s *spec, scope Scope, limit int64) *spec {
	s.scope, s.shadow = scope, false
	s.params = l.baseParams(limit)
	return s
}

// scale applies the adaptive multiplier; a limit that is on stays >= 1.
func scale(limit int64, mult float64) int64 {
	if mult >= 1 || limit <= 0 {
		return limit
	}
	return max(1, int64(float64(limit)*mult))
}

// tenantLimit is limits.tenant times the plan's multiplier.
func (l *Limiter) tenantLimit(plan string) int64 {
	base := float64(l.cfg.Tenant)
	if l.catalog != nil {
		base *= l.catalog.PlanMultiplier(plan)
	}
	return int64(math.Floor(min(base, store.MaxLimit)))
}

// baseParams are the params of a base limit under the configured default
// algorithm.
func (l *Limiter) baseParams(limit int64) store.Params {
	if l.alg == store.TokenBucket {
		return store.Params{Algorithm: l.alg, Capacity: limit, RefillRate: float64(limit) / l.cfg.Window.Seconds()}
	}
	return store.Params{Algorithm: l.alg, Limit: limit, Window: l.cfg.Window}
}

// mostOf is the most tokens one decision under p can take: its capacity,
// and at most MaxLogTokens for sliding_log.
func mostOf(p *store.Params) int64 {
	switch p.Algorithm {
	case store.TokenBucket:
		return p.Capacity
	case store.SlidingLog:
		return min(p.Limit, store.MaxLogTokens)
	}
	return p.Limit
}

// finish derives the shown limit and window and the lease lifetime.
func (l *Limiter) finish(s *spec, req *Request) {
	p := &s.params
	s.useRID = p.Algorithm == store.SlidingLog && len(req.RequestID) > 0
	s.most = mostOf(p)
	if p.Algorithm == store.TokenBucket {
		s.limit = p.Capacity
		s.window = 0
		if p.RefillRate > 0 {
			s.window = time.Duration(float64(p.Capacity) / p.RefillRate * float64(time.Second))
		}
		// A leased token is taken at once: the lifetime only bounds how
		// long unused tokens stay local.
		s.ttl = min(l.cfg.LeaseTTL, 100*time.Millisecond)
		return
	}
	s.limit, s.window = p.Limit, p.Window
	// A lease's unused permits count in the store until it expires plus a
	// window, so a long lifetime wastes budget: keep it to 1/30 of the window, but at
	// least four store round trips, or leases would expire on arrival
	// (shorter lifetimes measured worse: leases expired before use).
	s.ttl = max(time.Millisecond, min(l.cfg.LeaseTTL, max(p.Window/30, 4*time.Duration(l.rtt.Load()))))
}

// taking is the permits one limit gave a request: their bucket and its
// lease generation, for a refund when a later limit rejects.
type taking struct {
	b   *bucket
	gen uint64
	// usedRef is not 0 when the permits were the Need part of a lease
	// call's grant: the store counts them from the call, not until the
	// lease expires, so they cannot go back into the bucket (whose permits
	// may be used until then) and a refund returns them to the store.
	usedRef int64
}

// one decides one limit. It returns where the permits came from (for a
// refund when a later limit rejects), or a zero taking.
func (l *Limiter) one(ctx context.Context, s *spec, tokens int64, strict bool, rid []byte, now int64) (Decision, taking) {
	if tokens > s.most {
		// More than the limit can ever grant at once: no store call.
		retry := s.window
		if retry <= 0 {
			retry = -1
		}
		return s.decision(false, 0, retry, 0), taking{}
	}
	if s.useRID {
		return l.direct(ctx, s, nil, tokens, rid), taking{}
	}
	b := l.table.get(s.key(), now)
	for attempt := 0; ; attempt++ {
		b.mu.Lock()
		if b.permits > 0 && now >= b.expires {
			expiredPermits.Add(int(b.permits))
			b.wasted = true
			b.expired += b.permits
			b.permits = 0
		}
		if b.permits >= tokens {
			b.permits -= tokens
			d := s.decision(true, b.remaining+b.permits, 0, b.resetAt-now)
			tk := taking{b: b, gen: b.gen}
			b.mu.Unlock()
			localHits.Inc()
			return d, tk
		}
		if now < b.deniedUntil && tokens >= b.deniedNeed {
			d := s.decision(false, 0, b.retryFrom(now), b.resetAt-now)
			b.mu.Unlock()
			cachedDenials.Inc()
			return d, taking{}
		}
		if f := b.fill; f != nil {
			if attempt >= 2 {
				// The call in flight outlasted two waits: this request asks
				// the store for its own tokens only and leaves the bucket's
				// lease to that call. Stragglers that each asked for a full
				// lease would, on a slow store, take the whole budget out
				// on leases and refuse clients under their limit.
				b.mu.Unlock()
				return l.direct(ctx, s, b, tokens, nil), taking{}
			}
			b.demand += tokens
			b.mu.Unlock()
			l.wait(f)
			b.mu.Lock()
			b.demand -= tokens
			b.mu.Unlock()
			now = l.now().UnixNano()
			continue
		}
		f := &fill{done: make(chan struct{})}
		b.fill = f
		want := l.leaseSize(s, b, tokens, strict)
		ret := b.takeReturn(now)
		if s.params.Algorithm == store.TokenBucket {
			ret.used = 0 // a taken token counts from its grant: nothing to re-date
		}
		ret.spent, ret.spentAgo, ret.spentBefore = b.spentParts(now, s)
		ret.at = now
		if s.params.Algorithm == store.SlidingLog && ret.spent > store.MaxLogTokens {
			b.addSpent(ret.spent-store.MaxLogTokens, now-int64(ret.spentAgo), spentWidth(s.params.Window))
			ret.spent = store.MaxLogTokens
		}
		b.mu.Unlock()
		return l.refill(ctx, s, b, f, tokens, want, ret)
	}
}

// giveBack is what the next lease call reports about a bucket's previous
// lease: its n unused permits go back to the store, and the store re-dates
// the used ones to the call (see LeaseRequest.Used); and the permits the
// local policy let through since the last call that reached the store
// (LeaseRequest.Spent).
type giveBack struct {
	n, used, ref, spent int64
	spentAgo            time.Duration // since the last spent permit (LeaseRequest.SpentAgo)
	spentBefore         [store.SpentParts]store.SpentPart
	at                  int64 // unix nanos the spent times are measured from
	localRef            int64 // where the local share counted the lease (creditLocally)
}

// takeReturn empties the bucket of its unused permits (expired or too few
// for the request) and returns what to report to the store: at most what
// the lease granted, and nothing once the lease no longer counts anyway.
// The caller holds b.mu.
func (b *bucket) takeReturn(now int64) giveBack {
	n := min(b.permits+b.expired, b.leased)
	used := b.leased - n
	b.permits, b.expired, b.leased = 0, 0, 0
	b.gen++ // refunds of the old lease's permits are dropped from now on
	if now >= b.returnBy {
		return giveBack{}
	}
	return giveBack{n: n, used: used, ref: b.ref, localRef: b.localRef}
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
// answer is given back). The answer arrives after the store dated the call,
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
// re-dates) while Redis runs nothing else. On this project's 2-core test
// machine a grant of 1,000 members took 2.7-4.5 ms of Redis' time, one of 64
// about 0.4 ms.
const maxLogLease = 64

// leaseSize is how many permits to ask for: what this pod's traffic on the
// key uses within a lease lifetime (learned: doubled when a lease ran out
// within 3/4 of its lifetime, halved when permits expired unused), capped by a share of the remaining
// budget so that it falls to 1 near the limit; exactly tokens when strict.
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
	switch {
	case b.size == 0:
		b.size = 1
	case b.wasted:
		b.size = max(1, b.size/2)
	case now-b.leasedAt < int64(s.ttl)*3/4:
		b.size = min(2*b.size, l.cfg.MaxLease)
	}
	b.wasted, b.leasedAt = false, now
	// Requests waiting on the fill in flight will retry after it: ask for
	// them too, so that they do not each make a call.
	demand := min(b.demand+tokens, max(budget, 1), most)
	return max(min(b.size, limit), demand, tokens)
}

// refill gives back ret and asks the store for a lease of want permits (at
// least tokens: all or nothing) and takes tokens from it. The caller holds
// the bucket's fill and has emptied the bucket (takeReturn); refill releases
// the fill and returns where the request's permits came from, for a refund
// (a zero taking when none were granted).
func (l *Limiter) refill(ctx context.Context, s *spec, b *bucket, f *fill, tokens, want int64, ret giveBack) (Decision, taking) {
	sent := l.now().UnixNano()
	req := &store.LeaseRequest{Key: []byte(b.key), Want: want, Need: tokens, LeaseTTL: s.ttl, UseWithin: l.useWithin(s), Return: ret.n, ReturnRef: ret.ref, Used: ret.used, Spent: ret.spent, SpentAgo: ret.spentAgo, SpentBefore: ret.spentBefore,
		// Run after its caller gives up, the call would grant what only goes
		// back, and take spent permits that the caller reports again.
		RunWithin: l.cfg.StoreTimeout}
	res, err := l.lease(ctx, s, req, b, ret.at)
	if ret.n > 0 {
		// Given back whether or not the answer arrives: never sent twice.
		returnedPermits.Add(int(ret.n))
		l.creditLocally(ctx, s, ret.n, ret.localRef)
	}
	if ret.used > 0 {
		redatedPermits.Add(int(ret.used))
	}
	now := l.now().UnixNano()
	b.mu.Lock()
	defer func() {
		if b.fill == f { // one fill at a time: stragglers do not replace it (see one)
			b.fill = nil
		}
		b.mu.Unlock()
		close(f.done)
	}()
	if err != nil {
		open := errors.Is(err, ErrStoreUnavailable)
		if !errors.Is(err, errGaveUp) {
			// Not sent, or answered without them: the next call reports
			// them. (A call given up on puts them back when it ends without
			// an answer in time; see callStore.)
			b.unspend(ret.at, &s.params, ret.spent, ret.spentAgo, ret.spentBefore)
		}
		// The store's last answer counted these as this pod's (leased);
		// unused, they are room the pod need not share.
		b.fallbackUsed -= ret.n
		b.failedAt = now
		return l.fallbackDecision(ctx, s, tokens, b, open, now), taking{}
	}
	if n := ret.spentTotal(); n > 0 {
		reportedPermits.Add(int(n))
	}
	leaseSize.Update(float64(want))
	b.remaining = res.Remaining
	b.answeredAt, b.fallbackUsed = now, 0
	b.resetAt = now + int64(res.Reset)
	kept, keptRef := false, int64(0) // the grant was counted in the local share (keepShare)
	if res.Granted >= tokens && l.recovering(s, b, now) {
		res, keptRef, kept = l.keepShare(ctx, s, req, res, tokens)
	}
	if res.Granted >= tokens && b.leased > 0 {
		// The bucket holds a lease already. One fill runs at a time (a
		// request that outwaits it decides alone, see one), so this is a
		// guard: the bucket keeps that lease, and this one's permits beyond
		// the request's go back.
		if extra := res.Granted - tokens; extra > 0 {
			go l.giveBack(req, extra, res.Ref)
			if kept {
				l.creditLocally(ctx, s, extra, keptRef)
			}
		}
		if !kept {
			l.spendLocally(ctx, s, tokens)
		}
		tk := taking{} // not from the bucket's lease
		if res.UsedRef != 0 {
			tk = freshTaking(b, res)
		}
		return s.decision(true, b.remaining+b.permits, 0, b.resetAt-now), tk
	}
	if res.Granted >= tokens {
		// The permits expire one lease lifetime after the call was sent
		// (before the store dated it); the store counts them until then
		// plus the window, and a return is worth sending until about half
		// a window after their expiry. The request's own permits count
		// apart (UsedRef) when the store dates them at the call: they are
		// not part of the lease that goes back.
		leased := res.Granted
		if res.UsedRef != 0 {
			leased -= tokens
		}
		b.permits, b.leased, b.ref = res.Granted-tokens, leased, res.Ref
		b.localRef = keptRef
		if !kept {
			b.localRef = l.spendLocally(ctx, s, res.Granted)
		}
		b.expires = sent + int64(s.ttl)
		b.returnBy = math.MaxInt64
		if s.params.Algorithm != store.TokenBucket {
			b.returnBy = b.expires + int64(s.params.Window)/2
		}
		b.deniedUntil = 0
		return s.decision(true, b.remaining+b.permits, 0, b.resetAt-now), freshTaking(b, res)
	}
	b.retryAfter, b.deniedAt, b.deniedNeed = int64(res.RetryAfter), now, tokens
	switch {
	case b.late.Load() > 0:
		// The refusal may come from this pod's own late leases, which go
		// back as soon as they are answered: do not cache it.
	case res.RetryAfter < 0:
		b.deniedUntil = now + int64(maxCachedNeverDenial)
	case res.RetryAfter > 0:
		b.deniedUntil = now + int64(min(res.RetryAfter, maxCachedDenial))
	}
	return s.decision(false, 0, b.retryFrom(now), b.resetAt-now), taking{}
}

// freshTaking is the taking of a request's permits granted by a lease call
// of b. The caller holds b.mu.
func freshTaking(b *bucket, res store.LeaseResult) taking {
	if res.UsedRef != 0 {
		return taking{b: b, usedRef: res.UsedRef}
	}
	return taking{b: b, gen: b.gen}
}

// retryFrom is the retry-after of the cached refusal, seen at now.
func (b *bucket) retryFrom(now int64) time.Duration {
	if b.retryAfter < 0 {
		return -1
	}
	return time.Duration(max(b.retryAfter-(now-b.deniedAt), int64(time.Millisecond)))
}

// direct decides with one store call, outside the local buckets: sliding_log
// with a trusted request ID, which the store must see to skip a retry, and a
// request that outwaited its bucket's slow lease call (rid nil; b is that bucket,
// which reports what the local policy lets through here).
func (l *Limiter) direct(ctx context.Context, s *spec, b *bucket, tokens int64, rid []byte) Decision {
	// A late answer's permit stays counted: its request ID is recorded.
	req := &store.LeaseRequest{Key: bytes.Clone(s.key()), Want: tokens, Need: tokens, RequestID: bytes.Clone(rid),
		RequestIDRetries: l.cfg.IDRetries(), RequestIDWindow: l.cfg.IDWindow(), UseWithin: l.useWithin(s)}
	res, err := l.lease(ctx, s, req, nil, 0)
	if err != nil {
		open := errors.Is(err, ErrStoreUnavailable)
		if b == nil {
			return l.fallbackDecision(ctx, s, tokens, nil, open, 0)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		now := l.now().UnixNano()
		b.failedAt = now
		return l.fallbackDecision(ctx, s, tokens, b, open, now)
	}
	leaseSize.Update(float64(tokens))
	countRepeat(&res)
	if b != nil && res.Granted >= tokens {
		b.mu.Lock()
		recovering := l.recovering(s, b, l.now().UnixNano())
		b.mu.Unlock()
		if recovering {
			var kept bool
			if res, _, kept = l.keepShare(ctx, s, req, res, tokens); kept {
				return s.decision(true, res.Remaining, res.RetryAfter, int64(res.Reset))
			}
		}
	}
	l.spendLocally(ctx, s, res.Granted)
	return s.decision(res.Granted >= tokens || res.Duplicate, res.Remaining, res.RetryAfter, int64(res.Reset))
}

// lease makes one store call under the deadline and the breaker; req gets
// the spec's params. With a bucket, the permits of an answer that comes after
// the deadline go back to the store (see callStore).
func (l *Limiter) lease(ctx context.Context, s *spec, req *store.LeaseRequest, b *bucket, spentAt int64) (store.LeaseResult, error) {
	start := l.now().UnixNano()
	br := l.breakerFor(req.Key)
	ok, probe := br.allow(start)
	if !ok {
		storeCallsSkipped.Inc()
		return store.LeaseResult{}, ErrStoreUnavailable
	}
	req.Params = s.params
	res, err := l.callStore(ctx, req, b, spentAt)
	timedOut := errors.Is(err, errGaveUp) || errors.Is(err, store.ErrStoreLate) || errors.Is(err, context.DeadlineExceeded)
	if err != nil {
		storeErrors.Inc()
		if timedOut {
			storeCallsTimeout.Inc()
		} else {
			storeCallsError.Inc()
		}
		br.failure(probe, l.now().UnixNano())
		if l.nodes != nil {
			l.nodeFailed(l.nodes.NodeOf(req.Key))
		}
		return store.LeaseResult{}, err // the store's errors name the store and the key
	}
	storeCallsOK.Inc()
	br.success(probe)
	if took := l.now().UnixNano() - start; took > 0 {
		old := l.rtt.Load()
		l.rtt.Store(old + (took-old)/8) // a lost update among racing calls is harmless
	}
	return res, nil
}

// fallbackDecision decides while the store is unavailable, per
// limits.on_store_failure. Under the local policy a request passes when the
// pod's share of the limit has room (localShare) and, with a bucket b (its
// mutex held) that the store answered within the last window, what that
// answer left has room too (fallbackRoom); what passes is counted in b, for
// the store (see bucket.addSpent). open tells that the store's breaker is
// open (a failure that lasts), not that one call failed; now is b's time.
func (l *Limiter) fallbackDecision(ctx context.Context, s *spec, tokens int64, b *bucket, open bool, now int64) Decision {
	switch l.policy {
	case FailOpen:
		fallbackOpen.Inc()
		return s.decision(true, s.limit, 0, 0)
	case FailClosed:
		fallbackClosed.Inc()
		d := s.decision(false, 0, l.cfg.BreakerCooldown, 0)
		d.Unavailable = true
		return d
	}
	fallbackLocal.Inc()
	p := l.localShare(s)
	limit := p.Limit
	if p.Algorithm == store.TokenBucket {
		limit = p.Capacity
	}
	if b != nil && !l.fallbackRoom(s, b, tokens, now, open) {
		fallbackDeniedAnswer.Inc()
		d := s.decision(false, 0, l.cfg.BreakerCooldown, 0)
		d.Limit = limit
		return d
	}
	// Counted from the decision plus the time a decided request may take to
	// be used (forwarded), as the store counts its own grants (useWithin):
	// a window of uses never holds more than the share.
	res, err := l.fallback.Lease(ctx, &store.LeaseRequest{Key: bytes.Clone(s.key()), Params: p, Want: tokens, Need: tokens, UseWithin: l.shareSlack()})
	if err != nil { // only a malformed request: decide like the store would
		return s.decision(false, 0, l.cfg.BreakerCooldown, 0)
	}
	allowed := res.Granted >= tokens
	if !allowed {
		fallbackDeniedShare.Inc()
	} else if b != nil {
		// Reported with the bucket's next call that reaches the store, so
		// that the store, once it answers again, does not grant the
		// window's whole budget on top of these.
		b.addSpent(tokens, now, spentWidth(s.params.Window))
		b.fallbackUsed += tokens
	}
	d := s.decision(allowed, res.Remaining, res.RetryAfter, int64(res.Reset))
	d.Limit = limit
	return d
}

// fallbackRoom reports whether the local policy may let tokens more through
// on b's key, given the store's last answer for it: that answer's remaining
// budget was all the pods' to share, so this pod takes at most its share of
// it (remaining ÷ live pods), and the permits counted then leave the window
// within one window of the answer, assumed at an even pace: while the
// breaker is open (no pod gets store answers) the pod's share of them comes
// back in proportion. One window after the answer the local share alone
// applies. Without this, a pod whose call failed right after the store had
// granted the whole window's budget (to other pods) would grant its whole
// share on top. While the breaker is closed a call that failed is one among
// calls that other pods still get answers for (a slow moment), so nothing
// comes back before the next answer. The caller holds b.mu.
func (l *Limiter) fallbackRoom(s *spec, b *bucket, tokens, now int64, open bool) bool {
	window := int64(s.window)
	if !open && l.saturated(s, b, now) {
		// A call failed while the store still answers (the other pods'
		// calls, most likely): they take whatever room the last answer
		// left as soon as it frees up, so a share of it taken here would
		// come on top of the limit.
		return false
	}
	elapsed := now - b.answeredAt
	if b.answeredAt == 0 || (window > 0 && elapsed >= window) {
		return true
	}
	pods := float64(max(1, l.livePods()))
	left := float64(min(max(b.remaining, 0), s.limit))
	room := left / pods
	if open && window > 0 {
		room += (float64(s.limit) - left) / pods * float64(max(elapsed, 0)) / float64(window)
	}
	return float64(b.fallbackUsed+tokens) <= room
}

// saturated tells that the store refused b's key within the last window:
// its clients ask for more than the limit, and the other pods take whatever
// the last answer left. A low remaining alone is no such sign: it also holds
// the permits leased to pods and not yet used, so refusing on it refused
// clients under their limit when a call timed out. The caller holds b.mu.
func (l *Limiter) saturated(s *spec, b *bucket, now int64) bool {
	window, pods := int64(s.window), int64(l.livePods())
	if window <= 0 || pods <= 1 {
		return false // no other pod takes what the last answer left
	}
	return b.deniedAt > 0 && now-b.deniedAt < window
}

// recovering tells that a store call for b's key failed, or the local
// policy let permits through on it, within the last window: the other pods
// most likely decided the key alone too, and their next calls, which report
// what they let through, may come after this one. Until a window has passed
// the store's remaining budget can hold permits that they spent, so this
// pod keeps to its local share. The caller holds b.mu.
func (l *Limiter) recovering(s *spec, b *bucket, now int64) bool {
	last := max(b.spentAt, b.failedAt)
	return l.shared && l.policy == FailLocal && last > 0 && s.params.Window > 0 &&
		now-last < int64(s.params.Window)
}

// keepShare trims a grant res of the store to what this pod's local share
// grants of it (see recovering), taking those permits from the share in the
// same step, so that concurrent grants cannot each find the same room: the
// rest goes back to the store, and a grant left with fewer than tokens is
// refused whole. It returns where the share counted the kept permits and
// whether it did (then the caller does not count them again).
func (l *Limiter) keepShare(ctx context.Context, s *spec, req *store.LeaseRequest, res store.LeaseResult, tokens int64) (store.LeaseResult, int64, bool) {
	local, err := l.fallback.Lease(ctx, &store.LeaseRequest{Key: bytes.Clone(s.key()), Params: l.localShare(s),
		Want: res.Granted, Need: tokens, LeaseTTL: s.ttl, UseWithin: l.shareSlack()})
	keep := local.Granted
	if err != nil {
		keep = 0
	}
	switch {
	case keep >= res.Granted:
		return res, local.Ref, true
	case keep < tokens:
		recoveryTrims.Add(int(res.Granted))
		go l.giveBackGrant(req, res)
		res.Granted, res.Remaining, res.RetryAfter = 0, 0, maxCachedDenial
		return res, 0, false
	}
	// The permits beyond the request's are leased ones (counted at Ref).
	recoveryTrims.Add(int(res.Granted - keep))
	go l.giveBack(req, res.Granted-keep, res.Ref)
	res.Granted = keep
	return res, local.Ref, true
}

// shareSlack is how long after a decision the local share still counts
// its permits past the window: a request decided now reaches the backend
// later (a pod that answers a burst of store replies at once runs late by
// tens of milliseconds), and a window of arrivals must not hold more than
// the share. The store's deadline is the bound used: a pod that runs later
// than that fails its store calls anyway.
func (l *Limiter) shareSlack() time.Duration { return min(l.cfg.StoreTimeout, time.Second) }

// spentTotal is the permits ret reports as let through without the store.
func (ret *giveBack) spentTotal() int64 {
	n := ret.spent
	for _, p := range ret.spentBefore {
		n += p.N
	}
	return n
}

// localShare is s's params for this pod alone: its share of the limit.
//
// The share rounds down (the pods together never exceed the limit), but a
// limit that is on keeps at least 1 per pod: rounding a small limit to 0
// would refuse every client while the store fails.
func (l *Limiter) localShare(s *spec) store.Params {
	pods := int64(max(1, l.livePods()))
	p := s.params
	if p.Algorithm == store.TokenBucket {
		if p.Capacity > 0 {
			p.Capacity = max(p.Capacity/pods, 1)
		}
		p.RefillRate /= float64(pods)
	} else if p.Limit > 0 {
		p.Limit = max(p.Limit/pods, 1)
	}
	return p
}

// spendLocally takes the n permits the store just granted from this pod's
// local share too, under the local policy. Without it the share would be
// full whenever the store fails: a pod whose store call timed out, having
// already let through its share of the window from the store's permits,
// would let through as many again from the local share (one more window's
// worth for every stretch of timeouts). It returns where the share counted
// them, for creditLocally. One memory-store call per store call, which the
// local fast path does not make.
//
// Every permit is counted, even past the share: a pod that leased more than
// its share has used more, and its share must stay spent until those leave
// the window (a capped count would forget the last ones first). The leased
// permits count from the lease's expiry, as the store counts them.
func (l *Limiter) spendLocally(ctx context.Context, s *spec, n int64) int64 {
	if !l.shared || l.policy != FailLocal || n <= 0 {
		return 0
	}
	p := l.localShare(s)
	if p.Algorithm != store.TokenBucket {
		p.Limit = store.MaxLimit // count, never refuse
	}
	res, _ := l.fallback.Lease(ctx, &store.LeaseRequest{Key: bytes.Clone(s.key()), Params: p, Want: n, LeaseTTL: s.ttl, UseWithin: l.shareSlack()})
	return res.Ref
}

// creditLocally gives the local share back n permits of a lease that went
// unused (counted at ref by spendLocally): the share counts what the pod
// used, so a pod that leased much and used little is not held to less than
// its share when the store fails. Credited whether or not the store gets
// its return: the permits were not used.
func (l *Limiter) creditLocally(ctx context.Context, s *spec, n, ref int64) {
	if !l.shared || l.policy != FailLocal || n <= 0 {
		return
	}
	_, _ = l.fallback.Lease(ctx, &store.LeaseRequest{Key: bytes.Clone(s.key()), Params: l.localShare(s), Return: n, ReturnRef: ref})
}

// decision builds a Decision about this limit.
func (s *spec) decision(allowed bool, remaining int64, retry time.Duration, reset int64) Decision {
	return Decision{
		Allowed:    allowed,
		Scope:      s.scope,
		Limit:      s.limit,
		Remaining:  max(min(remaining, s.limit), 0),
		RetryAfter: retry,
		Reset:      time.Duration(max(reset, 0)),
		Window:     s.window,
	}
}

// refund puts the permits taken from earlier limits back into their local
// buckets when a later limit rejects the request: they stay usable until
// their lease expires. Permits of a lease the bucket has since replaced are
// not put into the new one (they were counted elsewhere). Permits that the
// store counted as used at once (the Need part of a lease call) go back to
// the store, in the background: the refusing limit's store call came first,
// so this is not on the local fast path.
func (l *Limiter) refund(taken []taking, specs []spec, tokens int64) {
	if len(taken) == 0 { // the first limit refused: nothing taken (and no clock read)
		return
	}
	now := l.now().UnixNano()
	for i, tk := range taken {
		b := tk.b
		if b == nil {
			continue
		}
		if tk.usedRef != 0 {
			req := &store.LeaseRequest{Key: []byte(b.key), Params: specs[i].params}
			if l.shared {
				go l.giveBack(req, tokens, tk.usedRef)
			} else {
				l.giveBack(req, tokens, tk.usedRef)
			}
			continue
		}
		b.mu.Lock()
		if b.gen == tk.gen && now < b.expires {
			b.permits += tokens
		}
		b.mu.Unlock()
	}
}

// MaxTokens is the most tokens one request like req can ever be granted: the
// smallest capacity among the limits that apply (as configured, before any
// adaptive reduction; sliding_log takes at most MaxLogTokens per decision),
// and the scope of that limit. With no limit it is MaxLimit and ScopeNone.
// A request for more can never pass; the check API answers it 400.
//
// It reads the limits as specs does, in the same order (the first of equal
// bounds names the scope), without building their keys.
func (l *Limiter) MaxTokens(req *Request) (int64, Scope) {
	most, scope := int64(store.MaxLimit), ScopeNone
	bound := func(p store.Params, sc Scope) {
		if m := mostOf(&p); m < most {
			most, scope = m, sc
		}
	}
	if l.catalog != nil {
		if r, _ := l.catalog.Lookup(req.Tenant, req.Resource, len(req.IP) > 0); r != nil {
			bound(r.Params, ScopeRule)
		}
	}
	if l.cfg.Tenant > 0 && req.Tenant != "" {
		bound(l.baseParams(l.tenantLimit(req.Plan)), ScopeTenant)
	}
	if l.cfg.APIKey > 0 && len(req.APIKey) > 0 {
		bound(l.baseParams(l.cfg.APIKey), ScopeAPIKey)
	}
	if l.cfg.IP > 0 && len(req.IP) > 0 {
		bound(l.baseParams(l.cfg.IP), ScopeIP)
	}
	return most, scope
}
