package main

import (
	"fmt"
	"time"
)

// check is one acceptance target and what was measured.
type check struct {
	phase, target, measured string
	result                  string // PASS, FAIL or n/a (not measurable in this run)
}

func verdict(pass bool) string {
	if pass {
		return "PASS"
	}
	return "FAIL"
}

// checks evaluates the overload scenario's acceptance targets on the phases
// named group.role: a spike (with group.recovery after it; PREMIUM's unloaded
// p99 is the lowest of the warmup phases', so that one noisy warmup does not
// loosen the target), slow,
// attack and saturate.
func checks(outs []outcome, capacity float64) []check {
	find := func(group, role string) *outcome {
		for i := range outs {
			if outs[i].group() == group && outs[i].role() == role {
				return &outs[i]
			}
		}
		return nil
	}
	var cs []check
	for _, o := range outs {
		switch o.role() {
		case "spike":
			cs = append(cs, spikeChecks(o, unloadedP99(outs), find(o.group(), "recovery"), capacity)...)
		case "slow":
			cs = append(cs, availabilityCheck(o, 0, 0.995))
		case "attack":
			cs = append(cs, attackChecks(o)...)
		case "saturate":
			cs = append(cs, saturateChecks(o)...)
		}
	}
	return cs
}

// unloadedP99 is the lowest PREMIUM p99 of the warmup phases; 0 when none.
func unloadedP99(outs []outcome) time.Duration {
	var best time.Duration
	for _, o := range outs {
		if o.role() != "warmup" || o.plans[0].ok == 0 {
			continue
		}
		if p := quantile(o.plans[0].latencies, 0.99); best == 0 || p < best {
			best = p
		}
	}
	return best
}

func availabilityCheck(o outcome, plan int, min float64) check {
	t := o.plans[plan]
	target := fmt.Sprintf("%s availability ≥ %g%%", plans[plan].name, 100*min)
	if min == 1 {
		target = plans[plan].name + " availability 100%"
	}
	return check{o.name, target,
		fmt.Sprintf("%.2f%%", 100*t.availability()), verdict(t.availability() >= min)}
}

func spikeChecks(o outcome, base time.Duration, rec *outcome, capacity float64) []check {
	var cs []check
	if capacity > 0 {
		cs = append(cs, check{o.name, "goodput ≥ 90% of capacity",
			fmt.Sprintf("%.0f/s (%.0f%%)", o.goodput(), 100*o.goodput()/capacity), verdict(o.goodput() >= 0.9*capacity)})
	}
	cs = append(cs, availabilityCheck(o, 0, 0.995))
	if base > 0 {
		p99 := quantile(o.plans[0].latencies, 0.99)
		cs = append(cs, check{o.name, "PREMIUM p99 ≤ 2× unloaded p99",
			fmt.Sprintf("%v vs 2×%v", p99.Round(100*time.Microsecond), base.Round(100*time.Microsecond)),
			verdict(o.plans[0].ok > 0 && p99 <= 2*base)})
	}
	cs = append(cs, availabilityCheck(o, 1, 0.95))
	modes := check{o.name, "≤ 1 mode change up and ≤ 1 down (spike + recovery)", "n/a", "n/a"}
	if o.gw.ok && rec != nil && rec.gw.ok {
		up, down := o.gw.modesUp+rec.gw.modesUp, o.gw.modesDown+rec.gw.modesDown
		modes.measured, modes.result = fmt.Sprintf("%v up, %v down", up, down), verdict(up <= 1 && down <= 1)
	}
	cs = append(cs, modes)
	if rec != nil {
		d, ok := rec.fullAfter()
		cs = append(cs, check{o.name, "every plan fully available ≤ 3s after the spike",
			rec.fullAfterString(), verdict(ok && d <= 3*time.Second)})
	}
	return cs
}

func attackChecks(o outcome) []check {
	cs := []check{
		{o.name, "no ejection", "n/a", "n/a"},
		{o.name, "no breaker trip", "n/a", "n/a"},
		{o.name, "mode stays Normal", "n/a", "n/a"},
	}
	if o.gw.ok {
		cs[0].measured, cs[0].result = fmt.Sprint(o.gw.ejections), verdict(o.gw.ejections == 0)
		cs[1].measured, cs[1].result = fmt.Sprint(o.gw.trips), verdict(o.gw.trips == 0)
		stays := o.gw.modesUp+o.gw.modesDown == 0 && o.gw.modeBefore == 0 && o.gw.modeEnd == 0
		cs[2].measured = fmt.Sprintf("%v up, %v down, ends %s", o.gw.modesUp, o.gw.modesDown, modeName(o.gw.modeEnd))
		cs[2].result = verdict(stays)
	}
	for i := range plans {
		if o.plans[i].sent > 0 {
			cs = append(cs, availabilityCheck(o, i, 1))
		}
	}
	return cs
}

func saturateChecks(o outcome) []check {
	t := o.plans[0]
	sheds := float64(t.shed + t.limited)
	if o.gw.ok {
		sheds = max(sheds, o.gw.shedTotal)
	}
	cs := []check{{o.name, "zero sheds", fmt.Sprintf("%v (gateway 429/503: %d)", sheds, t.shed+t.limited), verdict(sheds == 0)}}
	if o.compare.sent > 0 {
		on, off := float64(t.ok)/t.elapsed.Seconds(), float64(o.compare.ok)/o.compare.elapsed.Seconds()
		cs = append(cs, check{o.name, "throughput ≥ 0.95× adaptive.enabled: false",
			fmt.Sprintf("%.0f/s vs %.0f/s (%.2f×)", on, off, on/off), verdict(on >= 0.95*off)})
	}
	return cs
}

func printChecks(cs []check) {
	if len(cs) == 0 {
		return
	}
	fmt.Println()
	fmt.Println("| phase | target | measured | result |")
	fmt.Println("| --- | --- | --- | --- |")
	for _, c := range cs {
		fmt.Printf("| %s | %s | %s | %s |\n", c.phase, c.target, c.measured, c.result)
	}
}
