// Command bench-table turns the runs that bench/compare.sh records (a TSV
// file with a header line, on stdin) into one markdown table on stdout: per
// configuration, in the order of first appearance, the median over rounds of
// each figure, and the ratios to the configuration's references (its nginx
// baseline, its HAProxy row and its floor, the bare fasthttp server of the
// same path), taken within each round (the reference ran minutes apart at
// most) and then the median; the req/s ratio to nginx also gives its lowest
// and highest round.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	runs, err := parse(os.Stdin)
	if err == nil {
		err = write(os.Stdout, runs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-table:", err)
		os.Exit(1)
	}
}

// run is one wrk measurement of one configuration in one round.
type run struct {
	round                 int
	name, label, baseline string
	// floor and haproxy name the row's other references (optional
	// columns; "" or "-": none).
	floor, haproxy  string
	requests        float64
	seconds         float64
	p50us, p99us    float64
	non2xx, sockErr float64
	cpuMS           [4]float64 // gateway, backend, redis, wrk
	modes           string     // adaptive modes entered during the run, comma-separated; "" or "-": none
	// The gateway's limit-store calls during the run, and those not
	// answered (timed out, failed, or skipped by the open store breaker);
	// optional columns, 0 when absent.
	storeCalls, storeUnanswered float64
	// rssKB is the gateway's peak resident memory during the run (KiB;
	// optional column, 0 when absent).
	rssKB float64
}

func (r run) rps() float64 { return r.requests / r.seconds }

// ok2xx is the rate of answers below 400 (wrk counts the others as status errors).
func (r run) ok2xx() float64 { return (r.requests - r.non2xx) / r.seconds }

// columns are the TSV header names parse needs, in run's order.
var columns = []string{"round", "name", "label", "baseline", "requests", "duration_us", "p50_us", "p99_us",
	"non2xx", "sockerr", "gateway_ms", "backend_ms", "redis_ms", "wrk_ms", "modes"}

func parse(r io.Reader) ([]run, error) {
	sc := bufio.NewScanner(r)
	if !sc.Scan() {
		return nil, fmt.Errorf("empty input: want a header line (%s)", strings.Join(columns, ", "))
	}
	idx := map[string]int{}
	for i, h := range strings.Split(sc.Text(), "\t") {
		idx[h] = i
	}
	for _, c := range columns {
		if _, ok := idx[c]; !ok {
			return nil, fmt.Errorf("header: no column %q", c)
		}
	}
	var runs []run
	for line := 2; sc.Scan(); line++ {
		f := strings.Split(sc.Text(), "\t")
		if len(f) < len(idx) {
			return nil, fmt.Errorf("line %d: %d fields, want %d", line, len(f), len(idx))
		}
		var nums [11]float64
		for i, c := range append([]string{"round"}, columns[4:len(columns)-1]...) {
			v, err := strconv.ParseFloat(f[idx[c]], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: %w", line, c, err)
			}
			nums[i] = v
		}
		if nums[1] <= 0 || nums[2] <= 0 {
			return nil, fmt.Errorf("line %d: %s: requests and duration_us must be > 0", line, f[idx["name"]])
		}
		r := run{round: int(nums[0]), name: f[idx["name"]], label: f[idx["label"]], baseline: f[idx["baseline"]],
			requests: nums[1], seconds: nums[2] / 1e6, p50us: nums[3], p99us: nums[4], non2xx: nums[5], sockErr: nums[6],
			cpuMS: [4]float64{nums[7], nums[8], nums[9], nums[10]}, modes: f[idx["modes"]]}
		if err := parseOptional(&r, f, idx); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		runs = append(runs, r)
	}
	return runs, sc.Err()
}

// parseOptional sets the fields of r that have optional columns: the store
// calls, the gateway's peak memory and the floor and HAProxy references.
func parseOptional(r *run, f []string, idx map[string]int) error {
	for c, dst := range map[string]*float64{"store_calls": &r.storeCalls, "store_unanswered": &r.storeUnanswered, "gateway_rss_kb": &r.rssKB} {
		if i, ok := idx[c]; ok {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return fmt.Errorf("%s: %w", c, err)
			}
			*dst = v
		}
	}
	for c, dst := range map[string]*string{"floor": &r.floor, "haproxy": &r.haproxy} {
		if i, ok := idx[c]; ok && f[i] != "-" {
			*dst = f[i]
		}
	}
	return nil
}

func write(w io.Writer, runs []run) error {
	if len(runs) == 0 {
		return fmt.Errorf("no runs")
	}
	byKey := map[string]run{} // name + round
	var names []string
	for _, r := range runs {
		if !slices.Contains(names, r.name) {
			names = append(names, r.name)
		}
		byKey[fmt.Sprint(r.name, "/", r.round)] = r
	}
	fmt.Fprintln(w, "| configuration | req/s | 2xx/s | p50 ms | p99 ms | status ≥ 400 or socket error | adaptive modes entered | store calls per request, unanswered | CPU µs/request: gateway | backend | redis | wrk | vs nginx: req/s (rounds' range) | 2xx/s | p99 | vs HAProxy: req/s | p99 | vs floor: req/s | p99 | gateway peak RSS MiB |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, name := range names {
		writeRow(w, runsNamed(runs, name), byKey)
	}
	return nil
}

// runsNamed is the rounds of the configuration name, in order.
func runsNamed(runs []run, name string) []run {
	var rs []run
	for _, r := range runs {
		if r.name == name {
			rs = append(rs, r)
		}
	}
	return rs
}

