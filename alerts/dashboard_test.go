package alerts

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
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
	checkLegends(t, raw)
	path := filepath.Join(t.TempDir(), "dashboard_rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, "check", "rules", path)
}

var (
	legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	byClause    = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
	metricName  = regexp.MustCompile(`\b((?:sentinel|rate_limit)_[a-z0-9_]+?)(?:_bucket)?\b[{\[]`)
)

// checkLegends fails for a legend that names a label its query does not
// keep: every {{label}} must be in a by (...) clause of the query, or the
// legend shows the same empty text for every series.
func checkLegends(t *testing.T, raw []byte) {
	t.Helper()
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	docs := docLabels(t)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			checkTargetLabels(t, p.Title, tg.Expr, docs)
			kept := map[string]bool{}
			for _, m := range byClause.FindAllStringSubmatch(tg.Expr, -1) {
				for _, l := range strings.Split(m[1], ",") {
					kept[strings.TrimSpace(l)] = true
				}
			}
			for _, m := range legendLabel.FindAllStringSubmatch(tg.LegendFormat, -1) {
				if !kept[m[1]] {
					t.Errorf("panel %q: legend %q names %s, which %q does not keep", p.Title, tg.LegendFormat, m[1], tg.Expr)
				}
			}
		}
	}
}

// docLabels reads docs/metrics.md's tables: metric name → its labels.
func docLabels(t *testing.T) map[string][]string {
	t.Helper()
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatalf("docs/metrics.md: %v", err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		var labels []string
		for _, l := range strings.Split(cells[3], ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(l), ":")
			if name = strings.TrimSpace(name); name != "" {
				labels = append(labels, name)
			}
		}
		for _, n := range strings.Split(cells[1], ",") {
			out[strings.Trim(strings.TrimSpace(n), "`")] = labels
		}
	}
	return out
}

// checkTargetLabels fails for a query on a metric docs/metrics.md does not
// describe, and for a by (...) label that none of its metrics has.
func checkTargetLabels(t *testing.T, title, expr string, docs map[string][]string) {
	t.Helper()
	has := map[string]bool{"instance": true, "job": true, "le": true}
	for _, m := range metricName.FindAllStringSubmatch(expr, -1) {
		labels, ok := docs[m[1]]
		if !ok {
			t.Errorf("panel %q queries %s, which docs/metrics.md does not describe", title, m[1])
		}
		for _, l := range labels {
			has[l] = true
		}
	}
	for _, m := range byClause.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); !has[l] {
				t.Errorf("panel %q groups by %s, a label its metrics do not have: %s", title, l, expr)
			}
		}
	}
}
