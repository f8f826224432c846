package faults

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The randomized fault harness: schedules of faults drawn at random from a
// seed, each run on 3 to 6 real gateways in this process in front of a real
// redis-server (every pod reaches it through a link of its own that the
// schedule can cut or slow) or a Redis Cluster of 3 masters with a replica
// each (for a failover), under load at several fractions of the limit,
// for one algorithm drawn per schedule. After each schedule both promises are
// checked on every window of every key from the gateways' decision spans
// (chaos_check_test.go): no window holds more than the limit + 2% (I1), and
// a client under its limit whose pod's share has room is not refused (I2).
//
// SEED=n replays the schedule of seed n (and, with SCHEDULES=k, the k
// schedules from it); SCHEDULES=k runs k schedules; CHAOS_FAULTS=all (or a
// comma-separated list of kinds) draws from more faults than chaosCovered,
// which CI draws from. `make test-chaos SCHEDULES=N` runs N schedules of
// every kind.

// chaosKinds are the faults a schedule draws from.
var chaosKinds = []string{"pause", "slow", "partition", "flush", "restart", "reload", "keyflood", "failover"}

// chaosClusterKinds are the faults a schedule on the replicated cluster
// draws besides its failover (the others act on the one redis-server or on
// the pods' links to it).
var chaosClusterKinds = []string{"restart", "reload", "keyflood"}

// chaosCovered are the kinds CI draws from: those the gateway is known to
// hold both promises under; docs/reliability.md lists what the others still
// break. A kind joins once its schedules pass.
var chaosCovered = []string{"pause", "slow", "restart", "reload", "keyflood"}

// chaosCISchedules is how many schedules a run without SCHEDULES draws
// (about 12 s each: the fault suite stays under 8 minutes).
const chaosCISchedules = 3

// chaosAlgorithms are the algorithms a schedule's limits use.
var chaosAlgorithms = []string{"sliding_window", "sliding_log", "token_bucket"}

// chaosWindow is every limit's window (a token bucket's capacity over its
// refill rate).
const chaosWindow = time.Second

// userLimit is the per-user policy's limit per chaosWindow: at least the
// most pods a schedule runs, since a pod's share of a limit is at least 1
// (a limit under the pods may see one permit per pod in a window while the
// store fails, as documented, which is not what the harness looks for).
const userLimit = 12

// chaosFault is one fault of a schedule: its kind, when it starts after the
// load began and how long it lasts, the pod it hits (partition, restart)
// and the delay of each read on the links (slow).
type chaosFault struct {
	Kind    string
	At, For time.Duration
	Pod     int
	Delay   time.Duration
}

func (f chaosFault) String() string {
	s := fmt.Sprintf("%s at %v", f.Kind, f.At)
	switch f.Kind {
	case "partition", "restart":
		s += fmt.Sprintf(" of pod %d", f.Pod)
	case "failover":
		s += " of the master of " + []string{"steady", "flood"}[f.Pod%2]
	case "slow":
		s += fmt.Sprintf(" by %v a read", f.Delay)
	}
	if f.For > 0 {
		s += fmt.Sprintf(" for %v", f.For)
	}
	return s
}

// chaosSchedule is one randomized run: its pods, algorithm, limit (per
// chaosWindow; a token bucket's capacity, refilled in one window), the
// steady tenant's load in percent of it, and its faults.
type chaosSchedule struct {
	Seed      uint64
	Pods      int
	Algorithm string
	Limit     int
	Steady    int
	Faults    []chaosFault
	Length    time.Duration
	Cluster   bool // on the replicated cluster, without links
}

func (s chaosSchedule) String() string {
	store := "one redis-server"
	if s.Cluster {
		store = "a cluster of 3 masters and 3 replicas"
	}
	return fmt.Sprintf("seed %d: %d pods on %s, %s, limit %d per %v, steady at %d%%, flood at 300%%, faults %v, %v of load",
		s.Seed, s.Pods, store, s.Algorithm, s.Limit, chaosWindow, s.Steady, s.Faults, s.Length)
}

