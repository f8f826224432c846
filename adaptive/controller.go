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

	"github.com/redis/rueidis"
)

// Options are the parts a Controller uses besides its config.
type Options struct {
	// Redis shares the pressure across pods (nil: this pod alone).
	Redis rueidis.Client
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
// path's reads with atomic loads.
type Controller struct {
	cfg  Config
	opts Options
	on   bool

	policy   atomic.Pointer[Policy]
	livePods atomic.Int64
	inflight atomic.Int64
	started  atomic.Int64 // requests started, for the rate

	upstream    *upstreamWindow
	concurrency map[string]*ConcurrencyLimiter

	mu          sync.Mutex // guards what State reads
	machine     *machine
	host        *hostSampler
	signals     Signals
	local       float64 // smoothed own pressure
	cluster     float64 // cluster average (own when alone)
	effective   float64
	transitions []Transition
	lastStarted int64
	lastSample  time.Time
	redisOK     bool

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// minSignalSample is the least number of upstream answers in the signal
// window (2s) from which the error and latency signals are computed.
const minSignalSample = 20

// maxTransitions bounds the transitions kept for the state view.
const maxTransitions = 20

// New builds a Controller; nothing runs until Start.
func New(cfg Config, opts Options) (*Controller, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
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
		machine:     newMachine(&cfg, opts.Now()),
		redisOK:     opts.Redis != nil,
	}
	p := policyFor(Normal, 1)
	c.policy.Store(&p)
	c.livePods.Store(1)
	if c.on && *cfg.Concurrency.Enabled {
		for _, name := range opts.Upstreams {
			c.concurrency[name] = newConcurrencyLimiter(name, cfg.Concurrency.For(name))
		}
	}
	register(c)
	return c, nil
}

// Start runs the sampling and cluster loops until ctx ends or Stop.
//
// With the layer disabled, a pod with Redis still sends heartbeats, so that
// the limits' local fallback knows how many pods share a limit.
func (c *Controller) Start(ctx context.Context) {
	if c.cancel != nil || (!c.on && c.opts.Redis == nil) {
		return
	}
	ctx, c.cancel = context.WithCancel(ctx)
	if c.on {
		c.host = newHostSampler()
		c.lastSample = c.opts.Now()
		c.wg.Add(1)
		go c.sampleLoop(ctx)
	}
	if c.opts.Redis != nil {
		c.wg.Add(1)
		go c.clusterLoop(ctx)
	}
}

// Stop ends the loops and removes this pod from the cluster view.
func (c *Controller) Stop() {
	if c.cancel != nil {
		c.cancel()
		c.wg.Wait()
	}
	if c.opts.Redis != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c.opts.Redis.Do(ctx, c.opts.Redis.B().Hdel().Key(c.key()).Field(c.opts.PodID).Build())
		cancel()
	}
	unregister(c)
}

// Policy is the current policy: one atomic load.
func (c *Controller) Policy() Policy { return *c.policy.Load() }

// LimitAdjustment implements limit.Adjuster.
func (c *Controller) LimitAdjustment() (float64, bool) {
	p := c.policy.Load()
	return p.Multiplier, p.Strict
}

// LivePods is the number of pods with a fresh score in Redis (1 alone).
func (c *Controller) LivePods() int { return int(c.livePods.Load()) }

// RequestStarted and RequestFinished count the requests in flight.
func (c *Controller) RequestStarted() {
	c.inflight.Add(1)
	c.started.Add(1)
}

// RequestFinished: see RequestStarted.
func (c *Controller) RequestFinished() { c.inflight.Add(-1) }

// ObserveUpstream records one upstream answer for the error-rate and
// latency signals. Ignored results are not counted at all: only the
// upstream's own answers may move its signals.
func (c *Controller) ObserveUpstream(latency time.Duration, r Result) {
	if !c.on || r == Ignored {
		return
	}
	c.upstream.observe(c.opts.Now().UnixNano(), latency, r, c.cfg.UpstreamLatencyObjective)
}

// Concurrency returns the upstream's concurrency limiter, or nil when there
// is none (unknown upstream, or switched off).
func (c *Controller) Concurrency(upstream string) *ConcurrencyLimiter {
	return c.concurrency[upstream]
}

func (c *Controller) sampleLoop(ctx context.Context) {
	defer c.wg.Done()
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
	s := c.readSignals(now)
	raw := score(s, c.cfg.Weights)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.signals = s
	// Fast up, slow down: protection engages within a few samples and
	// releases calmly.
	alpha := 0.1
	if raw > c.local {
		alpha = 0.5
	}
	c.local += alpha * (raw - c.local)
	if c.opts.Redis == nil || !c.redisOK {
		c.cluster = c.local
	}
	c.effective = max(c.local, c.cluster)
	interval := now.Sub(c.lastSample)
	c.lastSample = now
	started := c.started.Load()
	rate := 0.0
	if interval > 0 {
		rate = float64(started-c.lastStarted) / interval.Seconds()
	}
	c.lastStarted = started
	if tr, ok := c.machine.step(now, c.effective, rate, interval); ok {
		c.transitions = append(c.transitions, tr)
		if len(c.transitions) > maxTransitions {
			c.transitions = c.transitions[1:]
		}
		modeTransitions(tr.From, tr.To).Inc()
		c.opts.Logf("adaptive: mode %s → %s (pressure %.2f)", tr.From, tr.To, tr.Pressure)
	}
	p := c.machine.policy()
	c.policy.Store(&p)
}

