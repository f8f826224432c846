package faults

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sentinel-gateway/sentinel/internal/spans"
)

// What the harness asserts after each schedule, on the decisions the pods
// made (their spans: from entering the limiter to its answer):
//
// I1, no window holds more than the limit + 2%: for every key (the two
// tenants, each user of the per-user policy), the approvals whose whole span
// lies in a window of chaosWindow number at most limit + 2%, at every
// window position (the windows starting at each approval's span start: the
// busiest is among them). For a token bucket of capacity C refilled at R,
// every interval T of 250 ms, 500 ms, 1, 2, 4 and 8 s holds at most
// C + R·T, + 2% (the long intervals catch a rate above R that the capacity
// hides in a short one). Counting only the spans wholly inside a window, no scheduling delay
// can make a window look fuller than it was.
//
// I2, a client under its limit whose pod's share has room is not refused:
// for the steady tenant (30-70% of its limit, round robin over the pods) and
// every new user of a key flood (one request each), a refusal decided
// within its span [a, b] breaks it when the key's approvals touching
// (a-window, b] number at most limit-1 (the client was under its limit,
// counted generously: any approval that may lie in the window before the
// decision counts, whenever in its span it was made) and the refusing pod's
// own approvals that its share may still count then number at most its
// share-1 (the limit ÷
// the schedule's pods, at least 1; the share counts a permit a little
// longer than the window, see shareCounts). Refusals where the pod's share was spent are listed apart:
// the share is what a pod may decide alone when the store fails.

// chaosKey is what a key of the schedule is held to.
type chaosKey struct {
	limit     int
	checkI2   bool
	decisions []chaosDecision
}

// chaosFindings are one schedule's figures and broken promises.
type chaosFindings struct {
	figures    []string
	violations map[string][]string // by group
}

func (f *chaosFindings) figure(format string, args ...any) {
	f.figures = append(f.figures, fmt.Sprintf(format, args...))
}

func (f *chaosFindings) violation(key, format string, args ...any) {
	if f.violations == nil {
		f.violations = map[string][]string{}
	}
	g := group(key)
	f.violations[g] = append(f.violations[g], fmt.Sprintf(format, args...))
}

// keys groups the recorded decisions by key.
func (r *chaosRun) keys() map[string]*chaosKey {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	keys := map[string]*chaosKey{}
	for _, d := range r.rec.list {
		k := keys[d.key]
		if k == nil {
			k = &chaosKey{limit: r.s.Limit, checkI2: d.key == "steady"}
			if strings.HasPrefix(d.key, "user:") {
				k.limit, k.checkI2 = userLimit, strings.HasPrefix(d.key, "user:new-")
			}
			keys[d.key] = k
		}
		k.decisions = append(k.decisions, d)
	}
	return keys
}

// group is the name a key is reported under: the tenant, or the new users
// and the heavy users together.
func group(key string) string {
	switch {
	case strings.HasPrefix(key, "user:new-"):
		return "new users"
	case strings.HasPrefix(key, "user:heavy-"):
		return "heavy users"
	}
	return key
}

// check asserts both promises on every key and logs the figures.
func (r *chaosRun) check() {
	var f chaosFindings
	keys := r.keys()
	names := slices.Sorted(maps.Keys(keys))
	worst := map[string]chaosBusiest{}
	refused := map[string][2]int{}
	for _, name := range names {
		k := keys[name]
		w := r.checkI1(&f, name, k)
		g := group(name)
		if old, ok := worst[g]; !ok || w.certain-w.bound > old.certain-old.bound {
			worst[g] = w
		}
		n, under := r.checkI2(&f, name, k)
		refused[g] = [2]int{refused[g][0] + n, refused[g][1] + under}
	}
	for _, g := range slices.Sorted(maps.Keys(worst)) {
		f.figure("%s: busiest %v %d (bound %d; %d counting every approval that touches it), %d refused, %d of them under the limit and the pod's share",
			g, worst[g].length, worst[g].certain, worst[g].bound, worst[g].touching, refused[g][0], refused[g][1])
	}
	answers := r.answersSeen()
	r.t.Logf("chaos: seed %d: events %v", r.s.Seed, r.events)
	r.t.Logf("chaos: seed %d: answers %v; %s", r.s.Seed, answers, strings.Join(f.figures, "; "))
	for _, g := range slices.Sorted(maps.Keys(f.violations)) {
		vs := f.violations[g]
		for _, v := range vs[:min(len(vs), 3)] {
			r.t.Errorf("chaos: seed %d (%v): %s", r.s.Seed, r.s.Faults, v)
		}
		if len(vs) > 3 {
			r.t.Errorf("chaos: seed %d: %s: %d more keys broke a promise", r.s.Seed, g, len(vs)-3)
		}
	}
	if n := others(answers) - answers[0]; n > 0 {
		r.t.Errorf("chaos: seed %d: %d answers other than 200, 429 and a connection error: %v", r.s.Seed, n, answers)
	}
	if answers[http.StatusOK] == 0 {
		r.t.Errorf("chaos: seed %d: no request passed", r.s.Seed)
	}
}

