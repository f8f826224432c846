package main

import (
	"fmt"
	"strings"
	"time"
)

// outcome is one phase as measured.
type outcome struct {
	phase
	result
	gw gatewayDelta
}

// goodput is 2xx per second over the plans (the target's, not the compare
// target's).
func (o outcome) goodput() float64 {
	g := 0.0
	for _, t := range o.plans {
		if t.sent > 0 {
			g += float64(t.ok) / t.elapsed.Seconds()
		}
	}
	return g
}

// fullAfter is when, from the phase start, every plan's requests succeeded
// from then to the phase end: the send time of the last failure (0 when none
// failed); ok is false when failures went on into the last second.
func (o outcome) fullAfter() (time.Duration, bool) {
	last := time.Duration(-1)
	for _, t := range o.plans {
		last = max(last, t.lastFail)
	}
	if last < 0 {
		return 0, true
	}
	return last, last < o.duration-time.Second
}

func (o outcome) fullAfterString() string {
	d, ok := o.fullAfter()
	if !ok {
		return "not within the phase"
	}
	return "+" + d.Round(100*time.Millisecond).String()
}

func printPlanHeader() {
	fmt.Println("| phase | plan | offered/s | goodput/s | availability | p50 | p99 | 429 gw | 503 gw | 5xx backend | errors | dropped | first shed |")
	fmt.Println("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
}

func printPlanRows(o outcome, compareLabel string) {
	for i, t := range o.plans {
		name := plans[i].name
		if o.closed > 0 && i == 0 {
			name = fmt.Sprintf("PREMIUM closed loop ×%d", o.closed)
		}
		printTally(o.name, name, t)
	}
	if o.compare.sent > 0 {
		printTally(o.name, fmt.Sprintf("PREMIUM closed loop ×%d → %s", o.closed, compareLabel), o.compare)
	}
}

func printTally(phase, plan string, t *tally) {
	if t.sent == 0 {
		return
	}
	secs := t.elapsed.Seconds()
	first := "-"
	if t.firstShed >= 0 {
		first = "+" + t.firstShed.Round(10*time.Millisecond).String()
	}
	fmt.Printf("| %s | %s | %.0f | %.0f | %.2f%% | %v | %v | %d | %d | %d | %d | %d | %s |\n",
		phase, plan, float64(t.sent)/secs, float64(t.ok)/secs, 100*t.availability(),
		quantile(t.latencies, 0.5).Round(100*time.Microsecond), quantile(t.latencies, 0.99).Round(100*time.Microsecond),
		t.limited, t.shed, t.upstream5xx, t.errors, t.dropped, first)
}

// printPhases is the per-phase table: goodput against capacity and what the
// gateway's metrics counted.
func printPhases(outs []outcome, capacity float64) {
	fmt.Println()
	fmt.Println("| phase | goodput/s | all plans 2xx from | shed by reason | rejections by reason | client faults | upstream outcomes | ejections | breaker trips | modes up/down (end) | attacker outcomes |")
	fmt.Println("| --- | ---: | ---: | --- | --- | --- | --- | ---: | ---: | --- | --- |")
	for _, o := range outs {
		good := fmt.Sprintf("%.0f", o.goodput())
		if capacity > 0 && o.closed == 0 {
			good += fmt.Sprintf(" (%.0f%% of %.0f)", 100*o.goodput()/capacity, capacity)
		}
		gw := []string{"n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a"}
		if o.gw.ok {
			gw = []string{o.gw.sheds, o.gw.rejections, o.gw.clientFaults, o.gw.upstreamOutcomes,
				fmt.Sprint(o.gw.ejections), fmt.Sprint(o.gw.trips),
				fmt.Sprintf("%v/%v (%s)", o.gw.modesUp, o.gw.modesDown, modeName(o.gw.modeEnd))}
		}
		att := o.hostile.summary()
		if att == "" {
			att = "-"
		}
		fmt.Printf("| %s | %s | %s | %s | %s |\n", o.name, good, o.fullAfterString(), strings.Join(gw, " | "), att)
	}
}

func modeName(v float64) string {
	for n, r := range modeRank {
		if float64(r) == v {
			return n
		}
	}
	return fmt.Sprint(v)
}
