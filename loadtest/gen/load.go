package main

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// tally counts one phase's answers for one plan.
type tally struct {
	mu                                   sync.Mutex
	sent, ok, limited, shed, upstream5xx int64
	errors, dropped                      int64
	latencies                            []time.Duration // of 2xx answers
	firstShed                            time.Duration   // since phase start; -1 none
	lastFail                             time.Duration   // send time of the last non-2xx, since phase start; -1 none
	elapsed                              time.Duration   // how long this tally's load ran
}

func newTally() *tally { return &tally{firstShed: -1, lastFail: -1} }

// add counts one answer; since is when the request was sent, from the phase
// start.
func (t *tally) add(status int, gateway bool, lat, since time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if status < 200 || status >= 300 {
		t.lastFail = max(t.lastFail, since)
	}
	switch {
	case status >= 200 && status < 300:
		t.ok++
		t.latencies = append(t.latencies, lat)
	case status == 0:
		t.errors++
	case gateway && (status == 429 || status == 503):
		if status == 429 {
			t.limited++
		} else {
			t.shed++
		}
		if t.firstShed < 0 || since < t.firstShed {
			t.firstShed = since
		}
	case status >= 500:
		t.upstream5xx++
	default:
		t.errors++
	}
}

// drop counts a request the generator could not send (its bound on
// outstanding requests was full): a failure for availability.
func (t *tally) drop(since time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropped++
	t.lastFail = max(t.lastFail, since)
}

func (t *tally) availability() float64 {
	if t.sent == 0 {
		return 1
	}
	return float64(t.ok) / float64(t.sent)
}

func quantile(l []time.Duration, q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return l[min(len(l)-1, int(q*float64(len(l))))]
}

type generator struct {
	target      string // base URL
	compare     string // closed-loop phases also load this base URL, alternating
	rounds      int    // alternations of a closed-loop phase between target and compare
	client      *fasthttp.Client
	outstanding chan struct{}
	timeout     time.Duration
	attack      attackOptions
}

// result is one phase's tallies: per plan, the compare target's (closed
// loop), and the attacker's.
type result struct {
	plans   [3]*tally
	compare *tally
	hostile *attackTally
}

// run sends one phase and returns its tallies.
func (g *generator) run(p phase) result {
	res := result{compare: newTally(), hostile: newAttackTally()}
	for i := range res.plans {
		res.plans[i] = newTally()
	}
	if p.hook != "" {
		if _, _, err := fasthttp.Post(nil, p.hook, nil); err != nil {
			fmt.Fprintf(os.Stderr, "gen: phase %s hook %s: %v\n", p.name, p.hook, err)
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range plans {
		if p.rates[i] == 0 {
			continue
		}
		wg.Go(func() { g.sendAt(p.rates[i], p.duration, plans[i].key, res.plans[i], start) })
	}
	if p.attack > 0 {
		wg.Go(func() { g.attackAt(p.attack, p.duration, res.hostile) })
	}
	if p.closed > 0 {
		wg.Go(func() { g.closedLoop(p, res.plans[0], res.compare) })
	}
	wg.Wait()
	for _, t := range res.plans {
		if t.elapsed == 0 {
			t.elapsed = p.duration
		}
	}
	return res
}

// sendAt sends at rate per second for d, open loop: every millisecond it
// sends what is due. A request that finds the outstanding bound full is
// dropped and counted.
func (g *generator) sendAt(rate float64, d time.Duration, key string, t *tally, start time.Time) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var sent int64
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for now := range tick.C {
		el := now.Sub(start)
		if el >= d {
			return
		}
		due := int64(rate * el.Seconds())
		for ; sent < due; sent++ {
			atomic.AddInt64(&t.sent, 1)
			select {
			case g.outstanding <- struct{}{}:
			default:
				t.drop(el)
				continue
			}
			inflight.Go(func() {
				defer func() { <-g.outstanding }()
				g.one(g.client, g.target, key, t, start)
			})
		}
	}
}

func (g *generator) one(c *fasthttp.Client, target, key string, t *tally, phaseStart time.Time) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(target + "/work")
	req.Header.Set("X-API-Key", key)
	t0 := time.Now()
	err := c.DoTimeout(req, resp, g.timeout)
	lat := time.Since(t0)
	status := 0
	if err == nil {
		status = resp.StatusCode()
	}
	gateway := bytes.Equal(resp.Header.Server(), []byte("sentinel"))
	t.add(status, gateway, lat, t0.Sub(phaseStart))
}

// closedLoop keeps p.closed requests in flight with PREMIUM's key, each
// connection sending its next request when the previous one answered. With
// a compare target it alternates between the two in g.rounds slices, so
// that both see the same machine load on average.
func (g *generator) closedLoop(p phase, t, cmp *tally) {
	targets := []struct {
		url string
		t   *tally
	}{{g.target, t}}
	if g.compare != "" {
		targets = append(targets, struct {
			url string
			t   *tally
		}{g.compare, cmp})
	}
	rounds := max(1, g.rounds)
	slice := p.duration / time.Duration(rounds*len(targets))
	for range rounds {
		for _, tg := range targets {
			g.closedSlice(p.closed, slice, tg.url, tg.t)
		}
	}
}

func (g *generator) closedSlice(conns int, d time.Duration, target string, t *tally) {
	c := &fasthttp.Client{MaxConnsPerHost: conns, ReadTimeout: g.timeout, WriteTimeout: g.timeout}
	start := time.Now()
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			for time.Since(start) < d {
				atomic.AddInt64(&t.sent, 1)
				g.one(c, target, plans[0].key, t, start)
			}
		})
	}
	wg.Wait()
	c.CloseIdleConnections()
	t.mu.Lock()
	t.elapsed += time.Since(start)
	t.mu.Unlock()
}
