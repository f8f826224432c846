package e2e

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/test/harness"
)

// The tests of the limits on requests in flight (docs/leases.md, "Requests
// in flight: slots") and of the wait instead of a 429 ("Waiting instead of
// 429"), on real redis-servers, in front of backends of this file.
//
// The slot tests across pods run each gateway as a process of its own
// (the built command, as binary_test.go runs it): a pod's slot lease in the
// store is named after its process (limit's slotOwner), so gateways that
// shared this test's process would share one lease, and each one's
// renewal would take the others' slots for lost answers of its own and
// give them back; a process is also what a test can kill -9.

// slotRoutes serve every path as resource exports.
const slotRoutes = "  - {path_prefix: /, upstream: api, resource: exports}\n"

// slotToken is the admin token of the gateways run as processes.
const slotToken = "s3cret"

// slotPolicy is the documentation's policy exports: n requests in flight
// per tenant (hot-key is tenant hot's key), whatever the plan.
func slotPolicy(n int) string {
	return fmt.Sprintf(`
policies:
  - name: exports
    match: {resources: [exports]}
    key: [tenant]
    plan_multiplier: false
    limits:
      - {concurrency: %d}
`, n)
}

// flightUpstream is a backend that counts the requests it serves at once,
// every change dated, for the most in flight and the number in flight over
// time. /work?d=200ms holds a request d; /held holds it until its
// connection closes; /stream streams a line every 20 ms for 30 s and
// records how it ended. Every request ends early when its connection
// closes (the handler's context), and leaves the count before its answer
// is written: the count never exceeds the gateway's slots in use.
type flightUpstream struct {
	URL   string
	ended chan streamEnd // how each /stream ended

	mu      sync.Mutex
	cur     int // in flight
	held    int // of them, /held
	most    int
	changes []flightChange
	works   []time.Time // arrivals of /work
}

type flightChange struct {
	at time.Time
	n  int
}

// streamEnd is when and how a /stream ended: "context done" (its
// connection closed), "write failed: ..." or "ended" (it ran its 30 s).
type streamEnd struct {
	at  time.Time
	how string
}

