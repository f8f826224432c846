package model

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The checks need spin and a C compiler (pan, the verifier spin writes, is
// C). CI installs both (.ci/run); a machine without them fails here, with
// what to install, rather than skipping a check of the protocol.
func tools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"spin", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the model check needs %s on PATH (Debian: apt-get install %s): %v", tool, tool, err)
		}
	}
}

// exhaustive is pan's search of every state: its depth bound is beyond
// any path of the model's.
const exhaustive = 1000000

// verify generates and compiles pan for lease.pml with the given macros
// (-DNAME) in a folder of its own, runs the search to the depth given and
// returns pan's output and that folder (for the trail).
func verify(t *testing.T, depth int, macros ...string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	src, err := os.ReadFile("lease.pml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lease.pml"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "spin", append(append([]string{"-a"}, macros...), "lease.pml")...)
	// SAFETY: assertions only (no cycles to look for); MEMLIM bounds
	// pan's memory on a shared machine (the check needs about 100 MB);
	// -O1: the compile takes longer than the search at -O2.
	cc := []string{"-w", "-O1", "-DSAFETY", "-DMEMLIM=1024", "-o", "pan", "pan.c"}
	run(t, dir, "gcc", append(macros, cc...)...)
	start := time.Now()
	out := run(t, dir, "./pan", "-m"+strconv.Itoa(depth))
	t.Logf("pan %s ran %s: %s", strings.Join(append([]string{"lease.pml"}, macros...), " "), time.Since(start).Round(time.Millisecond), summary(out))
	return out, dir
}

// run runs name in dir and returns its output; a failure to run it (not
// an error the checker reports) fails the test.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil && name != "./pan" {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

var (
	errorsRe = regexp.MustCompile(`errors: (\d+)`)
	statesRe = regexp.MustCompile(`(\d+) states, stored`)
)

// summary is pan's count of errors and of states.
func summary(out string) string {
	e, s := errorsRe.FindStringSubmatch(out), statesRe.FindStringSubmatch(out)
	if e == nil || s == nil {
		return "no result"
	}
	return "errors " + e[1] + ", states " + s[1]
}

// trail replays the counterexample pan found (spin -t) and keeps the
// model's own lines: the steps, then the assertion that failed.
func trail(t *testing.T, dir string, macros ...string) string {
	t.Helper()
	out := run(t, dir, "spin", append(append([]string{"-t"}, macros...), "lease.pml")...)
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		s := strings.TrimSpace(line)
		switch {
		case s == "", strings.HasPrefix(line, "\t\t"), procLine.MatchString(s),
			strings.Contains(s, "processes created"), strings.HasPrefix(s, "#processes"),
			strings.HasPrefix(s, "spin: trail"), strings.Contains(s, "Error: value"),
			strings.HasPrefix(s, "spin: warning"): // e.g. a file's time against the trail's, the machine's
			continue
		}
		b.WriteString(lineRef.ReplaceAllString(s, "") + "\n")
	}
	return b.String()
}

var (
	procLine = regexp.MustCompile(`^\d+:\s+proc`)
	lineRef  = regexp.MustCompile(`lease\.pml:\d+, `) // the model's line numbers change with it
)

var update = flag.Bool("update", false, "rewrite testdata/*.trail with the counterexamples found")

// gatewayHolds are the macros under which the gateway's hold (see
// lease.pml's header) keeps both invariants: a pod with no answer for the
// key grants nothing alone, the key is contested on every pod, a pod back
// reports before its heartbeat goes out, and the store keeps its data.
var gatewayHolds = []string{"-DGATEWAY_HOLD", "-DANSWERED_ONLY", "-DCONTESTED", "-DREPORT_FIRST", "-DNO_FLUSH"}

// TestLeaseProtocolHolds checks the protocol as modelled against both
// invariants, exhaustively (about 300,000 states, a few seconds), without
// and with the permits the store keeps for each pod's first uses
// (limits.first_uses); and the gateway's hold where it promises the limit
// (about 3,800,000 states, 10 s).
func TestLeaseProtocolHolds(t *testing.T) {
	tools(t)
	for _, c := range []struct {
		name   string
		macros []string
	}{{"plain", nil}, {"first_uses", []string{"-DFIRST_USES"}}, {"gateway_hold", gatewayHolds}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			out, dir := verify(t, exhaustive, c.macros...)
			if !strings.Contains(out, "errors: 0") {
				t.Fatalf("the model breaks an invariant (or pan did not finish):\n%s\ncounterexample:\n%s", out, trail(t, dir, c.macros...))
			}
			if strings.Contains(out, "max search depth too small") {
				t.Fatalf("pan's search was cut at its depth bound, so it was not exhaustive:\n%s", out)
			}
		})
	}
}