// writeRow writes the row of one configuration from its rounds rs (medians
// over the rounds); byKey finds each round's references.
func writeRow(w io.Writer, rs []run, byKey map[string]run) {
	m := func(f func(run) float64) float64 { return median(mapRuns(rs, f)) }
	cpu := func(i int) float64 { return m(func(r run) float64 { return r.cpuMS[i] * 1000 / r.requests }) }
	fmt.Fprintf(w, "| %s | %s | %s | %.2f | %.2f | %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %s | %s | %s | %s |\n", rs[0].label,
		thousands(m(run.rps)), thousands(m(run.ok2xx)),
		m(func(r run) float64 { return r.p50us / 1000 }), m(func(r run) float64 { return r.p99us / 1000 }),
		share(m(func(r run) float64 { return (r.non2xx + r.sockErr) / r.requests })), modes(rs), storeCell(m),
		cpu(0), cpu(1), cpu(2), cpu(3), refCells(rs, byKey, func(r run) string { return r.baseline }, "baseline", true),
		refCells(rs, byKey, func(r run) string { return r.haproxy }, "baseline", false),
		refCells(rs, byKey, func(r run) string { return r.floor }, "floor", false), rssCell(m))
}

// rssCell is the median of the gateway's peak memory over the rounds, in
// MiB; "–" when not measured.
func rssCell(m func(func(run) float64) float64) string {
	if kb := m(func(r run) float64 { return r.rssKB }); kb > 0 {
		return fmt.Sprintf("%.0f", kb/1024)
	}
	return "–"
}

// refCells are the cells of the ratios to one reference, named by ref in
// each run: req/s (with the rounds' range), 2xx/s when withOK, and p99;
// self in the reference's own row.
func refCells(rs []run, byKey map[string]run, ref func(run) string, self string, withOK bool) string {
	name := ref(rs[0])
	rpsRatio, okRatio, p99Ratio := ratios(rs, byKey, ref)
	isRef := name == rs[0].name
	cells := []string{vsRange(isRef, self, rpsRatio)}
	if withOK {
		cells = append(cells, vs(isRef, self, okRatio))
	}
	return strings.Join(append(cells, vs(isRef, self, p99Ratio)), " | ")
}

// ratios are each round's req/s, 2xx/s and p99 over its reference round's
// (ref names it); a round without its reference has none, and a reference
// that served less than one 2xx per second gives no 2xx ratio.
func ratios(rs []run, byKey map[string]run, ref func(run) string) (rps, ok, p99 []float64) {
	for _, r := range rs {
		if b, found := byKey[fmt.Sprint(ref(r), "/", r.round)]; found && ref(r) != "" {
			rps = append(rps, r.rps()/b.rps())
			p99 = append(p99, r.p99us/b.p99us)
			if b.ok2xx() >= 1 {
				ok = append(ok, r.ok2xx()/b.ok2xx())
			}
		}
	}
	return rps, ok, p99
}

// vs is the median of the ratios xs to a reference, self in the
// reference's own row, "–" when there is none.
func vs(isRef bool, self string, xs []float64) string {
	switch {
	case isRef:
		return self
	case len(xs) == 0:
		return "–"
	}
	return fmt.Sprintf("%.2f×", median(xs))
}

// vsRange is vs with the spread of the ratios over the rounds: on a shared
// machine it is often wider than a change being measured.
func vsRange(isRef bool, self string, xs []float64) string {
	v := vs(isRef, self, xs)
	if len(xs) < 2 || isRef {
		return v
	}
	lo, hi := fmt.Sprintf("%.2f", slices.Min(xs)), fmt.Sprintf("%.2f", slices.Max(xs))
	if lo == hi {
		return v
	}
	return v + " (" + lo + "–" + hi + ")"
}

// storeCell is the store calls per request and the share left unanswered,
// from the medians m; "–" when no round called the store.
func storeCell(m func(func(run) float64) float64) string {
	if m(func(r run) float64 { return r.storeCalls }) > 0 {
		return fmt.Sprintf("%.3f, %s", m(func(r run) float64 { return r.storeCalls / r.requests }),
			share(m(func(r run) float64 { return r.storeUnanswered / max(r.storeCalls, 1) })))
	}
	return "–"
}

// modes lists the adaptive modes entered in any round, with the number of
// rounds that entered each: "aggressive 2/3, critical 1/3".
func modes(rs []run) string {
	var names []string
	count := map[string]int{}
	for _, r := range rs {
		for _, m := range strings.Split(r.modes, ",") {
			if m == "" || m == "-" {
				continue
			}
			if count[m] == 0 {
				names = append(names, m)
			}
			count[m]++
		}
	}
	if len(names) == 0 {
		return "–"
	}
	out := make([]string, len(names))
	for i, m := range names {
		out[i] = fmt.Sprintf("%s %d/%d", m, count[m], len(rs))
	}
	return strings.Join(out, ", ")
}

func mapRuns(rs []run, f func(run) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// median of xs (the mean of the middle two for an even count); xs is sorted in place.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// thousands writes 27734.6 as 27.7k.
func thousands(v float64) string {
	if v < 1000 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1fk", v/1000)
}

// share writes a fraction as a percentage, 0 as 0.
func share(f float64) string {
	if f == 0 {
		return "0"
	}
	if f < 0.001 {
		return fmt.Sprintf("%.3f%%", f*100)
	}
	return fmt.Sprintf("%.1f%%", f*100)
}