func startFlightUpstream(t *testing.T) *flightUpstream {
	t.Helper()
	u := &flightUpstream{ended: make(chan streamEnd, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/", u.serve)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	u.URL = "http://" + ln.Addr().String()
	return u
}

func (u *flightUpstream) serve(w http.ResponseWriter, r *http.Request) {
	held := r.URL.Path == "/held"
	u.enter(held, r.URL.Path == "/work")
	defer u.leave(held)
	switch r.URL.Path {
	case "/stream":
		u.stream(w, r)
		return
	case "/held":
		<-r.Context().Done()
		return
	}
	d, _ := time.ParseDuration(r.URL.Query().Get("d"))
	select {
	case <-time.After(d):
	case <-r.Context().Done():
	}
}

func (u *flightUpstream) enter(held, work bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.cur++
	u.most = max(u.most, u.cur)
	if held {
		u.held++
	}
	if work {
		u.works = append(u.works, time.Now())
	}
	u.changes = append(u.changes, flightChange{at: time.Now(), n: u.cur})
}

func (u *flightUpstream) leave(held bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.cur--
	if held {
		u.held--
	}
	u.changes = append(u.changes, flightChange{at: time.Now(), n: u.cur})
}

func (u *flightUpstream) stream(w http.ResponseWriter, r *http.Request) {
	f := w.(http.Flusher)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	end := time.After(30 * time.Second)
	for i := 0; ; i++ {
		if _, err := fmt.Fprintf(w, "line %d\n", i); err != nil {
			u.ended <- streamEnd{at: time.Now(), how: "write failed: " + err.Error()}
			return
		}
		f.Flush()
		select {
		case <-r.Context().Done():
			u.ended <- streamEnd{at: time.Now(), how: "context done"}
			return
		case <-end:
			u.ended <- streamEnd{at: time.Now(), how: "ended"}
			return
		case <-tick.C:
		}
	}
}

// counts are the requests in flight, those of them on /held, the most
// ever in flight, and the /work requests that arrived.
func (u *flightUpstream) counts() (cur, held, most, works int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.cur, u.held, u.most, len(u.works)
}

// firstWorkAfter is the first /work arrival after t (zero: none).
func (u *flightUpstream) firstWorkAfter(t time.Time) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, at := range u.works {
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// stats are the requests in flight between from and to, measured exactly
// from the dated changes (no sampling): their time-weighted mean and the
// share of the time with at least k in flight.
func (u *flightUpstream) stats(from, to time.Time, k int) (mean, share float64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	n, at := 0, from
	var area, atLeast float64
	add := func(until time.Time) {
		dt := until.Sub(at).Seconds()
		area += float64(n) * dt
		if n >= k {
			atLeast += dt
		}
		at = until
	}
	for _, c := range u.changes {
		if c.at.After(to) {
			break
		}
		if c.at.After(from) {
			add(c.at)
		}
		n = c.n
	}
	add(to)
	span := to.Sub(from).Seconds()
	return area / span, atLeast / span
}

// slotPod is a gateway run as a process of its own, killed when the test
// ends; its log is shown when the test fails.
type slotPod struct {
	URL, Admin string
	cmd        *exec.Cmd
	done       chan error
	once       sync.Once
	log        harness.LogBuffer
}

// slotPods starts n gateway processes on the redis-server at addr in
// front of upstreamURL (every path resource exports; no ip limit, a tenant
// limit no test reaches) with policies, and returns once each counts the
// others live.
func slotPods(t *testing.T, n int, upstreamURL, addr, policies string) []*slotPod {
	t.Helper()
	bin := sentinelBinary(t)
	pods := make([]*slotPod, n)
	for i := range pods {
		listen, admin := harness.FreeAddr(t), harness.FreeAddr(t)
		cfg := harness.Config(upstreamURL, harness.WithSection("routes", slotRoutes),
			harness.WithSection("server", fmt.Sprintf("{listen: %q, admin_listen: %q, admin_token: %s}", listen, admin, slotToken)),
			harness.WithSection("redis", fmt.Sprintf("{addrs: [%q]}", addr)),
			harness.WithSection("limits", "{ip: 0, tenant: 1000000}"),
			harness.WithExtra(policies+"log: {level: warn}\n"))
		pods[i] = startSlotPod(t, bin, cfg, listen, admin)
	}
	harness.Eventually(t, 20*time.Second, "every pod counts the others live", func() bool {
		for _, p := range pods {
			if p.livePods(t) != n {
				return false
			}
		}
		return true
	})
	return pods
}

func startSlotPod(t *testing.T, bin, cfg, listen, admin string) *slotPod {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	p := &slotPod{URL: "http://" + listen, Admin: "http://" + admin, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, "-config", path)
	p.cmd.Stderr = &p.log
	require.NoError(t, p.cmd.Start())
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("gateway %s log:\n%s", listen, p.log.String())
		}
	})
	harness.Eventually(t, 10*time.Second, "the gateway "+listen+" is ready", func() bool {
		return harness.Status("GET", p.Admin+"/readyz") == http.StatusOK
	})
	return p
}

// kill ends the pod with SIGKILL (no shutdown: it gives nothing back) and
// waits for its exit; a second call does nothing.
func (p *slotPod) kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
}

func (p *slotPod) livePods(t *testing.T) int {
	t.Helper()
	a := harness.Do(t, "GET", p.Admin+"/v1/state", "", "Authorization", "Bearer "+slotToken)
	require.Equal(t, http.StatusOK, a.Status, "%s", a.Body)
	lim, _ := a.JSON(t)["limiter"].(map[string]any)
	n, _ := lim["live_pods"].(float64)
	return int(n)
}

