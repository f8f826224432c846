package upstream

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Set is every configured pool. Build it with New, run its health checks
// and re-probes with Start, change its pools with Stage (a reload), end
// everything with Stop.
type Set struct {
	mu      sync.Mutex // guards members, names, staged, ctx and stopped
	members map[string]*member
	names   []string
	staged  []*member       // the new pools of an Update not yet committed or aborted
	ctx     context.Context // Start's; nil before Start
	stopped bool

	cancel   context.CancelFunc
	done     chan struct{} // closed by Stop: retirements close at once
	stopOnce sync.Once
	retiring sync.WaitGroup // retirement goroutines

	// retireGrace is how long a retired pool stays open after the reload
	// before it waits for its last requests (see retire).
	retireGrace time.Duration
}

// member is one pool of a Set with its configuration and the background
// goroutines that watch its targets.
type member struct {
	pool   *Pool
	cfg    PoolConfig
	cancel context.CancelFunc // nil while not watched
	wg     sync.WaitGroup
}

// defaultRetireGrace is the Set's retireGrace: longer than a request takes
// from loading the route table to entering the pool (receiving a buffered
// body head, waiting for a concurrency slot of at most a second).
const defaultRetireGrace = 2 * time.Second

// New builds the pools of cfg, a provisioned section (Config.SetDefaults,
// Config.Validate). Nothing runs in the background until Start.
func New(cfg Config) (*Set, error) {
	c := clone(cfg)
	s := &Set{members: make(map[string]*member, len(c)), done: make(chan struct{}), retireGrace: defaultRetireGrace}
	for _, name := range sortedNames(c) {
		s.members[name] = &member{pool: newPool(name, c[name]), cfg: c[name]}
	}
	s.names = sortedNames(c)
	return s, nil
}

// clone copies cfg, so that the caller's maps and lists stay its own.
func clone(cfg Config) Config {
	c := make(Config, len(cfg))
	for name, p := range cfg {
		p.Targets = slices.Clone(p.Targets)
		c[name] = p
	}
	return c
}

// Pool returns the pool called name, or nil.
func (s *Set) Pool(name string) *Pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.members[name]; m != nil {
		return m.pool
	}
	return nil
}

// Names returns the pool names in sorted order. The caller must not modify
// the slice.
func (s *Set) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names
}

// Start runs one background goroutine per target: the active health checks
// of pools that configure a path, and the re-probe of ejected targets. They
// stop when ctx ends or on Stop. Start runs once; later calls do nothing.
// Before Start, an ejected target comes back when its ejection has run out,
// without a probe.
func (s *Set) Start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx != nil || s.stopped {
		return
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	for _, name := range s.names {
		s.members[name].watch(s.ctx)
	}
}

// watch starts m's watchers under ctx.
func (m *member) watch(ctx context.Context) {
	ctx, m.cancel = context.WithCancel(ctx)
	m.pool.watched.Store(true)
	for _, t := range m.pool.targets {
		w := &watcher{t: t, check: m.cfg.HealthCheck, ejectFor: m.cfg.Passive.EjectFor}
		m.wg.Go(func() { w.run(ctx) })
	}
}

// close ends m's watchers, waits for them, and closes the idle connections
// to its targets. Requests may still be sent afterwards (without health
// checks): a HostClient dials again when asked.
func (m *member) close() {
	if m.cancel != nil {
		m.cancel()
	}
	m.wg.Wait()
	m.pool.watched.Store(false)
	for _, t := range m.pool.targets {
		t.hc.CloseIdleConnections()
		t.probe.CloseIdleConnections()
	}
}

// Stop ends the background goroutines, waits for them, closes the idle
// connections to the targets and closes the pools that a reload retired
// without waiting for their grace. Requests may still be sent afterwards
// (without health checks); Stop is for shutdown, after the proxy has
// drained.
func (s *Set) Stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		members := make([]*member, 0, len(s.members))
		for _, m := range s.members {
			members = append(members, m)
		}
		s.mu.Unlock()
		close(s.done)
		if s.cancel != nil {
			s.cancel()
		}
		for _, m := range members {
			m.close()
		}
		s.retiring.Wait()
	})
}
