package adaptive

import (
	"context"
	"errors"
	"log"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/rueidis"
)

// Options are the parts a Controller uses besides its config.
type Options struct {
	// Redis shares the pressure across pods (nil: this pod alone, unless
	// AwaitRedis).
	Redis rueidis.Client
	// AwaitRedis, with a nil Redis, says that the pod has a Redis that did
	// not answer at start: the cluster view waits for AttachRedis, and
	// until then the pod acts on its own pressure and counts AssumedPods
	// live pods.
	AwaitRedis bool
	// AssumedPods is the count of live pods before an exchange has worked
	// (limits.expected_pods). Default 1.
	AssumedPods int
	// KeepBeats is how long a pod's last heartbeat stays in Redis after it
	// stopped, counted in RecentPods (limit.PartitionHold; at least, and by
	// default, pressure_ttl).
	KeepBeats time.Duration
	// OnBack is called (from the exchange loop) when Redis answers again
	// after an exchange failed, a fifth of cluster_interval before this
	// pod publishes its heartbeat again: the pod reaches Redis again, and
	// what it let through alone is to reach the store before the others
	// read that heartbeat and stop holding its share. Nil: none.
	OnBack func()
	// KeyPrefix goes before the Redis key with a ':' (redis.key_prefix).
	KeyPrefix string
	// PodID names this pod in the cluster view.
	PodID string
	// Upstreams get a ConcurrencyLimiter each.
	Upstreams []string
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Logf logs mode changes and Redis trouble (nil: log.Printf).
	Logf func(format string, args ...any)
}

// Controller samples the signals, keeps the mode and serves the request
// path's reads with atomic loads. The exchange with the other pods is its
// clusterView's.
type Controller struct {
	cfg  Config // as built: the keys in RestartKeys keep these values
	opts Options
	on   bool
	// tune is the current configuration: cfg with a reload's changes of
	// the keys that may change live (see Stage). The sampling loop loads
	// it once per sample.
	tune atomic.Pointer[Config]

	policy atomic.Pointer[Policy]
	// gatewayDelay is the last sample's p99 scheduler latency in
	// nanoseconds: the concurrency limiters add it to their slack.
	gatewayDelay atomic.Int64

	upstream    *upstreamWindow
	concurrency map[string]*ConcurrencyLimiter // by upstream; guarded by mu
	view        *clusterView                   // nil without Redis: this pod alone
	runCtx      context.Context                // Start's, for AttachRedis
	set         *metrics.Set                   // this controller's series, registered from New to Stop

	mu            sync.Mutex // guards what State reads
	machine       *machine
	host          *hostSampler
	signals       Signals
	local         float64 // smoothed own pressure
	effective     float64 // what the mode machine sees: max(local, cluster)
	transitions   []Transition
	lastStarted   int64
	lastForwarded int64
	lastSample    time.Time

	cancel context.CancelFunc
	wg     sync.WaitGroup

	// hot are the counters every request writes, striped by connection
	// (see stripeOf), each stripe on cache lines of its own and away from
	// the fields every request reads (policy, on, upstream): cores serving
	// different connections do not take one line from each other.
	hot [stripes]hotCounters
}

// hotCounters are one stripe of the per-request counters: the requests in
// flight, those started (for the rate) and those forwarded (answered by
// an upstream: with started, the share of the load the backend sees; see
// forwardedShare).
type hotCounters struct {
	inflight, started, forwarded atomic.Int64
	_                            [128 - 3*8]byte
}

// inflight, started and forwarded add up the stripes.
func (c *Controller) inflight() int64 {
	return c.sumHot(func(h *hotCounters) *atomic.Int64 { return &h.inflight })
}

func (c *Controller) started() int64 {
	return c.sumHot(func(h *hotCounters) *atomic.Int64 { return &h.started })
}

func (c *Controller) forwarded() int64 {
	return c.sumHot(func(h *hotCounters) *atomic.Int64 { return &h.forwarded })
}

// sumHot adds up one counter of every stripe.
func (c *Controller) sumHot(counter func(*hotCounters) *atomic.Int64) (n int64) {
	for i := range c.hot {
		n += counter(&c.hot[i]).Load()
	}
	return n
}

// minSignalSample is the least number of upstream answers in the signal
// window (2s) from which the error and latency signals are computed.
const minSignalSample = 20

// maxTransitions bounds the transitions kept for the state view.
const maxTransitions = 20