// slotLoad runs clients that start at once and call path (API key
// hot-key) on urls in turn until stop is closed; a refused client (429)
// tries again after a pause drawn in [least, most]. It returns the answers
// by status (0: a transport error).
func slotLoad(urls []string, clients int, path string, least, most time.Duration, stop <-chan struct{}) map[int]int {
	var (
		mu    sync.Mutex
		codes = map[int]int{}
		turn  atomic.Int64
		wg    sync.WaitGroup
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				code := harness.Status("GET", urls[int(turn.Add(1))%len(urls)]+path, "X-API-Key", "hot-key")
				mu.Lock()
				codes[code]++
				mu.Unlock()
				if code != http.StatusOK {
					time.Sleep(least + rand.N(most-least+1))
				}
			}
		}()
	}
	wg.Wait()
	return codes
}

func closeAfter(d time.Duration) <-chan struct{} {
	c := make(chan struct{})
	time.AfterFunc(d, func() { close(c) })
	return c
}

// TestSlotsBoundInFlightAcrossPods: 3 gateway processes on one
// redis-server, a tenant's exports limited to 10 in flight; the upstream
// holds each request 200 ms. 100 clients call at once, in turn through the
// pods, for 5 s; a refused client tries again after 5 to 20 ms.
//
// The promise checked: the upstream never serves more than 10 at once. Its
// count is exact (changed under a lock at the handler's entry and before
// its answer is written), and a request enters it after its admission and
// leaves it before its slot is given back, so it holds whatever the
// scheduling. The slots are not wasted: the time-weighted mean in flight,
// measured exactly from the dated changes from 0.5 s (the first leases)
// to 5 s, is at least 8. The issue asks for "at least 9 most of the time":
// a slot given back makes a round trip before another request holds it
// (a store call when the pod holding it has no request waiting, then a
// refused client's pause of up to 20 ms), during which 9 are in flight, so
// the share of the time with 9 or more depends on the machine's load; it
// is logged, and asserted at 50% at least, which only slots held back
// (not given back, or given back late) would miss.
func TestSlotsBoundInFlightAcrossPods(t *testing.T) {
	const n, clients, run = 10, 100, 5 * time.Second
	srv := redistest.Start(t)
	up := startFlightUpstream(t)
	pods := slotPods(t, 3, up.URL, srv.Addr, slotPolicy(n))
	urls := []string{pods[0].URL, pods[1].URL, pods[2].URL}
	start := time.Now()
	codes := slotLoad(urls, clients, "/work?d=200ms", 5*time.Millisecond, 20*time.Millisecond, closeAfter(run))
	elapsed := time.Since(start)
	mean, share := up.stats(start.Add(500*time.Millisecond), start.Add(run), n-1)
	_, _, most, works := up.counts()
	var calls, local float64
	for _, p := range pods {
		calls += harness.Scrape(t, p.Admin, "sentinel_limit_slot_store_calls_total")
		local += harness.Scrape(t, p.Admin, "sentinel_limit_slot_local_takes_total")
	}
	t.Logf("%v: %d answered 200 (%.1f/s; %.1f/s if the %d slots never idled), %d refused 429, %d other %v",
		elapsed.Round(time.Millisecond), codes[http.StatusOK], float64(codes[http.StatusOK])/elapsed.Seconds(),
		n/0.2, n, codes[http.StatusTooManyRequests], len(codes)-2, codes)
	t.Logf("in flight at the upstream: most %d of %d; mean %.2f; at least %d during %.1f%% of the time; %d requests reached it",
		most, n, mean, n-1, 100*share, works)
	t.Logf("slot store calls %.0f, slots taken from the pod's idle ones %.0f", calls, local)
	require.Equal(t, codes[http.StatusOK]+codes[http.StatusTooManyRequests], sumCodes(codes), "answers other than 200 and 429: %v", codes)
	assert.LessOrEqual(t, most, n, "more requests in flight at the upstream than the limit")
	assert.GreaterOrEqual(t, mean, 8.0, "the slots were wasted")
	assert.GreaterOrEqual(t, share, 0.5, "9 or more in flight less than half of the time")
}

func sumCodes(codes map[int]int) int {
	s := 0
	for _, c := range codes {
		s += c
	}
	return s
}

