package e2e

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
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

// The tests of the limits that count what requests cost
// (docs/leases.md, "Limits that count what requests cost"): pods on one
// real redis-server in front of a model API of this file (costUpstream),
// which answers usage known only at the end, as the harness's upstream
// cannot.

// costRoutes serve /v1/chat/ as resource chat (the cost limits) and
// /login as resource login (the count_if limit).
const costRoutes = `  - {path_prefix: /v1/chat/, upstream: api, resource: chat}
  - {path_prefix: /login, upstream: api, resource: login}
  - {path_prefix: /, upstream: api, resource: default}
`

// costPolicy is a policy "tokens" on resource chat per API key (hot-key,
// the tenant hot's), limit per window; each call reserves its
// X-Max-Tokens (default 100, at most most) and settles at actual (the
// YAML of cost.actual).
func costPolicy(limit int, window time.Duration, most int, actual string) string {
	return fmt.Sprintf(`
policies:
  - name: tokens
    match: {resources: [chat]}
    key: [api_key]
    plan_multiplier: false
    limits:
      - limit: %d
        window: %v
        cost:
          estimate: {header: X-Max-Tokens, default: 100, max: %d}
          actual: {%s}
`, limit, window, most, actual)
}

// costPods starts n gateways on the redis-server at addr in front of up,
// with the other limits out of the way (no ip limit, a tenant limit no
// test reaches), the extra limits: keys (store_timeout, ...) and policies.
func costPods(t *testing.T, n int, up *costUpstream, addr, limits, policies string) []*harness.Gateway {
	t.Helper()
	cfg := harness.Config(up.URL, harness.WithSection("routes", costRoutes),
		harness.WithSection("redis", fmt.Sprintf("{addrs: [%q]}", addr)),
		harness.WithSection("limits", "{ip: 0, tenant: 1000000, "+limits+"}"),
		harness.WithExtra(policies))
	pods := make([]*harness.Gateway, n)
	for i := range pods {
		pods[i] = harness.Start(t, cfg)
	}
	harness.Eventually(t, 10*time.Second, "every pod counts the others live", func() bool {
		for _, g := range pods {
			if g.LivePods(t) != n {
				return false
			}
		}
		return true
	})
	return pods
}

// costTotal is sentinel_cost_total{policy, kind} as pod g exposes it.
// In-process pods share the process's metrics registry (the policy
// series are process-wide, see limit/catalog's seriesRegistry), so one
// pod's /metrics is the sum over the pods: adding the pods' pages up
// would count each settlement once per pod.
func costTotal(t *testing.T, g *harness.Gateway, policy, kind string) float64 {
	t.Helper()
	return harness.Scrape(t, g.Admin, "sentinel_cost_total", "policy", policy, "kind", kind)
}

// costKinds are sentinel_cost_total's kinds of a policy, by kind.
func costKinds(t *testing.T, g *harness.Gateway, policy string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, k := range []string{"reserved", "settled", "returned", "overdrawn"} {
		out[k] = costTotal(t, g, policy, k)
	}
	return out
}

// costUpstream is a model API: /v1/chat/stream streams server-sent events
// and ends with the usage (data: {"usage":{"total_tokens":N}}, then
// data: [DONE]); /v1/chat/whole answers whole, its usage in the header
// X-Usage-Total-Tokens and in its JSON; /login answers 401 unless ?ok=1.
// A call's cost N is its X-Cost header, else random in [1, X-Max-Tokens],
// known only at the end. It records what each call (X-Call) cost and when
// its answer ended. A stream with ?hold=1 waits for Release before its
// usage event.
type costUpstream struct {
	URL string

	held atomic.Int64 // streams that reached the hold

	mu   sync.Mutex
	ends map[string]costEnd
	gate chan struct{}
	once sync.Once
}

// costEnd is what one call cost and when its answer ended.
type costEnd struct {
	n  int64
	at time.Time
}

func startCostUpstream(t *testing.T) *costUpstream {
	t.Helper()
	u := &costUpstream{ends: map[string]costEnd{}, gate: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/v1/chat/stream", u.stream)
	mux.HandleFunc("/v1/chat/whole", u.whole)
	mux.HandleFunc("/login", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("ok") != "1" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { u.Release(); _ = srv.Close() })
	u.URL = "http://" + ln.Addr().String()
	return u
}

// Release lets the held streams end.
func (u *costUpstream) Release() { u.once.Do(func() { close(u.gate) }) }

// cost is what call r costs: X-Cost, else random in [1, X-Max-Tokens].
func (u *costUpstream) cost(r *http.Request) int64 {
	if n, err := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64); err == nil {
		return n
	}
	m, err := strconv.ParseInt(r.Header.Get("X-Max-Tokens"), 10, 64)
	if err != nil || m < 1 {
		m = 100
	}
	return 1 + rand.Int64N(m)
}

