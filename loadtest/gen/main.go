// Command gen is Sentinel's load generator. It sends traffic per plan at
// fixed arrival rates (open loop: a request is sent when it is due, whether
// or not earlier ones have answered), hostile chunked uploads over raw
// sockets, or a closed loop on a fixed number of connections, through
// phases, and prints per phase and plan the offered rate, goodput,
// availability, p50/p99 latency and the answers by kind; with the gateway's
// admin URL, what its /metrics counted per phase (sheds and rejections by
// reason, ejections, breaker trips, mode changes); with -check, the overload
// scenario's acceptance targets as PASS/FAIL.
//
//	gen -target http://127.0.0.1:8080 -phases 'a.warmup:10s:P=40,S=40,F=40;a.spike:20s:P=40,S=40,F=2000'
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

func main() {
	target := flag.String("target", "http://127.0.0.1:8080", "base URL to load (the gateway, or the backend directly)")
	admin := flag.String("admin", "", "the gateway's admin URL, to report what its /metrics counted per phase")
	spec := flag.String("phases", "steady:10s:P=40,S=40,F=40",
		"phases: name:duration:P=rate,S=rate,F=rate,A=attack-rate,C=connections[:hook-url];...")
	capacity := flag.Float64("capacity", 0, "the backend's capacity in requests per second, for goodput as a share of it")
	maxOutstanding := flag.Int("max-outstanding", 8000, "bound on requests in flight; past it requests are dropped and counted")
	timeout := flag.Duration("timeout", 2*time.Second, "request timeout")
	label := flag.String("label", "", "title of the tables")
	keys := flag.String("keys", "", "API keys per plan, overriding loadtest/overload.yaml's: P=key,S=key,F=key")
	compare := flag.String("compare", "", "closed-loop phases (C=n) also load this base URL, alternating with -target")
	compareLabel := flag.String("compare-label", "compare", "name of the -compare target in the tables")
	rounds := flag.Int("rounds", 2, "alternations of a closed-loop phase between -target and -compare")
	doCheck := flag.Bool("check", false, "print the acceptance targets of the phases named group.spike/slow/attack/saturate as PASS/FAIL")
	var att attackOptions
	flag.StringVar(&att.key, "attack-key", "attack-key", "API key of the hostile uploads (A=rate)")
	flag.IntVar(&att.oversize, "attack-size", 2<<20, "bytes of an oversized chunked upload")
	flag.DurationVar(&att.slowFor, "attack-slow-for", 4*time.Second, "how long a slow chunked upload trickles")
	flag.DurationVar(&att.slowEvery, "attack-slow-every", 500*time.Millisecond, "interval between a slow upload's one-byte chunks")
	flag.DurationVar(&att.timeout, "attack-timeout", 5*time.Second, "longest wait for an answer to a hostile upload")
	flag.Parse()
	if err := setKeys(*keys); err != nil {
		fail(err)
	}
	phases, err := parsePhases(*spec)
	if err != nil {
		fail(err)
	}
	g := &generator{
		target:      strings.TrimRight(*target, "/"),
		compare:     strings.TrimRight(*compare, "/"),
		rounds:      *rounds,
		client:      &fasthttp.Client{MaxConnsPerHost: *maxOutstanding, ReadTimeout: *timeout, WriteTimeout: *timeout, MaxIdleConnDuration: 10 * time.Second},
		outstanding: make(chan struct{}, *maxOutstanding),
		timeout:     *timeout,
		attack:      att,
	}
	if *label != "" {
		fmt.Printf("\n### %s\n\n", *label)
	}
	printPlanHeader()
	var outs []outcome
	for _, p := range phases {
		before := scrape(*admin)
		res := g.run(p)
		o := outcome{phase: p, result: res, gw: gatewayChange(before, scrape(*admin))}
		printPlanRows(o, *compareLabel)
		outs = append(outs, o)
	}
	printPhases(outs, *capacity)
	if *doCheck {
		printChecks(checks(outs, *capacity))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gen:", err)
	os.Exit(2)
}