// TestSlotsOfAKilledPodComeBack: 3 gateway processes, 5 slots per tenant.
// Pod 1 holds the 5 with requests that its upstream holds; 10 clients call
// the other pods, in turn, every 20 ms, and are refused for 1 to 2 s. Pod 1
// is killed with SIGKILL: it gives nothing back, and its lease is no
// longer renewed. The promise checked: the store drops the lease within
// its 5 s TTL (renewed every second: 4 to 5 s after the kill), and the
// other pods then hold the 5 slots, within the 10 s this test allows; the
// upstream never serves more than 5 at once meanwhile (pod 1's requests
// end at the upstream when its connections close with the process).
func TestSlotsOfAKilledPodComeBack(t *testing.T) {
	const n = 5
	srv := redistest.Start(t)
	up := startFlightUpstream(t)
	pods := slotPods(t, 3, up.URL, srv.Addr, slotPolicy(n))
	for range n {
		go harness.Status("GET", pods[0].URL+"/held", "X-API-Key", "hot-key") // fails when pod 1 dies
	}
	harness.Eventually(t, 10*time.Second, "pod 1 holds every slot", func() bool {
		_, held, _, _ := up.counts()
		return held == n
	})
	stop := make(chan struct{})
	load := make(chan map[int]int, 1)
	go func() {
		load <- slotLoad([]string{pods[1].URL, pods[2].URL}, 10, "/work?d=300ms", 20*time.Millisecond, 20*time.Millisecond, stop)
	}()
	time.Sleep(time.Second + rand.N(time.Second)) // at any point of pod 1's renewal period
	_, _, _, works := up.counts()
	require.Zero(t, works, "the other pods took a slot that pod 1 holds")
	pods[0].kill()
	killed := time.Now()
	gone := harness.Eventually(t, 10*time.Second, "pod 1's requests end at the upstream", func() bool {
		_, held, _, _ := up.counts()
		return held == 0
	})
	harness.Eventually(t, 10*time.Second, "the other pods hold every slot", func() bool {
		cur, held, _, _ := up.counts()
		return held == 0 && cur == n
	})
	back := time.Since(killed)
	first := up.firstWorkAfter(killed).Sub(killed)
	time.Sleep(time.Second)
	close(stop)
	codes := <-load
	_, _, most, works := up.counts()
	t.Logf("after the kill: pod 1's requests ended at the upstream in %v; the first slot came back in %v, all %d in %v (lease TTL 5 s, renewed every 1 s)",
		gone.Round(10*time.Microsecond), first.Round(time.Millisecond), n, back.Round(time.Millisecond))
	t.Logf("the other pods' clients: %v; %d reached the upstream; most in flight %d of %d", codes, works, most, n)
	assert.LessOrEqual(t, most, n, "more requests in flight at the upstream than the limit")
	assert.Less(t, back, 10*time.Second)
	assert.Zero(t, codes[0], "transport errors on the live pods")
}

// inProcessPods starts n gateways in this process on the redis-server at
// addr in front of upstreamURL, with routes, limits keys added to "ip: 0,
// tenant: 1000000" (", key: value" each), and policies; it returns once
// each counts the others live.
func inProcessPods(t *testing.T, n int, upstreamURL, addr, routes, limits, policies string) []*harness.Gateway {
	t.Helper()
	cfg := harness.Config(upstreamURL, harness.WithSection("routes", routes),
		harness.WithSection("redis", fmt.Sprintf("{addrs: [%q]}", addr)),
		harness.WithSection("limits", "{ip: 0, tenant: 1000000"+limits+"}"),
		harness.WithExtra(policies))
	gws := make([]*harness.Gateway, n)
	for i := range gws {
		gws[i] = harness.Start(t, cfg)
	}
	harness.Eventually(t, 10*time.Second, "every pod counts the others live", func() bool {
		for _, g := range gws {
			if g.LivePods(t) != n {
				return false
			}
		}
		return true
	})
	return gws
}