// New builds a Controller of cfg, a provisioned section (Config.SetDefaults,
// Config.Validate); nothing runs until Start.
func New(cfg Config, opts Options) (*Controller, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logf == nil {
		opts.Logf = log.Printf
	}
	if opts.PodID == "" {
		return nil, errors.New("adaptive: a pod ID is required")
	}
	c := &Controller{
		cfg:         cfg,
		opts:        opts,
		on:          cfg.On(),
		upstream:    newUpstreamWindow(2 * time.Second),
		concurrency: map[string]*ConcurrencyLimiter{},
		set:         metrics.NewSet(),
	}
	c.tune.Store(&cfg)
	c.machine = newMachine(&cfg, opts.Now())
	p := policyFor(Normal, 1)
	c.policy.Store(&p)
	if opts.Redis != nil || opts.AwaitRedis {
		c.view = newClusterView(&cfg, &opts, c.set)
	}
	if c.limited() {
		for _, name := range opts.Upstreams {
			l := newConcurrencyLimiter(name, cfg.Concurrency.For(name), &c.gatewayDelay)
			l.addMetrics(c.set)
			c.concurrency[name] = l
		}
	}
	c.addMetrics()
	metrics.RegisterSet(c.set)
	return c, nil
}

// Start runs the sampling and cluster loops until ctx ends or Stop.
//
// With the layer disabled, a pod with Redis still sends heartbeats, so that
// the limits' local fallback knows how many pods share a limit.
func (c *Controller) Start(ctx context.Context) {
	if c.cancel != nil || (!c.on && c.view == nil) {
		return
	}
	ctx, c.cancel = context.WithCancel(ctx)
	c.runCtx = ctx
	if c.on {
		c.host = newHostSampler()
		c.lastSample = c.opts.Now()
		c.wg.Go(func() { c.sampleLoop(ctx) })
	}
	if c.view != nil && c.view.redis != nil {
		c.startView(ctx)
	}
}

func (c *Controller) startView(ctx context.Context) {
	c.wg.Go(func() { c.view.run(ctx, func() float64 { return c.locked(c.ownPressure) }) })
}

// AttachRedis gives a controller built with AwaitRedis the Redis that now
// answers: the cluster view starts exchanging (and counting the live pods).
// Call it at most once, after Start and before Stop; otherwise it does
// nothing.
func (c *Controller) AttachRedis(client rueidis.Client) {
	if c.view == nil || c.view.redis != nil || c.runCtx == nil {
		return
	}
	c.view.redis = client
	c.startView(c.runCtx)
}

// Stop ends the loops, removes this pod from the cluster view and
// unregisters the controller's metrics.
func (c *Controller) Stop() {
	if c.cancel != nil {
		c.cancel()
		c.wg.Wait()
	}
	if c.view != nil && c.view.redis != nil {
		c.view.leave()
	}
	metrics.UnregisterSet(c.set, true)
}

// Policy is the current policy: one atomic load.
func (c *Controller) Policy() Policy { return *c.policy.Load() }

// LimitAdjustment implements limit.Adjuster.
func (c *Controller) LimitAdjustment() (float64, bool) {
	p := c.policy.Load()
	return p.Multiplier, p.Strict
}

// LivePods is the number of pods with a fresh score in Redis at the last
// exchange that worked: while Redis cannot be reached it stays as last seen
// (1 alone; Options.AssumedPods before any exchange worked).
func (c *Controller) LivePods() int { return c.view.livePods() }

// SuspectPods is the number of pods counted in LivePods only because this
// pod's view of Redis came back within pressure_ttl (the others may not
// have published since), whose last heartbeat is older than pressure_ttl +
// 2 × cluster_interval: cut off from Redis while this pod could not reach
// it either, such a pod may be granting its share of a contested key alone
// by now, as if the others had noticed it gone (0 otherwise).
func (c *Controller) SuspectPods() int { return c.view.suspectPods() }

// RecentPods is the number of pods that sent a heartbeat within
// Options.KeepBeats, as of the last exchange that worked, the ones that
// stopped included: one that stopped may be cut off from Redis, deciding
// alone. A pod started since counts them too.
func (c *Controller) RecentPods() int { return c.view.recentPods() }

// HeartbeatAt is when this pod's last heartbeat may have reached Redis
// (zero: none yet, or no Redis): the other pods count it live until that
// plus pressure_ttl.
func (c *Controller) HeartbeatAt() time.Time {
	if c.view == nil {
		return time.Time{}
	}
	if at := c.view.beat.Load(); at > 0 {
		return time.Unix(0, at)
	}
	return time.Time{}
}