func (u *costUpstream) record(r *http.Request, n int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ends[r.Header.Get("X-Call")] = costEnd{n: n, at: time.Now()}
}

// stream sends 3 to 6 flushed events over 50 to 300 ms, then the usage
// and [DONE].
func (u *costUpstream) stream(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	n := u.cost(r)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	f := w.(http.Flusher)
	events := 3 + rand.IntN(4)
	gap := time.Duration(50+rand.IntN(251)) * time.Millisecond / time.Duration(events)
	for i := range events {
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"word%d \"}}]}\n\n", i)
		f.Flush()
		time.Sleep(gap)
	}
	if r.URL.Query().Get("hold") == "1" {
		u.held.Add(1)
		<-u.gate
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":0,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", n)
	f.Flush()
	u.record(r, n)
}

// whole answers at once, its usage in a header and in the JSON.
func (u *costUpstream) whole(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	n := u.cost(r)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Usage-Total-Tokens", strconv.FormatInt(n, 10))
	fmt.Fprintf(w, `{"choices":[{"message":{"content":"ok"}}],"usage":{"total_tokens":%d}}`, n)
	u.record(r, n)
}

// end is what call id cost and when its answer ended (ok false: it did
// not end at the upstream).
func (u *costUpstream) end(id string) (costEnd, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	e, ok := u.ends[id]
	return e, ok
}

// spent is the sum of the costs of the answers that ended, and their
// number.
func (u *costUpstream) spent() (sum int64, answers int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, e := range u.ends {
		sum += e.n
	}
	return sum, len(u.ends)
}

// costCall is one call as its client saw it: sent before the request was
// written, head when the answer's head came. The gateway admitted it
// between the two.
type costCall struct {
	id         string
	status     int
	sent, head time.Time
	body       string
}

var costCallSeq atomic.Int64