// TestSlotGivenBackWhenTheClientLeaves: one slot per tenant; a client
// reads the beginning of a streamed answer that would last 30 s (the
// stream holds the slot: another request is refused), then closes its
// connection. The slot comes back at once (asserted within 2 s, measured
// until a request passes), and the upstream's connection for that stream
// is closed: its handler sees its context done or its write fail (within
// 2 s), rather than streaming on for nobody.
func TestSlotGivenBackWhenTheClientLeaves(t *testing.T) {
	srv := redistest.Start(t)
	up := startFlightUpstream(t)
	g := inProcessPods(t, 1, up.URL, srv.Addr, slotRoutes, "", slotPolicy(1))[0]
	conn := openStream(t, g.URL)
	require.Equal(t, http.StatusTooManyRequests, harness.Status("GET", g.URL+"/work", "X-API-Key", "hot-key"),
		"the stream holds the one slot")
	require.NoError(t, conn.Close())
	left := time.Now()
	back := harness.Eventually(t, 10*time.Second, "the slot comes back", func() bool {
		return harness.Status("GET", g.URL+"/work", "X-API-Key", "hot-key") == http.StatusOK
	})
	var end streamEnd
	select {
	case end = <-up.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream still streams 10 s after the client left")
	}
	t.Logf("the client left: the slot came back in %v; the upstream's stream ended after %v: %s",
		back.Round(time.Millisecond), end.at.Sub(left).Round(time.Millisecond), end.how)
	assert.Less(t, back, 2*time.Second, "the slot came back late")
	assert.NotEqual(t, "ended", end.how, "the upstream's connection was not closed")
	assert.Less(t, end.at.Sub(left), 2*time.Second, "the upstream's connection was closed late")
}

// openStream sends GET /stream (API key hot-key) on a connection of its
// own and returns the connection once the answer's first line came.
func openStream(t *testing.T, url string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(conn, "GET /stream HTTP/1.1\r\nHost: test\r\nX-API-Key: hot-key\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "line 0\n", line, "the stream has begun")
	return conn
}

// waitRoutes serve /free/ as resource default (no policy) and every other
// path as resource limited.
const waitRoutes = "  - {path_prefix: /free/, upstream: api, resource: default}\n  - {path_prefix: /, upstream: api, resource: limited}\n"

// waitPolicy is a policy name on resource limited: limit requests a window
// per key (api_key, or resource: one key for every client), a refused
// request waiting up to maxWait.
func waitPolicy(name, key string, limit int, window, maxWait time.Duration) string {
	return fmt.Sprintf(`
policies:
  - name: %s
    match: {resources: [limited]}
    key: [%s]
    plan_multiplier: false
    limits:
      - {limit: %d, window: %v, max_wait: %v}
`, name, key, limit, window, maxWait)
}

// waitCall is one request as its client saw it.
type waitCall struct {
	key        string
	status     int
	sent       time.Time
	took       time.Duration
	retryAfter string
}

// callWaiting sends GET url with the API key key and reads the answer
// whole; a transport error is status 0.
func callWaiting(url, key string) waitCall {
	c := waitCall{key: key, sent: time.Now()}
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return c
	}
	req.Header.Set("X-API-Key", key)
	resp, err := harness.Client.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.status, c.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	}
	c.took = time.Since(c.sent)
	return c
}

// TestWaitSmoothsTwiceTheRate: a policy of 10 requests per second per API
// key, max_wait 1 s. A client sends 20 requests evenly over a second (50
// ms apart: twice its rate), to one pod, then in turn to 3 pods. The
// first 10 pass at once, the next 10 wait for the permits of the first 10
// to leave the window (about 0.5 s, within max_wait): every request is
// answered 200, and the requests reach the upstream at the limit's rate.
//
// In any 1 s window of arrivals at the upstream there are at most 10 + 1:
// the limiter admits at most 10 in any second, and an arrival comes after
// its admission by the forwarding delay. Arrivals within 1 s can therefore
// belong to admissions spread over 1 s plus the difference of two
// forwarding delays; here a waiter is admitted just over 1 s after the
// request whose permit it takes (the permits free 50 ms apart, as the
// first 10 were sent), so one more arrival fits in a window when a
// forwarding is delayed more than a later one, and a second one more only
// when the forwarding delays differ by more than the 50 ms between two
// admissions.
func TestWaitSmoothsTwiceTheRate(t *testing.T) {
	t.Run("one pod", func(t *testing.T) { smoothTwiceTheRate(t, 1) })
	t.Run("three pods", func(t *testing.T) { smoothTwiceTheRate(t, 3) })
}

