package alerts

import (
	"os"
	"os/exec"
	"path/filepath"
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

// TestRulesCheck runs the natural command, `promtool check rules
// alerts/*.yml`: every YAML file of this folder is a rule file (the unit
// tests live in tests/, out of the glob).
func TestRulesCheck(t *testing.T) {
	files, err := filepath.Glob("*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files: %v", err)
	}
	runPromtool(t, append([]string{"check", "rules"}, files...)...)
}

func TestRulesUnit(t *testing.T) {
	runPromtool(t, "test", "rules", "tests/rate_limiter_alerts_test.yml")
}