// RequestStarted and RequestFinished count the requests in flight; conn
// is the request's connection (any number that stays with the
// connection: it picks the counters' stripe).
func (c *Controller) RequestStarted(conn uint64) {
	h := &c.hot[stripeOf(conn)]
	h.inflight.Add(1)
	h.started.Add(1)
}

// RequestFinished: see RequestStarted.
func (c *Controller) RequestFinished(conn uint64) { c.hot[stripeOf(conn)].inflight.Add(-1) }

// RequestWaiting and RequestResumed take a request out of the requests in
// flight while it waits for its rate limit (max_wait) and put it back: a
// waiting request is no load on the backend.
func (c *Controller) RequestWaiting(conn uint64) { c.hot[stripeOf(conn)].inflight.Add(-1) }

// RequestResumed: see RequestWaiting.
func (c *Controller) RequestResumed(conn uint64) { c.hot[stripeOf(conn)].inflight.Add(1) }

// ObserveUpstream records one upstream answer, which came at end, for the
// error-rate and latency signals. Ignored results are not counted at all:
// only the upstream's own answers may move its signals.
func (c *Controller) ObserveUpstream(conn uint64, end time.Time, latency time.Duration, r Result) {
	if !c.on {
		return
	}
	i := stripeOf(conn)
	c.hot[i].forwarded.Add(1)
	if r == Ignored {
		return
	}
	c.upstream.observe(i, end.UnixNano(), latency, r)
}

// Concurrency returns the upstream's concurrency limiter, or nil when there
// is none (unknown upstream, or switched off).
func (c *Controller) Concurrency(upstream string) *ConcurrencyLimiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.concurrency[upstream]
}

// limited reports whether upstreams get concurrency limiters.
func (c *Controller) limited() bool { return c.on && *c.cfg.Concurrency.Enabled }

func (c *Controller) sampleLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.sample(c.opts.Now())
		}
	}
}

// sample reads the signals and steps the mode machine once.
func (c *Controller) sample(now time.Time) {
	cfg := c.tune.Load()
	// Only this goroutine writes lastStarted and lastForwarded.
	started, forwarded := c.started(), c.forwarded()
	s := c.readSignals(now, cfg, forwardedShare(started-c.lastStarted, forwarded-c.lastForwarded))
	raw := score(s, cfg.Weights)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.machine.cfg = cfg
	c.signals = s
	// Fast up, slow down: protection engages within a few samples and
	// releases calmly.
	alpha := 0.1
	if raw > c.local {
		alpha = 0.5
	}
	c.local += alpha * (raw - c.local)
	c.effective = max(c.local, c.clusterPressure())
	interval := now.Sub(c.lastSample)
	c.lastSample = now
	rate := 0.0
	if interval > 0 {
		rate = float64(started-c.lastStarted) / interval.Seconds()
	}
	c.lastStarted, c.lastForwarded = started, forwarded
	if tr, ok := c.machine.step(now, c.effective, rate, interval); ok {
		c.transitions = append(c.transitions, tr)
		if len(c.transitions) > maxTransitions {
			c.transitions = c.transitions[1:]
		}
		c.modeTransitions(tr.From, tr.To).Inc()
		c.opts.Logf("adaptive: mode %s → %s (pressure %.2f)", tr.From, tr.To, tr.Pressure)
	}
	p := c.machine.policy()
	c.policy.Store(&p)
}

// forwardedShare is the share of the requests of a sample that were sent
// upstream: forwarded of started, in [0, 1]. A request is counted as started
// when it comes and as forwarded when its answer does, so a sample can see
// more forwarded than started; one that saw neither had nothing to relieve.
func forwardedShare(started, forwarded int64) float64 {
	switch {
	case forwarded <= 0:
		return 0
	case forwarded >= started:
		return 1
	}
	return float64(forwarded) / float64(started)
}

