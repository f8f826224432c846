package alerts

import (
	"os"
	"os/exec"
	"testing"
)

// promtool finds promtool on PATH or at /usr/bin/promtool (Debian's
// prometheus package). The rules are part of the product, so a missing
// promtool fails the test instead of skipping it.
func promtool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/promtool"); err == nil {
		return "/usr/bin/promtool"
	}
	t.Fatal("promtool not found on PATH or at /usr/bin/promtool: install it with `apt-get install prometheus` (.ci/run does)")
	return ""
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
	t.Logf("promtool %v:\n%s", args, out)
}

func TestRulesCheck(t *testing.T) {
	runPromtool(t, "check", "rules", "rate_limiter_alerts.yml")
}

func TestRulesUnit(t *testing.T) {
	runPromtool(t, "test", "rules", "rate_limiter_alerts_test.yml")
}
