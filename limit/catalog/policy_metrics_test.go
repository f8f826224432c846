package catalog

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// policySeries lists the decision series on /metrics as policy/limit
// pairs, each once.
func policySeries() map[string]bool {
	var b strings.Builder
	metrics.WritePrometheus(&b, false)
	out := map[string]bool{}
	re := regexp.MustCompile(`(?m)^sentinel_limit_policy_decisions_total\{policy="([^"]*)",limit="([^"]*)",decision="allowed"\}`)
	for _, m := range re.FindAllStringSubmatch(b.String(), -1) {
		out[m[1]+"/"+m[2]] = true
	}
	return out
}

func compileTest(t *testing.T, policies ...Policy) *PolicySet {
	t.Helper()
	ps, err := CompilePolicies(policies, testDefaults)
	require.NoError(t, err)
	return ps
}

func perIP(name string, limits ...PolicyLimit) Policy {
	if len(limits) == 0 {
		limits = []PolicyLimit{{Limit: 5}}
	}
	return Policy{Name: name, Key: []string{"ip"}, Limits: limits}
}

// TestRemovedPolicySeriesGo: the series of a policy removed from the set
// that applies go, and so do those of a limit removed from a policy that
// stays; a series that stays keeps its counter and its count, even while
// a replacement set that has it is compiled; a set compiled and never
// stored gives its series up on Release.
func TestRemovedPolicySeriesGo(t *testing.T) {
	second, day := PolicyLimit{Limit: 5, Window: confutil.Duration(time.Second)}, PolicyLimit{Limit: 50, Period: store.Day}
	l := NewLivePolicies()
	a := compileTest(t, perIP("m-keep", second, day), perIP("m-gone"))
	l.Store(a)
	keep, _ := a.Lookup("m-keep")
	keep.Counters[0].Count(true, false)
	assert.Subset(t, keys(policySeries()), []string{"m-keep/1s", "m-keep/day", "m-gone/1s"})

	b := compileTest(t, perIP("m-keep", second))
	l.Store(b)
	got := policySeries()
	assert.True(t, got["m-keep/1s"])
	assert.False(t, got["m-keep/day"], "a limit the policy no longer has")
	assert.False(t, got["m-gone/1s"], "a policy removed")
	kept, _ := b.Lookup("m-keep")
	assert.Same(t, keep.Counters[0].Allowed, kept.Counters[0].Allowed, "one counter across sets")
	assert.Equal(t, uint64(1), kept.Counters[0].Allowed.Get())

	unused := compileTest(t, perIP("m-keep", second), perIP("m-never"))
	assert.True(t, policySeries()["m-never/1s"])
	unused.Release()
	unused.Release()
	got = policySeries()
	assert.False(t, got["m-never/1s"], "a set never stored, released")
	assert.True(t, got["m-keep/1s"], "the set that applies still holds it")

	l.Store(nil)
	assert.False(t, policySeries()["m-keep/1s"], "no policies: no series")
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestPolicyLabelsStable: past maxPolicyLabels names with a label of
// their own, new names count as "other"; a name keeps its label value
// whatever its position and whatever the other policies do, and a label
// freed by a removed policy goes to the next new name.
func TestPolicyLabelsStable(t *testing.T) {
	registry.mu.Lock()
	free := maxPolicyLabels - registry.own // other tests' sets may hold names
	registry.mu.Unlock()
	var names []Policy
	for i := range free {
		names = append(names, perIP(fmt.Sprintf("s-%03d", i)))
	}
	l := NewLivePolicies()
	t.Cleanup(func() { l.Store(nil) })
	l.Store(compileTest(t, append(names[:len(names):len(names)], perIP("s-late"))...))
	got := policySeries()
	assert.True(t, got["s-000/1s"])
	assert.True(t, got[fmt.Sprintf("s-%03d/1s", free-1)])
	assert.False(t, got["s-late/1s"])
	assert.True(t, got["other/1s"], "the name past the cap")

	// An API change: s-000 goes, a new policy comes first. The new name
	// finds every label held (s-000 is still held while its replacement
	// compiles) and s-late stays in other although it now has a lower
	// position than the cap.
	next := append([]Policy{perIP("s-new")}, names[1:]...)
	l.Store(compileTest(t, append(next, perIP("s-late"))...))
	got = policySeries()
	assert.False(t, got["s-000/1s"], "removed")
	assert.True(t, got["s-001/1s"], "kept at another position")
	assert.False(t, got["s-new/1s"])
	assert.False(t, got["s-late/1s"], "a name in other stays there while it exists")

	// The label s-000 held is free: the next new name gets it.
	l.Store(compileTest(t, append(next, perIP("s-late"), perIP("s-newer"))...))
	got = policySeries()
	assert.True(t, got["s-newer/1s"])
	assert.False(t, got["s-late/1s"])
	assert.True(t, got["other/1s"])
	l.Store(nil)
	assert.False(t, policySeries()["other/1s"], "no policy in other: its series go too")
}