// readSignals reads the signals of one sample; share is the sample's
// forwardedShare.
//
// CPU and scheduler latency measure the gateway's own saturation, and the
// modes relieve it only by forwarding less. Requests the gateway answers
// itself (refusals, mode rejections, cached answers) are its cheapest
// answers: lowering limits does not make them fewer, it makes more of them.
// Counted whole, a flood of refused requests would raise the CPU signal,
// which would cut every client's limits, which would refuse more: a loop
// fed by the gateway's own answers. So the two signals count in proportion
// to the share of requests forwarded: under such a flood they fall as the
// gateway refuses more, and the loop cannot run away.
func (c *Controller) readSignals(now time.Time, cfg *Config, share float64) Signals {
	s := Signals{ForwardedShare: share}
	moderate := cfg.Thresholds.Moderate
	var err error
	if s.CPU, err = c.host.cpuLoad(now); err != nil {
		s.CPU = moderate
		s.Unavailable = append(s.Unavailable, "cpu")
	} else {
		s.CPU *= share
	}
	if s.Memory, err = memoryLoad(); err != nil {
		s.Memory = moderate
		s.Unavailable = append(s.Unavailable, "memory")
	}
	if sched, err := c.host.schedLatency(); err != nil {
		s.Scheduler = moderate
		s.Unavailable = append(s.Unavailable, "scheduler")
	} else {
		// Not weighed by the share: for the concurrency limits it is a
		// measurement of the gateway's own delay, not pressure.
		c.gatewayDelay.Store(int64(sched * float64(time.Second)))
		s.Scheduler = clamp(sched/cfg.SchedLatencyObjective.Seconds()) * share
	}
	s.Inflight = clamp(float64(c.inflight()) / float64(cfg.MaxInflight))
	w := c.upstream.read(now.UnixNano())
	if w.count >= minSignalSample { // too few answers say nothing
		// A failure counts whole, a 503/429 half: a backend that sheds is
		// working and the concurrency limit answers it first. Half of all
		// answers failing is full pressure.
		bad := float64(w.failed) + 0.5*float64(w.pushed)
		s.UpstreamErrors = clamp(bad / float64(w.count) / 0.5)
	}
	if w.ok >= minSignalSample {
		obj := cfg.UpstreamLatencyObjective.Seconds()
		// At the objective: no pressure; at 2.25× the objective: full.
		s.UpstreamLatency = clamp((w.mean.Seconds()/obj - 1) / 1.25)
	}
	return s
}

// ownPressure is this pod's smoothed pressure (under mu).
func (c *Controller) ownPressure() float64 { return c.local }

// clusterPressure is the cluster's average pressure, or this pod's own when
// it is alone or the cluster view is unavailable (under mu).
func (c *Controller) clusterPressure() float64 {
	if avg, ok := c.view.read(); ok {
		return avg
	}
	return c.local
}

// State is the JSON view of GET /v1/state.
type State struct {
	Enabled     bool                        `json:"enabled"`
	Mode        Mode                        `json:"mode"`
	Pressure    PressureState               `json:"pressure"`
	Multiplier  float64                     `json:"multiplier"`
	Policy      Policy                      `json:"policy"`
	Signals     Signals                     `json:"signals"`
	LivePods    int                         `json:"live_pods"`
	ClusterView bool                        `json:"cluster_view"`
	Inflight    int64                       `json:"inflight"`
	Upstreams   map[string]ConcurrencyState `json:"upstreams"`
	Transitions []Transition                `json:"transitions"`
}

// PressureState is the pressure as this pod sees it.
type PressureState struct {
	Local     float64 `json:"local"`
	Cluster   float64 `json:"cluster"`
	Effective float64 `json:"effective"`
}

// ConcurrencyState is one upstream's concurrency limiter.
type ConcurrencyState struct {
	Limit    float64          `json:"limit"`
	Inflight int64            `json:"inflight"`
	Shed     map[string]int64 `json:"shed"`
}

// State returns the controller's state.
func (c *Controller) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.Policy()
	st := State{
		Enabled:     c.on,
		Mode:        p.Mode,
		Pressure:    PressureState{Local: round3(c.local), Cluster: round3(c.clusterPressure()), Effective: round3(c.effective)},
		Multiplier:  round3(p.Multiplier),
		Policy:      p,
		Signals:     c.signals,
		LivePods:    c.LivePods(),
		ClusterView: c.view.up(),
		Inflight:    c.inflight(),
		Upstreams:   map[string]ConcurrencyState{},
		Transitions: append([]Transition{}, c.transitions...),
	}
	names := make([]string, 0, len(c.concurrency))
	for n := range c.concurrency {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		l := c.concurrency[n]
		shed := map[string]int64{}
		for _, pr := range []Priority{PriorityFree, PriorityStandard, PriorityPremium} {
			shed[pr.String()] = l.shedCount(pr, false) + l.shedCount(pr, true)
		}
		st.Upstreams[n] = ConcurrencyState{Limit: round3(l.Limit()), Inflight: l.Inflight(), Shed: shed}
	}
	return st
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