// chat sends POST url (a /v1/chat/ path) with the API key hot-key and
// headers (name, value pairs), reads the answer whole and returns the
// call; err is a transport error.
func chat(url string, headers ...string) (costCall, error) {
	c := costCall{id: strconv.FormatInt(costCallSeq.Add(1), 10)}
	req, err := http.NewRequest("POST", url, strings.NewReader("{}"))
	if err != nil {
		return c, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", "hot-key")
	req.Header.Set("X-Call", c.id)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	c.sent = time.Now()
	resp, err := harness.Client.Do(req)
	if err != nil {
		return c, err
	}
	c.head, c.status = time.Now(), resp.StatusCode
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.body = strings.TrimSpace(string(b))
	return c, err
}

// mustChat is chat that fails the test on a transport error.
func mustChat(t *testing.T, url string, headers ...string) costCall {
	t.Helper()
	c, err := chat(url, headers...)
	require.NoError(t, err)
	return c
}

// TestCostRefundKeepsACheapClientServed: a client whose calls each
// reserve 400 (X-Max-Tokens) but cost 10 (X-Usage-Total-Tokens, an
// answer read whole: settled before the gateway writes it) calls one after
// another, in turn through 3 pods, on a limit of 1000 per 10 s. What each
// answer did not cost goes back, so call k+1 passes while the k calls
// before it cost 10k and 10k + 400 <= 1000: 61 calls pass (k = 0..60), the
// 62nd is refused, and stays refused. Without the refunds it would get 2.
//
// A return goes to the store in the background ("settling never delays
// the answer"), so a call sent at once to another pod may be refused
// before the return lands (a 429 with a Retry-After of a whole window):
// the client tries a refused call again, on the next pod, for up to 2 s,
// and only a refusal that lasts counts. The transient ones are logged.
func TestCostRefundKeepsACheapClientServed(t *testing.T) {
	const limit, estimate, cost = 1000, 400, 10
	srv := redistest.Start(t)
	up := startCostUpstream(t)
	pods := costPods(t, 3, up, srv.Addr, "store_timeout: 2s",
		costPolicy(limit, 10*time.Second, 400, "header: X-Usage-Total-Tokens"))
	before := costKinds(t, pods[0], "tokens")
	start := time.Now()
	passed, transient, last := cheapCalls(t, pods, 200, "X-Max-Tokens", strconv.Itoa(estimate), "X-Cost", strconv.Itoa(cost))
	took := time.Since(start)
	t.Logf("%d calls passed before a lasting 429 (%s) in %v; %d refusals lifted by a retry; 2 would pass without refunds",
		passed, last.body, took.Round(time.Millisecond), transient)
	require.Equal(t, http.StatusTooManyRequests, last.status, "200 calls of 400 reserved passed a limit of 1000")
	require.Less(t, took, 10*time.Second, "the calls must fit in one window for the count to be exact")
	assert.GreaterOrEqual(t, passed, (limit-estimate)/cost, "the refunds must keep the cheap client served")
	assert.Equal(t, (limit-estimate)/cost+1, passed, "refused exactly when the spend plus the estimate passes the limit")
	after := costKinds(t, pods[0], "tokens")
	assert.Equal(t, float64(passed*cost), after["settled"]-before["settled"], "settled at the answers' usage")
	assert.Equal(t, float64(passed*(estimate-cost)), after["returned"]-before["returned"], "the rest went back")
	assert.Equal(t, float64(passed*estimate), after["reserved"]-before["reserved"], "a refused call reserves nothing")
	assert.Zero(t, after["overdrawn"]-before["overdrawn"])
}

// cheapCalls sends up to n calls to /v1/chat/whole with headers, one
// after another, in turn through pods, and returns how many passed before
// one was refused for 2 s (tried again every 20 ms on the next pod), how
// many refusals a retry lifted, and the last answer.
func cheapCalls(t *testing.T, pods []*harness.Gateway, n int, headers ...string) (passed, transient int, last costCall) {
	t.Helper()
	next := 0
	call := func() costCall {
		c := mustChat(t, pods[next%len(pods)].URL+"/v1/chat/whole", headers...)
		next++
		require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, c.status, "%s", c.body)
		return c
	}
	for passed < n {
		last = call()
		for refusedAt := time.Now(); last.status != http.StatusOK && time.Since(refusedAt) < 2*time.Second; {
			time.Sleep(20 * time.Millisecond)
			if last = call(); last.status == http.StatusOK {
				transient++
			}
		}
		if last.status != http.StatusOK {
			return passed, transient, last
		}
		passed++
	}
	return passed, transient, last
}

// failedLoginsPolicy counts the 401 and 403 answers of /login per client
// IP: 5 a minute.
const failedLoginsPolicy = `
policies:
  - name: failed-logins
    match: {resources: [login]}
    key: [ip]
    limits:
      - {limit: 5, window: 1m, count_if: {status: [401, 403]}}
`

// TestFailedLoginsAcrossPods: a count_if limit of 5 failed logins a minute
// per IP on 3 pods. Successes give their reservation back: 30 of them, in
// turn through the pods, are never refused. Then 5 failures pass (401,
// across the pods) and the 6th is refused on every pod. A success is then
// refused too: this is the intended behaviour, not a leak of successes
// into the count. Each request reserves 1 before it is forwarded (the
// gateway cannot know its status yet), and a key whose failures have
// spent the limit has nothing left to reserve: the limit refuses the key,
// whatever the request would have answered, until the window repays the
// failures (docs/leases.md: "If it does not fit, the request is refused").
func TestFailedLoginsAcrossPods(t *testing.T) {
	srv := redistest.Start(t)
	up := startCostUpstream(t)
	pods := costPods(t, 3, up, srv.Addr, "store_timeout: 2s", failedLoginsPolicy)
	before := costKinds(t, pods[0], "failed-logins")
	login := func(i int, query string) harness.Answer {
		return harness.Do(t, "POST", pods[i%len(pods)].URL+"/login"+query, "user=a&password=b")
	}
	for i := range 30 {
		a := login(i, "?ok=1")
		require.Equal(t, http.StatusOK, a.Status, "success %d (pod %d) refused: %s", i+1, i%3+1, a.Body)
	}
	for i := range 5 {
		a := login(i, "")
		require.Equal(t, http.StatusUnauthorized, a.Status, "failure %d (pod %d) must reach the upstream: %s", i+1, i%3+1, a.Body)
	}
	for i := range 3 {
		a := login(5+i, "")
		require.Equal(t, http.StatusTooManyRequests, a.Status, "a 6th failure (pod %d) passed: %s", (5+i)%3+1, a.Body)
		assert.Equal(t, "failed-logins", a.JSON(t)["policy"])
		a = login(i, "?ok=1")
		assert.Equal(t, http.StatusTooManyRequests, a.Status, "a success after the 5th failure (pod %d): %s", i%3+1, a.Body)
	}
	after := costKinds(t, pods[0], "failed-logins")
	assert.Equal(t, 35.0, after["reserved"]-before["reserved"], "one per admitted request, none for the refused")
	assert.Equal(t, 5.0, after["settled"]-before["settled"], "only the failures count")
	assert.Equal(t, 30.0, after["returned"]-before["returned"], "the successes gave theirs back")
}