func smoothTwiceTheRate(t *testing.T, pods int) {
	const limit, requests, gap = 10, 20, 50 * time.Millisecond
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	gws := inProcessPods(t, pods, up.URL, srv.Addr, waitRoutes, "", waitPolicy("smooth", "api_key", limit, time.Second, time.Second))
	calls := make([]waitCall, requests)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(start.Add(time.Duration(i) * gap)))
			calls[i] = callWaiting(gws[i%pods].URL+"/x", "hot-key")
		}()
	}
	wg.Wait()
	arrivals := up.Arrivals("hot-key")
	most, at := mostWithin(arrivals, time.Second)
	var took []time.Duration
	for _, c := range calls {
		took = append(took, c.took)
	}
	slices.Sort(took)
	t.Logf("%d requests 50 ms apart on %d pod(s): statuses %v; client latency min %v, median %v, max %v",
		requests, pods, statusesOf(calls), took[0].Round(time.Millisecond), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	t.Logf("%d arrivals at the upstream over %v; at most %d in 1 s (the window from arrival %d)",
		len(arrivals), spanOf(arrivals).Round(time.Millisecond), most, at+1)
	for i, c := range calls {
		assert.Equal(t, http.StatusOK, c.status, "request %d (sent at %v): Retry-After %q", i+1, c.sent.Sub(start).Round(time.Millisecond), c.retryAfter)
	}
	assert.Len(t, arrivals, requests, "every request reached the upstream once")
	assert.LessOrEqual(t, most, limit+1, "more arrivals in a second than the limit and the slack")
}

// mostWithin is the most times within one window of d (from one of
// them), and the index of the first time of that window.
func mostWithin(times []time.Time, d time.Duration) (most, at int) {
	s := slices.Clone(times)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	j := 0
	for i := range s {
		for j < len(s) && s[j].Sub(s[i]) < d {
			j++
		}
		if j-i > most {
			most, at = j-i, i
		}
	}
	return most, at
}

func spanOf(times []time.Time) time.Duration {
	if len(times) == 0 {
		return 0
	}
	lo, hi := times[0], times[0]
	for _, at := range times {
		lo, hi = minTime(lo, at), maxTime(hi, at)
	}
	return hi.Sub(lo)
}

func statusesOf(calls []waitCall) map[int]int {
	m := map[int]int{}
	for _, c := range calls {
		m[c.status]++
	}
	return m
}

// TestWaitServesPremiumBeforeFree: one key for every client (key:
// resource), 5 requests per second, max_wait 3 s. 20 PREMIUM clients
// (tenant gold) and 20 FREE ones (tenant hot) send one request each at
// once. The first 5 to arrive pass; the others wait, PREMIUM first, and
// each second 5 more pass: about 10 PREMIUM waiters, then no FREE one
// before max_wait. Each request's wait is its client's latency minus a
// request's without a limit (the upstream answers at once). The promise
// checked: PREMIUM's median wait is below FREE's, and more PREMIUM
// requests pass than FREE ones. A request that gives up at max_wait
// (429) counts its whole wait.
//
// Then the full queue: with limits.wait_queue_per_key 5, a window of 2 s
// (a margin of seconds before the waiters leave the queue) and max_wait 3
// s, once 5 requests wait an extra one is refused at once with 429 and
// Retry-After, in well under max_wait, and the 5 waiters pass.
func TestWaitServesPremiumBeforeFree(t *testing.T) {
	t.Run("plan order", premiumBeforeFree)
	t.Run("full queue", fullWaitQueue)
}

