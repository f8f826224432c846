package faults

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sentinel-gateway/sentinel/test/harness"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
)

// resumeLimit is the limit of every tenant of the resume test, per second
// (a quota's: per second of the test, over the hour).
const resumeLimit = 200

// resumeTenant is one tenant of the resume test: its limit's algorithm and
// the rule or policy that sets it.
type resumeTenant struct {
	name, alg string
	headers   []string // the request's headers besides its API key
}

// resumeTenants cover every algorithm: the sliding ones and the token
// bucket through rules, a calendar quota through a policy on the tenant.
var resumeTenants = []resumeTenant{
	{name: "sw", alg: "sliding_window"},
	{name: "sl", alg: "sliding_log"},
	{name: "tb", alg: "token_bucket"},
	{name: "qt", alg: "quota", headers: []string{"X-Quota", "on"}},
}

// resumeFractions are the loads the tenants are offered, of their limit.
var resumeFractions = []int{30, 50, 70}

// resumeOutages are the Redis pauses of one run, in order.
var resumeOutages = []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second}

// resumeConfig is the three pods' configuration: each tenant of
// resumeTenants under one limit of resumeLimit per second (the quota:
// resumeLimit for each of the test's secs seconds, per hour).
func resumeConfig(upstreamURL, redisAddr string, secs int) string {
	tenants, rules := "", ""
	for _, tn := range resumeTenants {
		tenants += fmt.Sprintf("  - {id: %s, plan: FREE, api_keys: [%s-key]}\n", tn.name, tn.name)
		switch tn.alg {
		case "token_bucket":
			rules += fmt.Sprintf("  - {tenant: %s, resource: default, algorithm: token_bucket, capacity: %d, refill_rate: %d}\n", tn.name, resumeLimit, resumeLimit)
		case "quota":
		default:
			rules += fmt.Sprintf("  - {tenant: %s, resource: default, algorithm: %s, limit: %d, window: 1s}\n", tn.name, tn.alg, resumeLimit)
		}
	}
	policy := fmt.Sprintf("policies:\n  - name: resume-quota\n    match: {headers: {X-Quota: \"*\"}}\n    key: [tenant]\n    limits:\n      - {limit: %d, period: hour}\n", resumeLimit*secs)
	return harness.Config(upstreamURL, append(faultSections(fmt.Sprintf("{addrs: [%q]}", redisAddr), "{ip: 0, tenant: 0}"),
		harness.WithSection("tenants", tenants), harness.WithSection("rules", rules), harness.WithExtra(policy))...)
}

// resumeRotation picks which fraction each algorithm gets in this run:
// SENTINEL_FAULT_ROTATION when set (to replay a run), else the minute of
// the day. Over three rotations every algorithm meets every fraction.
func resumeRotation() int {
	if v, err := strconv.Atoi(os.Getenv("SENTINEL_FAULT_ROTATION")); err == nil {
		return v
	}
	return time.Now().Minute()
}

// offerWith sends requests with headers at perSecond, round robin over gws,
// from workers paced by one ticker each, until stop is closed.
func offerWith(gws []*harness.Gateway, perSecond, workers int, into *codeTally, stop <-chan struct{}, wg *sync.WaitGroup, headers ...string) {
	period := time.Duration(workers) * time.Second / time.Duration(perSecond)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(period)
			defer tick.Stop()
			for i := 0; ; i++ {
				sent := time.Now()
				into.addSent(harness.Status("GET", gws[(w+i)%len(gws)].URL+"/f", headers...), sent)
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		}()
	}
}

// TestFaultResumeEveryAlgorithm: tenants under their limit (30, 50 or 70%,
// rotated over the algorithms from run to run) are never refused while
// Redis is paused for 2, 5 and 10 s, nor when it answers again, whatever
// their limit's algorithm: each pod reports what it let through alone with
// the times it did, and the store places every part at its time.
func TestFaultResumeEveryAlgorithm(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	const gap = 2500 * time.Millisecond
	secs := 2 + int((resumeOutages[0]+resumeOutages[1]+resumeOutages[2]+3*gap)/time.Second) + 2
	var approved admissions
	gws := threePods(t, resumeConfig(up.URL, srv.Addr, secs), &approved)

	rot := resumeRotation()
	tallies := make([]codeTally, len(resumeTenants))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, tn := range resumeTenants {
		frac := resumeFractions[(i+rot)%len(resumeFractions)]
		rate := resumeLimit * frac / 100
		// A worker waits for each answer: enough of them that the rate is
		// met while a call waits out the store's deadline.
		offerWith(gws, rate, rate/5, &tallies[i], stop, &wg, append([]string{"X-API-Key", tn.name + "-key"}, tn.headers...)...)
	}
	time.Sleep(2 * time.Second)
	start := time.Now()
	var pauses []string
	for _, d := range resumeOutages {
		srv.Pause()
		pauses = append(pauses, fmt.Sprintf("%v at +%v", d, time.Since(start).Round(100*time.Millisecond)))
		time.Sleep(d)
		srv.Resume()
		time.Sleep(gap)
	}
	close(stop)
	wg.Wait()
	took := time.Since(start) + 2*time.Second
	t.Logf("faults: rotation %d (SENTINEL_FAULT_ROTATION replays it); redis paused %v; local refusals by the share %.0f, by the last answer %.0f (all tenants, the process's)",
		rot, pauses, harness.Scrape(t, gws[0].Admin, "sentinel_limit_fallback_denials_total", "reason", "local_share"),
		harness.Scrape(t, gws[0].Admin, "sentinel_limit_fallback_denials_total", "reason", "last_answer"))
	for i, tn := range resumeTenants {
		frac := resumeFractions[(i+rot)%len(resumeFractions)]
		codes := tallies[i].get()
		t.Logf("faults: %s at %d%% of %d/s (served %.0f/s): answers %v", tn.alg, frac, resumeLimit, float64(codes[http.StatusOK])/took.Seconds(), codes)
		if n := len(tallies[i].refusedSince(start)); n > 0 {
			t.Logf("%s's 429s since the first pause: %v", tn.alg, tallies[i].refusedSince(start)[:min(n, 40)])
		}
		assert.Zero(t, codes[http.StatusTooManyRequests], "%s at %d%% of its limit refused", tn.alg, frac)
		assert.Equal(t, 0, others(codes), "%s: answers other than 200", tn.alg)
		assert.Positive(t, codes[http.StatusOK], "%s: no request served", tn.alg)
	}
}
