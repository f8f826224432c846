package faults

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// chaosRun is one schedule being run: the Redis, each pod's link to it,
// the pods, the decisions they made and the answers the clients got.
type chaosRun struct {
	t       *testing.T
	s       chaosSchedule
	srv     *redistest.Server            // one redis-server, or
	cl      *redistest.ReplicatedCluster // the cluster (Schedule.Cluster)
	upURL   string
	links   []*harness.Link
	pods    podSet
	rec     *chaosRecord
	lease   atomic.Int64 // limits.max_lease of the configuration in force
	start   time.Time
	mu      sync.Mutex
	answers map[int]int // client side, by status (0: transport error)
	events  []string
	newIDs  atomic.Int64
	done    chan struct{} // closed when the schedule ends, however it ends
	podsMu  sync.Mutex    // held by a reload, and by a restart while it takes its pod down
	wg      sync.WaitGroup
}

// podSet is the pods serving now; a pod being restarted is skipped.
type podSet struct {
	mu   sync.Mutex
	gws  []*harness.Gateway
	down []bool
	turn int
}

// url is the proxy of pod i or, while it is down, of the pods up in turn
// (so that no one pod takes its share on top of its own).
func (p *podSet) url(i int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	i %= len(p.gws)
	if !p.down[i] {
		return p.gws[i].URL
	}
	var up []int
	for j, d := range p.down {
		if !d {
			up = append(up, j)
		}
	}
	if len(up) == 0 {
		return p.gws[i].URL
	}
	p.turn++
	return p.gws[up[p.turn%len(up)]].URL
}

func (p *podSet) set(i int, g *harness.Gateway, down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if g != nil {
		p.gws[i] = g
	}
	p.down[i] = down
}

func (p *podSet) state(i int) (*harness.Gateway, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gws[i], p.down[i]
}

func (p *podSet) get(i int) *harness.Gateway {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gws[i]
}

// chaosConfig is pod i's configuration: tenants steady and flood with a
// rule of the schedule's algorithm and limit each, a per-user policy keyed
// on X-User-Id (userLimit per window), the store through the pod's link,
// limits.expected_pods at the schedule's pods and limits.max_keys small
// enough for a key flood to pass it.
func (r *chaosRun) config(i int) string {
	limitOf := func(n int) string {
		if r.s.Algorithm == "token_bucket" {
			return fmt.Sprintf("algorithm: token_bucket, capacity: %d, refill_rate: %d", n, n)
		}
		return fmt.Sprintf("algorithm: %s, limit: %d, window: %v", r.s.Algorithm, n, chaosWindow)
	}
	rules := fmt.Sprintf("  - {tenant: steady, resource: default, %s}\n  - {tenant: flood, resource: default, %s}\n",
		limitOf(r.s.Limit), limitOf(r.s.Limit))
	limits := fmt.Sprintf("{ip: 0, tenant: 0, expected_pods: %d, max_keys: 100, max_lease: %d}", r.s.Pods, r.lease.Load())
	return harness.Config(r.upURL, append(faultSections(r.redisSection(i), limits),
		harness.WithSection("tenants", "  - {id: steady, plan: FREE, api_keys: [steady-key]}\n  - {id: flood, plan: FREE, api_keys: [flood-key]}\n"),
		harness.WithSection("rules", rules),
		harness.WithExtra(fmt.Sprintf("policies:\n  - {name: per-user, key: [header:X-User-Id], limits: [{%s}]}\n", limitOf(userLimit))))...)
}