func premiumBeforeFree(t *testing.T) {
	const each = 20
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	g := inProcessPods(t, 1, up.URL, srv.Addr, waitRoutes, "", waitPolicy("plans", "resource", 5, time.Second, 3*time.Second))[0]
	base := baseLatency(t, g.URL+"/free/x")
	calls := make(chan waitCall, 2*each)
	startAll := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 * each {
		key := []string{"gold-key", "hot-key"}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startAll
			calls <- callWaiting(g.URL+"/x", key)
		}()
	}
	close(startAll)
	wg.Wait()
	close(calls)
	waits := map[string][]time.Duration{}
	passed := map[string]int{}
	for c := range calls {
		require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, c.status, "%s", c.key)
		if c.status == http.StatusOK {
			passed[c.key]++
		} else {
			assert.NotEmpty(t, c.retryAfter, "a 429 without Retry-After")
		}
		waits[c.key] = append(waits[c.key], max(c.took-base, 0))
	}
	premium, free := waits["gold-key"], waits["hot-key"]
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	t.Logf("a request without a limit takes %v", base.Round(10*time.Microsecond))
	t.Logf("PREMIUM: %d of %d passed, wait p50 %v p99 %v", passed["gold-key"], each, ms(quantile(premium, 0.5)), ms(quantile(premium, 0.99)))
	t.Logf("FREE:    %d of %d passed, wait p50 %v p99 %v", passed["hot-key"], each, ms(quantile(free, 0.5)), ms(quantile(free, 0.99)))
	assert.Less(t, quantile(premium, 0.5), quantile(free, 0.5), "PREMIUM's median wait is not below FREE's")
	assert.Greater(t, passed["gold-key"], passed["hot-key"], "no more PREMIUM requests passed than FREE ones")
}

// baseLatency is the median latency of 5 requests to url (a route without
// a limit).
func baseLatency(t *testing.T, url string) time.Duration {
	t.Helper()
	var took []time.Duration
	for range 5 {
		c := callWaiting(url, "gold-key")
		require.Equal(t, http.StatusOK, c.status)
		took = append(took, c.took)
	}
	return quantile(took, 0.5)
}

// quantile is the q-quantile of ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func fullWaitQueue(t *testing.T) {
	const maxWait = 3 * time.Second
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	g := inProcessPods(t, 1, up.URL, srv.Addr, waitRoutes, ", wait_queue_per_key: 5",
		waitPolicy("plans-full", "resource", 5, 2*time.Second, maxWait))[0]
	for i := range 5 {
		require.Equal(t, http.StatusOK, callWaiting(g.URL+"/x", "gold-key").status, "request %d of the window's 5", i+1)
	}
	waiting := func() float64 { return harness.Scrape(t, g.Admin, "sentinel_limit_waiting", "policy", "plans-full") }
	refused := func() float64 {
		return harness.Scrape(t, g.Admin, "sentinel_limit_waits_total", "policy", "plans-full", "result", "refused")
	}
	waiters := make(chan waitCall, 5)
	for range 5 {
		go func() { waiters <- callWaiting(g.URL+"/x", "gold-key") }()
	}
	harness.Eventually(t, 5*time.Second, "5 requests wait", func() bool { return waiting() == 5 })
	before := refused()
	extra := callWaiting(g.URL+"/x", "gold-key")
	still := waiting()
	t.Logf("the 6th waiter: %d in %v, Retry-After %q; %v still waiting then", extra.status, extra.took.Round(10*time.Microsecond), extra.retryAfter, still)
	require.Equal(t, http.StatusTooManyRequests, extra.status)
	assert.NotEmpty(t, extra.retryAfter)
	assert.Less(t, extra.took, maxWait/2, "not refused at once")
	assert.Equal(t, 5.0, still, "the queue was no longer full")
	assert.Equal(t, 1.0, refused()-before, "sentinel_limit_waits_total{result=refused}")
	for range 5 {
		w := <-waiters
		assert.Equal(t, http.StatusOK, w.status, "a waiter after %v", w.took.Round(time.Millisecond))
	}
}