// TestCostStreamedAcrossPods: 3 pods on one redis-server, a budget of 3000
// tokens per 2 s for one API key; every call reserves 400 (X-Max-Tokens)
// and streams server-sent events for 50 to 300 ms, its usage (random in
// [1, 400], known only at the end) in its last event. 100 clients call at
// once, in turn through the pods, and keep calling for 4 windows.
//
// The promise checked: in every window of 2 s, what the calls admitted in
// it cost is at most 3000 (the estimate bounds the cost, so the bound of
// docs/leases.md is the limit exactly). The window is over admission
// times because that is when the store counts a call: its reservation is
// counted from its admission for a window (and a lease's permits longer),
// and a return only gives back, where it was counted, what the answer did
// not cost; no cost is ever counted later than its admission. So at each
// admission the store's count covers the cost (or the larger estimate) of
// every call admitted in the window before it. The client cannot see the
// admission, only that it came after the call was sent and before the
// answer's head came: a window [t, t+2s) is checked on the calls known to
// be admitted in it (sent at or after t, head before t+2s), a subset of
// those admitted in it, so the check never fails on a correct gateway.
func TestCostStreamedAcrossPods(t *testing.T) {
	const limit, window = 3000, 2 * time.Second
	srv := redistest.Start(t)
	up := startCostUpstream(t)
	pods := costPods(t, 3, up, srv.Addr, "store_timeout: 2s", costPolicy(limit, window, 400, "sse: usage.total_tokens"))
	before := costKinds(t, pods[0], "tokens")
	start := time.Now()
	calls := streamLoad(t, pods, 100, 4*window)
	elapsed := time.Since(start)

	var admitted []costCall
	refused := 0
	for _, c := range calls {
		switch c.status {
		case http.StatusOK:
			require.True(t, strings.HasSuffix(c.body, "data: [DONE]"), "call %s: a stream cut: %q", c.id, c.body)
			admitted = append(admitted, c)
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("call %s: status %d: %s", c.id, c.status, c.body)
		}
	}
	costs := make([]int64, len(admitted))
	var longest time.Duration
	for i, c := range admitted {
		e, ok := up.end(c.id)
		require.True(t, ok, "call %s passed but its answer did not end at the upstream", c.id)
		costs[i], longest = e.n, max(longest, e.at.Sub(c.sent))
	}
	t.Logf("the longest call took %v from its sending to the upstream's usage event", longest.Round(time.Millisecond))
	worst, at := busiestWindow(admitted, costs, window, 10*time.Millisecond)
	t.Logf("%d calls in %v: %d admitted, %d refused; busiest %v window (from %v) cost %d of %d",
		len(calls), elapsed.Round(time.Millisecond), len(admitted), refused, window, at.Round(time.Millisecond), worst, limit)
	assert.LessOrEqual(t, worst, int64(limit), "the calls admitted in a window cost more than the limit")
	assert.Positive(t, refused, "the budget was not contended: no call was refused")
	spent, answers := up.spent()
	assert.Equal(t, len(admitted), answers, "the upstream answered the admitted calls, and no other")
	checkSettled(t, pods[0], before, spent, 400*int64(len(admitted)))
}

