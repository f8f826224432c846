package upstream

import (
	"context"
	"fmt"
	"sync"
)

// Set is every configured pool. Build it with New, run its health checks
// and re-probes with Start, end them with Stop.
type Set struct {
	pools map[string]*Pool
	names []string

	startOnce sync.Once
	stopOnce  sync.Once
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	cfg       Config
}

// New builds the pools of cfg. It fills cfg's defaults and validates it
// (main has normally done both), so a Set is never built from a bad config.
// Nothing runs in the background until Start.
func New(cfg Config) (*Set, error) {
	c := make(Config, len(cfg))
	for name, p := range cfg {
		p.Targets = append([]string(nil), p.Targets...)
		c[name] = p
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("cannot build upstream pools: %w", err)
	}
	s := &Set{pools: make(map[string]*Pool, len(c)), names: sortedNames(c), cfg: c}
	for _, name := range s.names {
		s.pools[name] = newPool(name, c[name])
	}
	return s, nil
}

// Pool returns the pool called name, or nil.
func (s *Set) Pool(name string) *Pool { return s.pools[name] }

// Names returns the pool names in sorted order. The caller must not modify
// the slice.
func (s *Set) Names() []string { return s.names }

// Start runs one background goroutine per target: the active health checks
// of pools that configure a path, and the re-probe of ejected targets. They
// stop when ctx ends or on Stop. Start runs once; later calls do nothing.
// Before Start, an ejected target comes back when its ejection has run out,
// without a probe.
func (s *Set) Start(ctx context.Context) {
	s.startOnce.Do(func() {
		ctx, cancel := context.WithCancel(ctx)
		s.cancel = cancel
		for _, name := range s.names {
			p := s.pools[name]
			cfg := s.cfg[name]
			p.watched.Store(true)
			for _, t := range p.targets {
				w := &watcher{t: t, check: cfg.HealthCheck, ejectFor: cfg.Passive.EjectFor}
				s.wg.Go(func() { w.run(ctx) })
			}
		}
	})
}

// Stop ends the background goroutines, waits for them, and closes the idle
// connections to the targets. Requests may still be sent afterwards (without
// health checks); Stop is for shutdown, after the proxy has drained.
func (s *Set) Stop() {
	s.stopOnce.Do(func() {
		s.startOnce.Do(func() {}) // a later Start does nothing
		if s.cancel != nil {
			s.cancel()
		}
		s.wg.Wait()
		for _, p := range s.pools {
			p.watched.Store(false)
			for _, t := range p.targets {
				t.hc.CloseIdleConnections()
				t.probe.CloseIdleConnections()
			}
		}
	})
}
