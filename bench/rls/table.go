package main

import (
	"fmt"
	"io"
	"slices"
)

// printTable writes the medians of each row and service as a markdown
// table, with the ratios of Sentinel to envoyproxy/ratelimit when both ran.
func printTable(w io.Writer, o *options, rows []row, services []string, results map[string][]measure) {
	fmt.Fprintf(w, "%d callers, %v a row, median of %d round(s)\n\n", o.callers, o.duration, o.rounds)
	fmt.Fprintln(w, "| row | service | calls/s | OK | CPU µs a call | Redis CPU µs a call | store calls a call | RSS MB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		for _, s := range services {
			ms := results[r.name+"/"+s]
			fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %.1f | %.1f | %.3f | %.0f |\n", r.name, s,
				median(ms, measure.perSecond), median(ms, func(m measure) float64 { return float64(m.ok) }),
				median(ms, measure.cpuPerCall), median(ms, measure.redisPerCall), median(ms, measure.commandsPerCall),
				median(ms, func(m measure) float64 { return float64(m.rss >> 20) }))
		}
	}
	if len(services) < 2 {
		return
	}
	fmt.Fprintln(w, "\nSentinel against envoyproxy/ratelimit (median of the rounds' ratios):")
	fmt.Fprintln(w, "\n| row | calls/s | CPU a call | Redis CPU a call | RSS |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rows {
		a, b := results[r.name+"/"+services[0]], results[r.name+"/"+services[1]]
		fmt.Fprintf(w, "| %s | %.2f× | %.2f× | %.2f× | %.2f× |\n", r.name,
			ratio(a, b, measure.perSecond), ratio(a, b, measure.cpuPerCall), ratio(a, b, measure.redisPerCall),
			ratio(a, b, func(m measure) float64 { return float64(m.rss) }))
	}
	if slices.ContainsFunc(rows, func(r row) bool { return r.limit > 0 }) {
		fmt.Fprintf(w, "\nflood: the right answer is the limit times the row's length (%.0f OK).\n", 100*o.duration.Seconds())
	}
}

// median is the median of f over ms.
func median(ms []measure, f func(measure) float64) float64 {
	v := make([]float64, len(ms))
	for i, m := range ms {
		v[i] = f(m)
	}
	return medianOf(v)
}

// ratio is the median over rounds of f(a) ÷ f(b), round by round.
func ratio(a, b []measure, f func(measure) float64) float64 {
	var v []float64
	for i := range min(len(a), len(b)) {
		if d := f(b[i]); d > 0 {
			v = append(v, f(a[i])/d)
		}
	}
	return medianOf(v)
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
