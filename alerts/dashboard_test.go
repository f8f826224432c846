package alerts

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDashboardQueries checks that every PromQL query of docs/dashboard.json
// parses: it writes them, with Grafana's variables filled in, as recording
// rules and runs `promtool check rules` on them.
func TestDashboardQueries(t *testing.T) {
	raw, err := os.ReadFile("../docs/dashboard.json")
	if err != nil {
		t.Fatalf("cannot read the dashboard: %v", err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("docs/dashboard.json is not valid JSON: %v", err)
	}
	vars := strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*", "$tenant", ".*")
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			n++
			expr, _ := json.Marshal(vars.Replace(tg.Expr)) // a JSON string is a YAML string
			fmt.Fprintf(&b, "      - record: dashboard:query_%d\n        expr: %s\n", n, expr)
		}
	}
	if n < 15 {
		t.Fatalf("the dashboard has %d queries; want at least 15", n)
	}
	path := filepath.Join(t.TempDir(), "dashboard_rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, "check", "rules", path)
}
