package limit

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sentinel-gateway/sentinel/limit/breaker"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/latency"
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
	alg      store.Algorithm // limits.algorithm
	policy   FailurePolicy   // limits.on_store_failure
	store    store.Store
	fallback *store.MemoryStore // the local policy's per-pod limits
	// shared: the store is another process's (Redis): it can fail (the
	// local policy takes over) and its answers take a round trip. When
	// false the store is in-process (MemoryStore) and answers at once.
	shared      bool
	adj         Adjuster
	livePods    func() int
	recentPods  func() int
	suspectPods func() int
	// reportsFrom is when the other pods have read this pod's heartbeat
	// after it came back (unix nanos; see StoreReachable).
	reportsFrom    atomic.Int64
	heartbeatTTL   int64 // Options.HeartbeatTTL
	heartbeatEvery int64 // Options.HeartbeatEvery
	catalog        *catalog.Catalog
	// shorthand are the limits section's shorthand limits and the rules,
	// compiled into the policies they are; policies are the others.
	shorthand []*catalog.CompiledPolicy
	policies  *catalog.PolicySet
	now       func() time.Time

	table    *bucketTable
	waits    *waits       // the requests waiting for their keys (max_wait)
	kept     *kept        // table, fallback and waits, which a reload's limiter takes over
	breakers *breaker.Set // one per store node
	nodes    store.NodeMap
	rtt      atomic.Int64 // moving average of a store call, nanos
	// podCount is the most pods seen live lately (see storeParams);
	// peerNotice is how long the other pods may take to stop counting
	// this one once it cannot reach the store (Options.PeerNotice).
	podCount    podCount
	peerNotice  time.Duration
	heartbeatAt func() time.Time

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

// NewLimiter returns a Limiter over store. cfg is provisioned: its defaults
// set and validated, as loading the configuration does once.
func NewLimiter(cfg Config, st store.Store, opts Options) (*Limiter, error) {
	if st == nil {
		return nil, errors.New("limit: NewLimiter needs a store")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LivePods == nil {
		opts.LivePods = func() int { return 1 }
	}
	if opts.RecentPods == nil {
		opts.RecentPods = func() int { return 0 }
	}
	if opts.SuspectPods == nil {
		opts.SuspectPods = func() int { return 0 }
	}
	l := &Limiter{
		cfg:      cfg,
		alg:      cfg.Algorithm,
		policy:   cfg.OnStoreFailure,
		store:    st,
		adj:      opts.Adjuster,
		livePods: opts.LivePods, recentPods: opts.RecentPods, suspectPods: opts.SuspectPods,
		// A pod cut off from the store stops sending heartbeats with it.
		peerNotice: opts.PeerNotice, heartbeatAt: opts.HeartbeatAt, heartbeatTTL: int64(opts.HeartbeatTTL),
		heartbeatEvery: int64(opts.HeartbeatEvery),
		catalog:        opts.Catalog,
		// The rules are looked up in the catalog for each request: a
		// change of the catalog applies without a new limiter.
		shorthand: catalog.CompileShorthand(cfg.Shorthands(), cfg.CatalogDefaults(), opts.Catalog),
		policies:  opts.Policies,
		now:       opts.Now,
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	l.nodes, _ = st.(store.NodeMap)
	l.breakers = breaker.NewSet(int64(cfg.BreakerFailures), cfg.BreakerCooldown, l.nodes)
	if opts.Succeeds != nil {
		l.succeed(opts.Succeeds)
	} else {
		l.kept = newKept(&cfg, &opts)
		l.table, l.fallback, l.waits = l.kept.table, l.kept.fallback, l.kept.waits
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
		l.release()
		l.breakers.Close()
		live.Delete(l)
	})
}

func (l *Limiter) sweepLoop() {
	defer close(l.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.sweep()
		}
	}
}

// sweep drops the buckets idle for max(10 s, 2 windows), on the limiter's
// clock (the one the buckets' times are in).
func (l *Limiter) sweep() {
	now := l.now()
	l.pods(now.UnixNano()) // a missing pod's hold counts from when it was last seen
	l.table.sweep(now.UnixNano(), now.Add(-max(10*time.Second, 2*l.cfg.Window)).UnixNano(), !l.shared)
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
		Breaker:        breaker.StateName(l.breakers.State()),
		OnStoreFailure: l.policy.String(),
		LocalFastPath:  l.cfg.FastPath(),
		LocalBuckets:   l.table.len(),
		LivePods:       max(1, l.livePods()),
	}
}

