// Command gen is Sentinel's open-loop load generator. It sends traffic per
// plan at fixed arrival rates (a request is sent when it is due, whether or
// not earlier ones have answered), through phases, and prints per phase and
// plan the offered rate, goodput, availability, p50/p99 latency and the
// answers by kind, plus the gateway's mode changes and shed counts when its
// admin /metrics is given.
//
//	gen -target http://127.0.0.1:8080 -phases 'steady:10s:P=40,S=40,F=40;spike:20s:P=40,S=40,F=2000'
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// plans are the traffic classes, with the API keys of loadtest/overload.yaml.
var plans = []struct{ short, name, key string }{
	{"P", "PREMIUM", "prem-key"},
	{"S", "STANDARD", "std-key"},
	{"F", "FREE", "free-key"},
}

// phase is one step of the scenario.
type phase struct {
	name     string
	duration time.Duration
	rates    [3]float64 // per plan, requests per second
	hook     string     // URL to POST at the start of the phase (backend tuning)
}

// parsePhases reads "name:10s:P=40,S=40,F=40[:hookURL];...".
func parsePhases(s string) ([]phase, error) {
	var out []phase
	for _, part := range strings.Split(s, ";") {
		f := strings.SplitN(strings.TrimSpace(part), ":", 4)
		if len(f) < 3 {
			return nil, fmt.Errorf("phase %q: want name:duration:P=r,S=r,F=r[:hook-url]", part)
		}
		d, err := time.ParseDuration(f[1])
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("phase %q: bad duration %q", part, f[1])
		}
		p := phase{name: f[0], duration: d}
		for _, kv := range strings.Split(f[2], ",") {
			k, v, _ := strings.Cut(kv, "=")
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || r < 0 {
				return nil, fmt.Errorf("phase %q: bad rate %q", part, kv)
			}
			i := planIndex(k)
			if i < 0 {
				return nil, fmt.Errorf("phase %q: unknown plan %q (P, S, F)", part, k)
			}
			p.rates[i] = r
		}
		if len(f) == 4 {
			p.hook = f[3]
		}
		out = append(out, p)
	}
	return out, nil
}

// setKeys overrides the plans' API keys: "P=key,F=key".
func setKeys(spec string) error {
	if spec == "" {
		return nil
	}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(kv, "=")
		i := planIndex(k)
		if !ok || i < 0 || v == "" {
			return fmt.Errorf("-keys: %q: want P=key, S=key or F=key", kv)
		}
		plans[i].key = v
	}
	return nil
}

func planIndex(k string) int {
	for i, p := range plans {
		if p.short == k || p.name == k {
			return i
		}
	}
	return -1
}

// tally counts one phase's answers for one plan.
type tally struct {
	mu                                   sync.Mutex
	sent, ok, limited, shed, upstream5xx int64
	errors, dropped                      int64
	latencies                            []time.Duration // of 2xx answers
	firstShed                            time.Duration   // since phase start; -1 none
}

func (t *tally) add(status int, gateway bool, lat, since time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
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

func quantile(l []time.Duration, q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return l[min(len(l)-1, int(q*float64(len(l))))]
}

type generator struct {
	target      string
	client      *fasthttp.Client
	outstanding chan struct{}
	timeout     time.Duration
}

// run sends one phase and returns its tallies.
func (g *generator) run(p phase) [3]*tally {
	var ts [3]*tally
	for i := range ts {
		ts[i] = &tally{firstShed: -1}
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.sendAt(p.rates[i], p.duration, plans[i].key, ts[i], start)
		}()
	}
	wg.Wait()
	return ts
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
				atomic.AddInt64(&t.dropped, 1)
				continue
			}
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				defer func() { <-g.outstanding }()
				g.one(key, t, start)
			}()
		}
	}
}