// drawSchedule draws the schedule of seed from kinds: 3 to 6 pods, one
// algorithm, a limit of 50 or 100, a steady tenant at 30 to 70% of it,
// and one or two faults of different kinds (which may overlap: a reload
// in an outage), with 2.5 s of load after the last one ends. A schedule
// with a failover runs on the replicated cluster (a quarter of those drawn
// from kinds with failover), its other fault drawn from chaosClusterKinds.
func drawSchedule(seed uint64, kinds []string) chaosSchedule {
	r := rand.New(rand.NewPCG(seed, 0x5e171ae1))
	s := chaosSchedule{
		Seed: seed, Pods: 3 + r.IntN(4), Algorithm: chaosAlgorithms[r.IntN(len(chaosAlgorithms))],
		Limit: 50 * (1 + r.IntN(2)), Steady: 30 + r.IntN(41),
	}
	if slices.Contains(kinds, "failover") && (len(kinds) == 1 || r.IntN(4) == 0) {
		s.Cluster = true
		kinds = slices.DeleteFunc(slices.Clone(chaosClusterKinds), func(k string) bool { return !slices.Contains(kinds, k) })
		s.Faults = []chaosFault{{Kind: "failover", At: 2*time.Second + time.Duration(r.IntN(2000))*time.Millisecond, For: 4 * time.Second, Pod: r.IntN(2)}}
	} else {
		kinds = slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return k == "failover" })
	}
	end := time.Duration(0)
	for _, f := range s.Faults {
		end = max(end, f.At+f.For)
	}
	for range min(1+r.IntN(2)-len(s.Faults), len(kinds)) {
		f := drawFault(r, kinds, s.Pods)
		for slices.ContainsFunc(s.Faults, func(g chaosFault) bool { return g.Kind == f.Kind }) {
			f = drawFault(r, kinds, s.Pods) // two of a kind would undo each other
		}
		s.Faults = append(s.Faults, f)
		end = max(end, f.At+f.For)
	}
	slices.SortFunc(s.Faults, func(a, b chaosFault) int { return int(a.At - b.At) })
	s.Length = end + 2500*time.Millisecond
	return s
}

func drawFault(r *rand.Rand, kinds []string, pods int) chaosFault {
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+r.IntN(hi-lo+1)) * time.Millisecond }
	f := chaosFault{Kind: kinds[r.IntN(len(kinds))], At: ms(1500, 5000), Pod: r.IntN(pods)}
	switch f.Kind {
	case "pause":
		f.For = ms(2000, 6000)
	case "slow":
		f.For, f.Delay = ms(1000, 4000), []time.Duration{5, 30, 80, 200}[r.IntN(4)]*time.Millisecond
	case "partition":
		f.For = ms(3000, 8000)
	case "keyflood":
		f.For = ms(2000, 4000)
	case "restart":
		f.For = ms(3000, 5000) // the drain (up to 5 s) and the new pod's first seconds
	}
	return f
}

// chaosSeeds are the seeds of this run's schedules and the kinds they draw
// from, from SEED, SCHEDULES and CHAOS_FAULTS.
func chaosSeeds(t *testing.T) ([]uint64, []string) {
	t.Helper()
	base := uint64(time.Now().UnixNano()) % 1_000_000_000
	n := chaosCISchedules
	if v := os.Getenv("SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SEED=%q: not a number", v)
		}
		base, n = s, 1
	}
	if v := os.Getenv("SCHEDULES"); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 1 {
			t.Fatalf("SCHEDULES=%q: not a positive number", v)
		}
		n = k
	}
	kinds := chaosCovered
	switch v := os.Getenv("CHAOS_FAULTS"); v {
	case "":
	case "all":
		kinds = chaosKinds
	default:
		kinds = strings.Split(v, ",")
		for _, k := range kinds {
			if !slices.Contains(chaosKinds, k) {
				t.Fatalf("CHAOS_FAULTS: %q is none of %v", k, chaosKinds)
			}
		}
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = base + uint64(i)
	}
	return seeds, kinds
}

// TestFaultRandomSchedules runs randomized fault schedules and checks both
// promises on every window of every key after each one. The seed is printed
// first; a failing schedule replays with SEED=n (and the CHAOS_FAULTS it
// printed).
func TestFaultRandomSchedules(t *testing.T) {
	seeds, kinds := chaosSeeds(t)
	t.Logf("chaos: seed %d, %d schedules, faults drawn from %v (replay one: SEED=n CHAOS_FAULTS=%s make test-chaos)",
		seeds[0], len(seeds), kinds, strings.Join(kinds, ","))
	var failed []uint64
	for _, seed := range seeds {
		s := drawSchedule(seed, kinds)
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("chaos: %v", s)
			runSchedule(t, s)
		})
		if !ok {
			failed = append(failed, seed)
		}
	}
	if len(failed) > 0 {
		t.Logf("chaos: %d of %d schedules broke a promise; seeds %v", len(failed), len(seeds), failed)
	}
}