// heldByOthers tells that the other pods may hold this pod's share at
// now: its last heartbeat is older than they count it live, or they have
// not read the one that ended such a gap yet (StoreReachable). The store
// then counts twice what it grants this pod or learns from it.
func (l *Limiter) heldByOthers(now int64) bool {
	if now < l.reportsFrom.Load() {
		return true
	}
	beat := l.lastBeat()
	return l.heartbeatTTL > 0 && beat > 0 && now-beat > l.heartbeatTTL
}

// StoreReachable tells the limiter that the store answers again after
// this pod could not reach it, and that the other pods, which held this
// pod's share of every limit while its heartbeats stopped, read its next
// heartbeat within read from now. Each open breaker probes with its next
// call rather than after its cooldown, so that what the pod let through
// alone on a contested key is reported before the others stop holding its
// share: reported after it, they could take that share again on top.
// Until read is over, as while its last heartbeat is older than
// Options.HeartbeatTTL (heldByOthers: its calls may work before its
// heartbeats do), a key that was not contested is decided alone, on the
// pod's share: what the store counted for this pod then (its report,
// its grants) would count twice, with the share still held (clients under
// their limit were refused), and the others take only what that key's
// clients ask, so nothing goes over the limit meanwhile or when the next
// call reports it.
func (l *Limiter) StoreReachable(read time.Duration) {
	// Only a pod whose heartbeat the others can have found missing is
	// held: not one never seen, nor one back within HeartbeatTTL.
	now := l.now()
	if beat := l.lastBeat(); beat > 0 && l.heartbeatTTL > 0 && now.UnixNano()-beat > l.heartbeatTTL {
		l.reportsFrom.Store(now.Add(read).UnixNano())
	}
	l.breakers.ProbeNow()
}

// StoreHealthy reports whether decisions go to the store (every node's
// breaker is closed).
func (l *Limiter) StoreHealthy() bool { return l.breakers.State() == breaker.Closed }

// Allow decides one request. It returns within the store deadline and
// allocates nothing when every limit is served from a local lease (and at
// most maxLocalSpecs limits apply).
func (l *Limiter) Allow(ctx context.Context, req *Request) Decision {
	var d Decision
	l.Decide(ctx, req, &d)
	return d
}

// Decide is Allow writing its decision to d, whose earlier content it
// replaces: a caller that keeps a Decision of its own (the proxy's, one per
// request in flight) saves copying one (about 530 bytes) up through every
// call that returns it.
func (l *Limiter) Decide(ctx context.Context, req *Request, d *Decision) {
	start := req.Arrived
	if start.IsZero() {
		start = l.now()
	}
	mult, strict := l.adjustment()
	sa := specArrays.Get().(*[maxLocalSpecs]spec)
	defer specArrays.Put(sa)
	specs := l.specs(sa[:0], req, mult)
	if len(req.Limits) > 0 {
		specs = l.withLimits(specs, req, mult)
	}
	if req.Peek {
		*d = l.peek(ctx, specs, max(req.Tokens, 1))
		d.Decided = l.observe(start)
		return
	}
	counters := catalog.CountersFor(req.Tenant, req.Resource)
	counters.Requests.Inc()
	l.decide(ctx, specs, req, strict, start.UnixNano(), counters, d)
	d.Decided = l.observe(start)
}

// specArrays hold the specs of a decision in progress. An array on the
// stack (2.6 KB) would be zeroed on every decision, in a stack that each
// connection's goroutine has of its own and that is cold by its next
// request; a pooled one stays with its P and in its cache. nextSpec zeroes
// each spec it hands out, and no spec outlives Allow.
var specArrays = sync.Pool{New: func() any { return new([maxLocalSpecs]spec) }}