// redisSection is pod i's redis section: its link, or the cluster.
func (r *chaosRun) redisSection(i int) string {
	if r.cl == nil {
		return fmt.Sprintf("{addrs: [%q]}", r.links[i].Addr())
	}
	quoted := make([]string, len(r.cl.Addrs))
	for i, a := range r.cl.Addrs {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Sprintf("{addrs: [%s], cluster: true}", strings.Join(quoted, ", "))
}

// startPod starts pod i on its configuration, its decisions recorded.
// startPod starts pod i. A pod restarted keeps its name, as a container
// restarted in its pod does: under a new name, the others would count the
// old one for 30 s if it could not leave (Redis unreachable at its
// shutdown), and divide their shares by one pod more, as documented for a
// pod gone for good, and the check's shares (the limit ÷ the schedule's
// pods) would not be theirs.
func (r *chaosRun) startPod(i int) *harness.Gateway {
	// Each schedule has a Redis of its own: the names need not differ
	// between schedules.
	name := fmt.Sprintf("chaos-pod-%d", i)
	return harness.StartWith(r.t, r.config(i), harness.Options{OnDecision: r.rec.observer(i), PodID: name})
}

// runSchedule runs s: the pods, the load, the faults at their times, then
// the check of both promises.
func runSchedule(t *testing.T, s chaosSchedule) {
	r := &chaosRun{t: t, s: s, rec: &chaosRecord{}, answers: map[int]int{}, done: make(chan struct{})}
	if s.Cluster {
		r.cl = redistest.StartReplicatedCluster(t)
	} else {
		r.srv = redistest.Start(t)
		for range s.Pods {
			r.links = append(r.links, harness.Listen(t, r.srv.Addr))
		}
	}
	r.upURL = harness.StartUpstream(t).URL
	r.lease.Store(1024)
	r.pods = podSet{gws: make([]*harness.Gateway, s.Pods), down: make([]bool, s.Pods)}
	for i := range s.Pods {
		r.pods.set(i, r.startPod(i), false)
	}
	harness.Eventually(t, 10*time.Second, "every pod counts the others", func() bool {
		for i := range s.Pods {
			if r.pods.get(i).LivePods(t) != s.Pods {
				return false
			}
		}
		return true
	})
	end := sync.OnceFunc(func() { close(r.done); r.wg.Wait() })
	defer end() // a fault that fails the test stops the load too
	r.rec.on.Store(true)
	r.start = time.Now()
	r.offer(nil, s.Limit*s.Steady/100, 3, "X-API-Key", func(int) string { return "steady-key" })
	r.offer(nil, 3*s.Limit, 6, "X-API-Key", func(int) string { return "flood-key" })
	r.runFaults()
	if left := s.Length - time.Since(r.start); left > 0 {
		time.Sleep(left)
	}
	end()
	r.rec.on.Store(false)
	r.check()
}

// offer sends requests at perSecond from workers paced by a ticker each,
// round robin over the pods up, with header set to value(i) for the i-th
// request of a worker, until stop is closed or the schedule ends.
func (r *chaosRun) offer(stop <-chan struct{}, perSecond, workers int, header string, value func(int) string) {
	period := time.Duration(workers) * time.Second / time.Duration(max(perSecond, 1))
	for w := range workers {
		r.wg.Go(func() {
			tick := time.NewTicker(period)
			defer tick.Stop()
			for i := 0; ; i++ {
				code := harness.Status("GET", r.pods.url(w+i)+"/c", header, value(i*workers+w))
				r.mu.Lock()
				r.answers[code]++
				r.mu.Unlock()
				select {
				case <-stop:
					return
				case <-r.done:
					return
				case <-tick.C:
				}
			}
		})
	}
}

// event logs what the schedule did, at its time since the load began.
func (r *chaosRun) event(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%v %s", time.Since(r.start).Round(10*time.Millisecond), fmt.Sprintf(format, args...)))
}

// chaosAction is one step of a schedule's timeline.
type chaosAction struct {
	at time.Duration
	do func()
}

// runFaults applies the faults' steps in the order of their times, from
// this goroutine (a pod's restart starts a gateway, which needs the test).
func (r *chaosRun) runFaults() {
	var steps []chaosAction
	for _, f := range r.s.Faults {
		steps = append(steps, r.steps(f)...)
	}
	for len(steps) > 0 {
		next := 0
		for i, a := range steps {
			if a.at < steps[next].at {
				next = i
			}
		}
		a := steps[next]
		steps = append(steps[:next], steps[next+1:]...)
		if wait := a.at - time.Since(r.start); wait > 0 {
			time.Sleep(wait)
		}
		a.do()
	}
}

// steps are the fault's actions: its start and, for a lasting fault, its
// end.
func (r *chaosRun) steps(f chaosFault) []chaosAction {
	one := func(do func()) []chaosAction { return []chaosAction{{f.At, do}} }
	two := func(begin, end func()) []chaosAction { return []chaosAction{{f.At, begin}, {f.At + f.For, end}} }
	switch f.Kind {
	case "pause":
		return two(func() { r.srv.Pause(); r.event("redis paused") }, func() { r.srv.Resume(); r.event("redis resumed") })
	case "slow":
		return two(func() { r.slowLinks(f.Delay) }, func() { r.slowLinks(0) })
	case "partition":
		l := r.links[f.Pod]
		return two(func() { l.Cut(); r.event("pod %d cut off", f.Pod) }, func() { l.Restore(); r.event("pod %d reconnected", f.Pod) })
	case "flush":
		return one(r.flush)
	case "restart":
		return one(func() { r.wg.Go(func() { r.restart(f.Pod) }) })
	case "reload":
		return one(r.reload)
	case "failover":
		return one(func() { r.killMaster([]string{"steady", "flood"}[f.Pod%2]) })
	case "keyflood":
		stop := make(chan struct{})
		return two(func() { r.keyFlood(stop) }, func() { close(stop); r.event("key flood ends, %d new IDs", r.newIDs.Load()) })
	}
	r.t.Fatalf("chaos: no such fault %q", f.Kind)
	return nil
}

func (r *chaosRun) slowLinks(d time.Duration) {
	for _, l := range r.links {
		l.Slow(d)
	}
	r.event("links slowed to %v a read", d)
}

// flush empties Redis (FLUSHALL) from another goroutine: a paused Redis
// runs it when it resumes.
func (r *chaosRun) flush() {
	r.event("FLUSHALL sent")
	go func() {
		rc, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{r.srv.Addr}})
		if err != nil {
			r.event("FLUSHALL: %v", err)
			return
		}
		defer rc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		err = rc.Do(ctx, rc.B().Flushall().Build()).Error()
		r.event("FLUSHALL answered (%v)", err)
	}()
}