func (g *generator) one(key string, t *tally, phaseStart time.Time) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(g.target + "/work")
	req.Header.Set("X-API-Key", key)
	t0 := time.Now()
	err := g.client.DoTimeout(req, resp, g.timeout)
	lat := time.Since(t0)
	status := 0
	if err == nil {
		status = resp.StatusCode()
	}
	gateway := bytes.Equal(resp.Header.Server(), []byte("sentinel"))
	t.add(status, gateway, lat, t0.Sub(phaseStart))
}

// scrapeSum sums the samples of a metric from a Prometheus text page.
func scrapeSum(admin, name string) (float64, bool) {
	if admin == "" {
		return 0, false
	}
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	total, found := 0.0, resp.StatusCode == http.StatusOK
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			total += v
			found = true
		}
	}
	return total, found
}

func main() {
	target := flag.String("target", "http://127.0.0.1:8080", "base URL to load (the gateway, or the backend directly)")
	admin := flag.String("admin", "", "the gateway's admin URL, to report mode changes and shed counts")
	spec := flag.String("phases", "steady:10s:P=40,S=40,F=40", "phases: name:duration:P=rate,S=rate,F=rate[:hook-url];...")
	capacity := flag.Float64("capacity", 0, "the backend's capacity in requests per second, for goodput as a share of it")
	maxOutstanding := flag.Int("max-outstanding", 8000, "bound on requests in flight; past it requests are dropped and counted")
	timeout := flag.Duration("timeout", 2*time.Second, "request timeout")
	label := flag.String("label", "", "title of the table")
	keys := flag.String("keys", "", "API keys per plan, overriding loadtest/overload.yaml's: P=key,S=key,F=key")
	flag.Parse()
	if err := setKeys(*keys); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(2)
	}
	phases, err := parsePhases(*spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(2)
	}
	g := &generator{
		target:      strings.TrimRight(*target, "/"),
		client:      &fasthttp.Client{MaxConnsPerHost: *maxOutstanding, ReadTimeout: *timeout, WriteTimeout: *timeout, MaxIdleConnDuration: 10 * time.Second},
		outstanding: make(chan struct{}, *maxOutstanding),
		timeout:     *timeout,
	}
	if *label != "" {
		fmt.Printf("\n### %s\n\n", *label)
	}
	fmt.Println("| phase | plan | offered/s | goodput/s | availability | p50 | p99 | 429 gw | 503 gw | 5xx backend | errors | dropped | first shed |")
	fmt.Println("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, p := range phases {
		up0, _ := scrapeSum(*admin, "sentinel_adaptive_mode_transitions_total")
		ts := g.run(p)
		up1, haveModes := scrapeSum(*admin, "sentinel_adaptive_mode_transitions_total")
		secs := p.duration.Seconds()
		var good float64
		for i, t := range ts {
			if t.sent == 0 {
				continue
			}
			good += float64(t.ok) / secs
			first := "-"
			if t.firstShed >= 0 {
				first = "+" + t.firstShed.Round(10*time.Millisecond).String()
			}
			fmt.Printf("| %s | %s | %.0f | %.0f | %.2f%% | %v | %v | %d | %d | %d | %d | %d | %s |\n",
				p.name, plans[i].name, float64(t.sent)/secs, float64(t.ok)/secs, 100*float64(t.ok)/float64(t.sent),
				quantile(t.latencies, 0.5).Round(100*time.Microsecond), quantile(t.latencies, 0.99).Round(100*time.Microsecond),
				t.limited, t.shed, t.upstream5xx, t.errors, t.dropped, first)
		}
		extra := ""
		if *capacity > 0 {
			extra = fmt.Sprintf(" (%.0f%% of capacity %.0f/s)", 100*good / *capacity, *capacity)
		}
		modes := "n/a"
		if haveModes {
			modes = strconv.Itoa(int(up1 - up0))
		}
		fmt.Printf("| %s | all | | %.0f%s | | | | | | | | | mode changes: %s |\n", p.name, good, extra, modes)
	}
}