// adjustment is the adaptive multiplier of the limits, in (0, 1], and
// whether every decision must ask the store.
func (l *Limiter) adjustment() (mult float64, strict bool) {
	mult, strict = 1.0, !l.cfg.FastPath()
	if l.adj != nil {
		m, s := l.adj.LimitAdjustment()
		if m > 0 && m < 1 {
			mult = m
		}
		strict = strict || s
	}
	return mult, strict
}

// decide decides specs in order, each taking the request's tokens; the
// first refusal (not in shadow mode) answers, and the permits the earlier
// limits gave return. The limits after it are not decided (they take
// nothing) but still listed in Applied. It writes the answer to applied
// and counts it in counters.
func (l *Limiter) decide(ctx context.Context, specs []spec, req *Request, strict bool, now int64, counters *catalog.Counters, applied *Decision) {
	tokens := max(req.Tokens, 1)
	var useArr [maxLocalSpecs]use
	uses := useArr[:]
	if len(specs) > len(useArr) {
		uses = make([]use, len(specs))
	}
	applied.NApplied, applied.NReserved = 0, 0 // the entries past them are never read
	applied.MaxWait, applied.waitOn, applied.waitCounters = 0, "", nil
	best := verdict{Allowed: true, Remaining: math.MaxInt64}
	shadowed, metered := false, false
	hits := 0
	defer func() { countLocalHits(hits) }()
	for i := range specs {
		s := &specs[i]
		metered = metered || s.meter != nil
		d, u := l.decideSpec(ctx, s, req, tokens, strict, now)
		if u.local {
			hits++
		}
		applied.note(&d)
		s.counters.Count(d.Allowed, s.shadow || l.cfg.Shadow) // a policy limit's own counters
		switch {
		case d.Unavailable || !d.Allowed && !s.shadow && !l.cfg.Shadow:
			if s.maxWait > 0 && !d.Unavailable {
				applied.MaxWait, applied.waitOn, applied.waitCounters = s.maxWait, string(s.key()), s.counters
			}
			l.returnUses(uses[:i], specs[:i])
			counters.Blocked.Inc()
			applied.noteUndecided(specs[i+1:])
			applied.answer(&d)
			return
		case !d.Allowed:
			shadowed = true
			counters.ShadowBlocked.Inc()
			if d.Remaining <= best.Remaining {
				best = d
			}
			continue
		}
		uses[i] = u
		if d.Remaining < best.Remaining {
			best = d
		}
	}
	if len(specs) == 0 {
		best.Remaining = 0
	}
	if metered {
		l.reserve(applied, specs, uses, now)
	}
	best.Allowed, best.Shadowed = true, shadowed
	if shadowed {
		best.RetryAfter = 0
	}
	counters.Allowed.Inc()
	applied.answer(&best)
}

// decideSpec decides one limit of req: a request that finds requests
// waiting for a limit with max_wait is refused to wait behind them; a
// concurrency limit takes a slot; any other takes its permits (a cost
// limit its estimate) through the lease protocol.
func (l *Limiter) decideSpec(ctx context.Context, s *spec, req *Request, tokens int64, strict bool, now int64) (verdict, use) {
	switch {
	case s.maxWait > 0 && !req.waiting && l.waits.queued(s.key()):
		return s.decision(false, 0, time.Millisecond, 0), use{}
	case s.meter != nil && s.meter.Slots > 0:
		return l.takeSlot(ctx, s, now)
	}
	n := tokens
	if s.meter != nil {
		n = l.estimate(s, req, tokens)
	}
	d, u := l.one(ctx, s, n, strict, req.RequestID, now)
	if l.lastUse(s, &d, n, strict, now) {
		u = use{local: true}
	}
	u.n = n
	return d, u
}

// countLocalHits adds a decision's limits decided from a local lease to
// sentinel_limit_local_hits_total.
func countLocalHits(n int) {
	if n > 0 {
		localHits.Add(n)
	}
}

// observe records the duration of a decision that started at start and
// returns when it ended.
func (l *Limiter) observe(start time.Time) time.Time {
	end := l.now()
	latency.Decision.Update(float64(end.Sub(start)) / 1e6)
	return end
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
	l.policyBound(req, bound)
	for i := range req.Limits {
		bound(req.Limits[i].Params, ScopeLimit)
	}
	return most, scope
}