func (c *Controller) readSignals(now time.Time) Signals {
	var s Signals
	moderate := c.cfg.Thresholds.Moderate
	var err error
	if s.CPU, err = c.host.cpuLoad(now); err != nil {
		s.CPU = moderate
		s.Unavailable = append(s.Unavailable, "cpu")
	}
	if s.Memory, err = memoryLoad(); err != nil {
		s.Memory = moderate
		s.Unavailable = append(s.Unavailable, "memory")
	}
	if s.Scheduler, err = c.host.schedLatency(c.cfg.SchedLatencyObjective); err != nil {
		s.Scheduler = moderate
		s.Unavailable = append(s.Unavailable, "scheduler")
	}
	s.Inflight = clamp(float64(c.inflight.Load()) / float64(c.cfg.MaxInflight))
	w := c.upstream.read(now.UnixNano())
	if w.count >= minSignalSample { // too few answers say nothing
		// A failure counts whole, a 503/429 half: a backend that sheds is
		// working and the concurrency limit answers it first. Half of all
		// answers failing is full pressure.
		bad := float64(w.failed) + 0.5*float64(w.pushed)
		s.UpstreamErrors = clamp(bad / float64(w.count) / 0.5)
	}
	if w.ok >= minSignalSample {
		obj := c.cfg.UpstreamLatencyObjective.Seconds()
		// At the objective: no pressure; at 2.25× the objective: full.
		s.UpstreamLatency = clamp((w.mean.Seconds()/obj - 1) / 1.25)
	}
	return s
}

func (c *Controller) key() string {
	if c.opts.KeyPrefix == "" {
		return "pressure:global"
	}
	return c.opts.KeyPrefix + ":pressure:global"
}

func (c *Controller) clusterLoop(ctx context.Context) {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.ClusterInterval)
	defer t.Stop()
	for {
		c.exchange(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// exchange publishes this pod's score and reads the cluster's: the hash
// <prefix>:pressure:global holds podID → "score:unix ms"; entries older than
// pressure_ttl are ignored and removed; the key expires when every pod is gone.
func (c *Controller) exchange(ctx context.Context) {
	c.mu.Lock()
	own := c.local
	c.mu.Unlock()
	now := c.opts.Now()
	r := c.opts.Redis
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ClusterInterval)
	defer cancel()
	val := formatEntry(own, now)
	res := r.DoMulti(ctx,
		r.B().Hset().Key(c.key()).FieldValue().FieldValue(c.opts.PodID, val).Build(),
		r.B().Pexpire().Key(c.key()).Milliseconds(c.cfg.PressureTTL.Milliseconds()).Build(),
		r.B().Hgetall().Key(c.key()).Build())
	all, err := res[2].AsStrMap()
	for _, x := range res[:2] {
		err = errors.Join(err, x.Error())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if c.redisOK {
			c.opts.Logf("adaptive: cluster view unavailable, acting on this pod's pressure: %v", err)
		}
		c.redisOK = false
		c.cluster = c.local
		c.livePods.Store(1)
		clusterErrors.Inc()
		return
	}
	if !c.redisOK {
		c.opts.Logf("adaptive: cluster view back")
	}
	c.redisOK = true
	sum, n := 0.0, 0
	var stale []string
	for pod, v := range all {
		score, at, ok := parseEntry(v)
		if !ok || now.Sub(at) > c.cfg.PressureTTL {
			stale = append(stale, pod)
			continue
		}
		sum += score
		n++
	}
	if len(stale) > 0 {
		r.Do(ctx, r.B().Hdel().Key(c.key()).Field(stale...).Build())
	}
	if n == 0 {
		c.cluster = own
		c.livePods.Store(1)
		return
	}
	c.cluster = sum / float64(n)
	c.livePods.Store(int64(n))
}

func formatEntry(score float64, at time.Time) string {
	return formatFloat(score) + ":" + formatInt(at.UnixMilli())
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
		Pressure:    PressureState{Local: round3(c.local), Cluster: round3(c.cluster), Effective: round3(c.effective)},
		Multiplier:  round3(p.Multiplier),
		Policy:      p,
		Signals:     c.signals,
		LivePods:    c.LivePods(),
		ClusterView: c.opts.Redis != nil && c.redisOK,
		Inflight:    c.inflight.Load(),
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