// streamLoad runs workers clients that start at once and call
// /v1/chat/stream (X-Max-Tokens: 400), in turn through pods, until d has
// passed; a refused client waits 100 ms before its next call. It returns
// every call.
func streamLoad(t *testing.T, pods []*harness.Gateway, workers int, d time.Duration) []costCall {
	t.Helper()
	var (
		mu    sync.Mutex
		calls []costCall
		turn  atomic.Int64
		wg    sync.WaitGroup
		fails atomic.Int64
	)
	go1 := make(chan struct{})
	end := time.Now().Add(d)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-go1
			for time.Now().Before(end) {
				g := pods[int(turn.Add(1))%len(pods)]
				c, err := chat(g.URL+"/v1/chat/stream", "X-Max-Tokens", "400")
				if err != nil {
					fails.Add(1)
					continue
				}
				mu.Lock()
				calls = append(calls, c)
				mu.Unlock()
				if c.status != http.StatusOK {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	close(go1)
	wg.Wait()
	require.Zero(t, fails.Load(), "calls failed without an answer")
	return calls
}

// busiestWindow is the most that the calls known to be admitted within
// one window cost (sent at or after its start, their head before its
// end), over windows starting every step, and the start of that window
// (from the first call sent).
func busiestWindow(calls []costCall, costs []int64, window, step time.Duration) (worst int64, at time.Duration) {
	if len(calls) == 0 {
		return 0, 0
	}
	first, last := calls[0].sent, calls[0].head
	for _, c := range calls {
		first, last = minTime(first, c.sent), maxTime(last, c.head)
	}
	for from := first; !from.After(last); from = from.Add(step) {
		var sum int64
		for i, c := range calls {
			if !c.sent.Before(from) && c.head.Before(from.Add(window)) {
				sum += costs[i]
			}
		}
		if sum > worst {
			worst, at = sum, from.Sub(first)
		}
	}
	return worst, at
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// checkSettled checks the tokens policy's sentinel_cost_total since
// before: settled, once every stream has closed, is what the upstream's
// answers cost (spent); reserved is the estimates; the difference went
// back, and nothing was overdrawn.
func checkSettled(t *testing.T, g *harness.Gateway, before map[string]float64, spent, reserved int64) {
	t.Helper()
	var now map[string]float64
	waited := harness.Eventually(t, 10*time.Second, "every stream settled", func() bool {
		now = costKinds(t, g, "tokens")
		return now["settled"]-before["settled"] >= float64(spent)
	})
	t.Logf("settled %.0f tokens (the upstream's answers cost %d), waited %v; reserved %.0f, returned %.0f",
		now["settled"]-before["settled"], spent, waited.Round(time.Millisecond), now["reserved"]-before["reserved"], now["returned"]-before["returned"])
	assert.Equal(t, float64(spent), now["settled"]-before["settled"], "settled what the answers cost")
	assert.Equal(t, float64(reserved), now["reserved"]-before["reserved"], "reserved the estimates of the admitted calls")
	assert.Equal(t, float64(reserved-spent), now["returned"]-before["returned"], "returned what the answers did not cost")
	assert.Zero(t, now["overdrawn"]-before["overdrawn"], "no answer cost more than its estimate")
}

// TestCostSettlementsDuringARedisPause: 3 pods, a budget of 1000 tokens
// per 30 s (no spend leaves the window during the test), store_timeout
// 250 ms (an overdraft's store call gives up after 2.5 s; a loaded machine
// seldom makes a call slower). One call per pod
// reserves 100 (X-Max-Tokens) and is admitted, its stream held open; Redis
// is paused (SIGSTOP, for 3 s at least); the streams end, each having cost 300, so
// each pod settles an overdraft of 200 that the store cannot take: its
// bucket keeps it (sentinel_cost_overdrafts_kept_total = 600). Redis
// resumes and runs the abandoned overdraft calls late, past their
// deadline: they must not count a second time.
//
// The key has then spent 900 of 1000, and must be able to spend exactly
// 100 more. A kept overdraft goes with its pod's next store call for the
// key (docs/leases.md, "Under faults"), not before: a call reserving the
// whole limit (1000), refused on each pod whatever the store counts,
// makes that call. Then a call reserving 101 is refused on every pod (the
// overdrafts were counted: without them 700 would be left), one reserving
// 100 passes (counted once: twice would leave nothing), and after it a
// call reserving 1 is refused on every pod.
func TestCostSettlementsDuringARedisPause(t *testing.T) {
	srv := redistest.Start(t)
	up := startCostUpstream(t)
	pods := costPods(t, 3, up, srv.Addr, "store_timeout: 250ms",
		costPolicy(1000, 30*time.Second, 1000, "sse: usage.total_tokens"))
	before := costKinds(t, pods[0], "tokens")
	keptBefore := harness.Scrape(t, pods[0].Admin, "sentinel_cost_overdrafts_kept_total")

	done := heldStreams(t, pods, up)
	srv.Pause()
	paused := time.Now()
	up.Release()
	for range pods {
		c := <-done
		require.Equal(t, http.StatusOK, c.status, "%s", c.body)
		require.True(t, strings.HasSuffix(c.body, "data: [DONE]"), "a stream cut: %q", c.body)
	}
	harness.Eventually(t, 10*time.Second, "every pod keeps its overdraft", func() bool {
		return harness.Scrape(t, pods[0].Admin, "sentinel_cost_overdrafts_kept_total")-keptBefore >= 600
	})
	time.Sleep(time.Until(paused.Add(3 * time.Second))) // an outage the heartbeats notice too
	srv.Resume()
	t.Logf("Redis paused for %v", time.Since(paused).Round(time.Millisecond))
	assert.Equal(t, 600.0, harness.Scrape(t, pods[0].Admin, "sentinel_cost_overdrafts_kept_total")-keptBefore)
	harness.Eventually(t, 10*time.Second, "every pod reaches the store and counts 3 pods", func() bool {
		for _, g := range pods {
			if !g.StoreHealthy(t) || g.LivePods(t) != 3 {
				return false
			}
		}
		return true
	})
	// A pod back from an outage the heartbeats noticed decides keys that
	// were not contested alone, on its share, until the others have read
	// its next heartbeat: two cluster_intervals (500 ms each) after it
	// found the store again (docs/leases.md). The probes ask the store.
	time.Sleep(2*500*time.Millisecond + time.Second)
	probeRemaining(t, pods)
	after := costKinds(t, pods[0], "tokens")
	assert.Equal(t, 400.0, after["reserved"]-before["reserved"], "3 calls of 100 and one of 100")
	assert.Equal(t, 1000.0, after["settled"]-before["settled"], "3 calls of 300 and one of 100")
	assert.Equal(t, 600.0, after["overdrawn"]-before["overdrawn"])
}

// heldStreams admits one held stream per pod, reserving 100 and costing
// 300, and returns once the upstream holds them all; each call comes on
// the channel when its stream ends (after Release).
func heldStreams(t *testing.T, pods []*harness.Gateway, up *costUpstream) <-chan costCall {
	t.Helper()
	done := make(chan costCall, len(pods))
	for _, g := range pods {
		go func() {
			c, err := chat(g.URL+"/v1/chat/stream?hold=1", "X-Max-Tokens", "100", "X-Cost", "300")
			if err != nil {
				c.status, c.body = 0, err.Error()
			}
			done <- c
		}()
	}
	harness.Eventually(t, 10*time.Second, "the upstream holds a stream of each pod", func() bool {
		return up.held.Load() == int64(len(pods))
	})
	return done
}

// probeRemaining checks that the key can spend exactly 100 more: each pod
// refuses a call of 1000 (and reports its kept overdraft with it), each
// refuses 101, one passes 100, and each then refuses 1.
func probeRemaining(t *testing.T, pods []*harness.Gateway) {
	t.Helper()
	try := func(g *harness.Gateway, tokens int) costCall {
		n := strconv.Itoa(tokens)
		return mustChat(t, g.URL+"/v1/chat/whole", "X-Max-Tokens", n, "X-Cost", n)
	}
	for i, g := range pods {
		c := try(g, 1000)
		require.Equal(t, http.StatusTooManyRequests, c.status, "pod %d passed a call of the whole limit: %s", i+1, c.body)
	}
	for i, g := range pods {
		c := try(g, 101)
		assert.Equal(t, http.StatusTooManyRequests, c.status, "pod %d passed 101 of the 100 left: an overdraft was not counted", i+1)
	}
	passed := -1
	for i, g := range pods {
		c := try(g, 100)
		t.Logf("a call of 100 on pod %d: %d", i+1, c.status)
		if c.status == http.StatusOK {
			passed = i
			break
		}
	}
	require.GreaterOrEqual(t, passed, 0, "no pod passed 100 of the 100 left: an overdraft was counted twice")
	for i, g := range pods {
		c := try(g, 1)
		assert.Equal(t, http.StatusTooManyRequests, c.status, "pod %d passed a call past the limit: %s", i+1, c.body)
	}
}