// chaosBusiest is the busiest interval of a length, against its bound.
type chaosBusiest struct {
	length                   time.Duration
	certain, bound, touching int
}

// checkI1 checks that no window of the key's approvals holds more than its
// bound, and returns the busiest against its bound.
func (r *chaosRun) checkI1(f *chaosFindings, name string, k *chaosKey) chaosBusiest {
	var approved []span
	for _, d := range k.decisions {
		if d.allowed {
			approved = append(approved, d.span)
		}
	}
	lengths := []time.Duration{chaosWindow}
	if r.s.Algorithm == "token_bucket" {
		lengths = []time.Duration{chaosWindow / 4, chaosWindow / 2, chaosWindow, 2 * chaosWindow, 4 * chaosWindow, 8 * chaosWindow}
	}
	var worst chaosBusiest
	for i, l := range lengths {
		limit := k.limit // a token bucket's over l: C + R·l
		if r.s.Algorithm == "token_bucket" {
			limit += int(int64(k.limit) * int64(l) / int64(chaosWindow))
		}
		bound := limit + limit*2/100
		certain, at, touching := spans.Busiest(approved, l)
		if i == 0 || certain-bound > worst.certain-worst.bound {
			worst = chaosBusiest{l, certain, bound, touching}
		}
		if certain > bound {
			f.violation(name, "I1: %s: %d approvals in the %v from %v (bound %d)%s",
				name, certain, l, at.Sub(r.start).Round(time.Millisecond), bound, r.listed(k, at, l))
		}
	}
	return worst
}

// listed is, for a window of few approvals, when each was decided (its
// span, since the load began) and by which pod.
func (r *chaosRun) listed(k *chaosKey, at time.Time, l time.Duration) string {
	var out []string
	for _, d := range k.decisions {
		if d.allowed && !d.span.From.Before(at) && d.span.To.Before(at.Add(l)) {
			out = append(out, fmt.Sprintf("%v+%v@%d", d.span.From.Sub(r.start).Round(time.Millisecond),
				d.span.To.Sub(d.span.From).Round(100*time.Microsecond), d.pod))
		}
	}
	if len(out) > 16 {
		return ""
	}
	return ": " + strings.Join(out, " ")
}

// checkI2 checks the key's refusals against its approvals around them, and
// returns how many refusals there were and how many broke I2 (reported as
// one violation per key: how many, when, by which pods, the first's counts).
func (r *chaosRun) checkI2(f *chaosFindings, name string, k *chaosKey) (refused, under int) {
	share := max(1, k.limit/r.s.Pods)
	var first string
	var last time.Duration
	pods := map[int]bool{}
	for _, d := range k.decisions {
		if d.allowed {
			continue
		}
		refused++
		if !k.checkI2 {
			continue
		}
		all, own := approvedAround(k.decisions, d)
		if all+1 > k.limit || own+1 > share {
			continue
		}
		under++
		pods[d.pod] = true
		last = d.span.To.Sub(r.start).Round(time.Millisecond)
		if first == "" {
			first = fmt.Sprintf("the first by pod %d at %v with %d approvals in the window before (limit %d), %d by that pod (share %d)",
				d.pod, last, all, k.limit, own, share)
		}
	}
	if under > 0 {
		f.violation(name, "I2: %s: %d refusals under the limit and the pod's share, until %v, by pods %v; %s",
			name, under, last, slices.Sorted(maps.Keys(pods)), first)
	}
	return refused, under
}

// shareCounts is how much longer than the window a pod's share counts a
// permit it decided (docs/leases.md): from the decision plus the store's
// deadline (limits.store_timeout, 50 ms: the time a decided request may take
// to reach the backend), rounded up to the end of a sub-window of a 40th of
// the window.
const shareCounts = 50*time.Millisecond + chaosWindow/40

// approvedAround counts the approvals that may touch the window before the
// refusal d was decided, of every pod, and those of d's pod that its share
// may still count then (shareCounts): d was decided at some moment of its
// span, which on a busy machine can be long.
func approvedAround(decisions []chaosDecision, d chaosDecision) (all, own int) {
	from, to := d.span.From.Add(-chaosWindow), d.span.To
	for _, a := range decisions {
		if !a.allowed || a.span.From.After(to) {
			continue
		}
		if !a.span.To.Before(from) {
			all++
		}
		if a.pod == d.pod && !a.span.To.Before(from.Add(-shareCounts)) {
			own++
		}
	}
	return all, own
}