// killMaster kills the master that holds the counter of tenant (steady
// or flood); its replica takes its slots over once the other masters
// agree it failed.
func (r *chaosRun) killMaster(tenant string) {
	rc, err := store.NewRedisClient(store.RedisConfig{Addrs: r.cl.Addrs, Cluster: true})
	require.NoError(r.t, err)
	defer rc.Close()
	nodeOf := func(tenant string) int {
		slot, err := rc.Do(context.Background(), rc.B().ClusterKeyslot().Key("{rule:"+tenant+":default}").Build()).AsInt64()
		require.NoError(r.t, err)
		return int(slot) * 3 / 16384
	}
	i, steady, flood := nodeOf(tenant), nodeOf("steady"), nodeOf("flood")
	r.cl.Masters[i].Stop()
	r.event("master %d killed, with the counters of %s (steady's on master %d, flood's on %d)", i, tenant, steady, flood)
}

// restart shuts pod i down, as SIGTERM does (its drain takes up to
// seconds, so it runs beside the other faults' steps), and starts a new one
// on the same configuration.
func (r *chaosRun) restart(i int) {
	r.podsMu.Lock()
	r.pods.set(i, nil, true)
	r.podsMu.Unlock()
	_ = r.pods.get(i).Shutdown(5 * time.Second)
	r.event("pod %d shut down", i)
	r.pods.set(i, r.startPod(i), false)
	r.event("pod %d started again", i)
}

// reload changes limits.max_lease in every pod's file and reloads each
// (a pod being restarted starts on the new file).
func (r *chaosRun) reload() {
	r.podsMu.Lock()
	defer r.podsMu.Unlock()
	r.lease.Store(1536 - r.lease.Load()) // 1024 ↔ 512
	for i := range r.s.Pods {
		g, down := r.pods.state(i)
		if down {
			continue
		}
		require.NoError(r.t, os.WriteFile(g.Path, []byte(r.config(i)), 0o600))
		applied, restart, err := g.Reload()
		require.NoError(r.t, err, "pod %d's reload", i)
		require.Empty(r.t, restart, "pod %d's reload", i)
		require.NotEmpty(r.t, applied, "pod %d's reload", i)
	}
	r.event("every pod reloaded with limits.max_lease %d", r.lease.Load())
}

// keyFlood sends requests with new X-User-Id values (one each, each under
// its limit) at 300/s, and two heavy users at 3× the per-user limit, until
// stop is closed.
func (r *chaosRun) keyFlood(stop <-chan struct{}) {
	r.event("key flood begins")
	seed := r.s.Seed
	r.offer(stop, 300, 8, "X-User-Id", func(i int) string {
		r.newIDs.Add(1)
		return fmt.Sprintf("new-%d-%d", seed, i)
	})
	for u := range 2 {
		r.offer(stop, 3*userLimit, 1, "X-User-Id", func(int) string { return fmt.Sprintf("heavy-%d-%d", seed, u) })
	}
}

// chaosRecord keeps every decision of the pods while on.
type chaosRecord struct {
	on   atomic.Bool
	mu   sync.Mutex
	list []chaosDecision
}

// chaosDecision is one decision: the key it was about (the tenant, or
// "user:" and the X-User-Id), the pod, the answer and its span.
type chaosDecision struct {
	key     string
	pod     int
	allowed bool
	span    span
}

// observer is pod i's OnDecision.
func (c *chaosRecord) observer(i int) func(req *limit.Request, d limit.Decision, from, to time.Time) {
	return func(req *limit.Request, d limit.Decision, from, to time.Time) {
		if !c.on.Load() {
			return
		}
		key := req.Tenant
		if key == "" && req.Attrs != nil {
			if v := req.Attrs.Header([]byte("X-User-Id")); len(v) > 0 {
				key = "user:" + string(v)
			}
		}
		if key == "" {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.list = append(c.list, chaosDecision{key: key, pod: i, allowed: d.Allowed, span: span{From: from, To: to}})
	}
}

func (r *chaosRun) answersSeen() map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.answers)
}