// wrong are known-wrong variants of the protocol: each must break the
// invariant named (I1 is the window's uses, I2 the refusal's room), with
// the shortest counterexample kept in testdata/NAME.trail; with are the
// macros the variant needs beside its own, space-separated.
var wrong = []struct{ name, invariant, with string }{
	{"WHOLE_SHARE", "use[0]+use[1]", ""},             // the fallback share is the whole limit
	{"REPORT_NOW", "total+1", ""},                    // reports dated when sent
	{"NO_RESERVE", "use[0]+use[1]", ""},              // no share kept for a pod deciding alone
	{"HELD_WHEN_CUT", "use[0]+use[1]", ""},           // the share kept only once its pod is cut off
	{"NO_NOTICE", "use[0]+use[1]", ""},               // an emptied store taken at face value
	{"NOTICE_OWN", "use[0]+use[1]", ""},              // only pods with permits counting notice
	{"RELOAD_RESET", "use[0]+use[1]", ""},            // a reload starts empty
	{"FU_UNRESERVED", "use[0]+use[1]", "FIRST_USES"}, // the store grants the whole limit beside the first uses
	{"FU_FORGET", "use[0]+use[1]", "FIRST_USES"},     // a reload forgets the pod's first uses
	{"GATEWAY_HOLD", "use[0]+use[1]", ""},            // the gateway's hold: a pod with no answer grants its share
	// The other choice for that pod: it refuses, held to I2. With
	// GATEWAY_HOLD, each choice breaks one invariant.
	{"UNANSWERED_I2", "total+1", "GATEWAY_HOLD ANSWERED_ONLY"},
}

// TestWrongVariantsBreakTheInvariants shows that the check can fail: each
// known-wrong variant yields a counterexample, the shortest one (pan
// -DBFS), which is the one in testdata (go test -update rewrites them).
func TestWrongVariantsBreakTheInvariants(t *testing.T) {
	tools(t)
	for _, v := range wrong {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			macros := []string{"-DBFS", "-D" + v.name}
			for _, m := range strings.Fields(v.with) {
				macros = append(macros, "-D"+m)
			}
			breaks(t, v.name, v.invariant, exhaustive, macros)
		})
	}
}

// gatewayGaps are the gateway's hold with one of gatewayHolds' macros
// left out, or one added, each breaking I1: where the gateway's hold lets
// a window go over the limit, and two of its rules (the wait of a window
// after the notice, the blind pod's hold) each shown needed. Their states
// are too many for pan -DBFS: each is searched depth-first to depth, with
// -DREACH (a state reached again by a shorter path is searched again), so
// that pan finds a counterexample whenever one that short exists; and
// none exists one step shorter: the one kept is a shortest too.
var gatewayGaps = []struct {
	name   string
	depth  int
	macros []string
}{
	// The store loses its data after a pod took the whole limit.
	{"GATEWAY_FLUSH", 62, []string{"-DGATEWAY_HOLD", "-DANSWERED_ONLY"}},
	// A key not contested on the pod, whose clients then ask more.
	{"GATEWAY_UNCONTESTED", 98, without(gatewayHolds, "-DCONTESTED")},
	// A pod back whose heartbeat goes out before its report.
	{"GATEWAY_BACK", 97, without(gatewayHolds, "-DREPORT_FIRST")},
	// The others notice 2 ticks after a pod's last heartbeat: one of them,
	// its own heartbeats failing at that moment, comes back and calls
	// before it reads them again. (Reloads and the blind net state, which
	// it does not need, would take 20 s more.)
	{"GATEWAY_STALE", 112, plus(gatewayHolds, "-DNOTICE=2", "-DNO_RELOAD", "-DNO_BLIND")},
	// The share taken back as soon as the others may hold it.
	{"GATEWAY_AT_NOTICE", 74, plus(gatewayHolds, "-DAT_NOTICE")},
	// No blind rule.
	{"GATEWAY_UNBLIND", 95, plus(gatewayHolds, "-DUNBLIND")},
}

// plus is macros and more, in a slice of its own.
func plus(macros []string, more ...string) []string {
	return append(append([]string(nil), macros...), more...)
}

// without is macros less one.
func without(macros []string, drop string) []string {
	var out []string
	for _, m := range macros {
		if m != drop {
			out = append(out, m)
		}
	}
	return out
}

// TestGatewayHoldGaps shows where the gateway's hold lets a window hold
// more than the limit, with the counterexamples in testdata (go test
// -update rewrites them).
func TestGatewayHoldGaps(t *testing.T) {
	tools(t)
	for _, g := range gatewayGaps {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			breaks(t, g.name, "use[0]+use[1]", g.depth, append([]string{"-DREACH"}, g.macros...))
		})
	}
}

// breaks checks that lease.pml with the given macros, searched to depth,
// breaks invariant, with the counterexample kept in testdata/name.trail.
func breaks(t *testing.T, name, invariant string, depth int, macros []string) {
	t.Helper()
	out, dir := verify(t, depth, macros...)
	if strings.Contains(out, "errors: 0") {
		t.Fatalf("%s yields no counterexample:\n%s", strings.Join(macros, " "), out)
	}
	got := trail(t, dir, macros...)
	if !strings.Contains(strings.ReplaceAll(got, "(", ""), invariant) {
		t.Fatalf("%s breaks another assertion than %s:\n%s", strings.Join(macros, " "), invariant, got)
	}
	t.Logf("counterexample:\n%s", got)
	file := filepath.Join("testdata", name+".trail")
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Fatalf("%s: the counterexample changed (go test -update to keep it):\n%s", name, got)
	}
}
