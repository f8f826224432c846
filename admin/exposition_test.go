package admin

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMetricsHelpReadsTheDocTables(t *testing.T) {
	doc := "| name | type | labels | meaning |\n| --- | --- | --- | --- |\n" +
		"| `a_total` | counter | | things `done` |\n" +
		"| `b_total`, `c_bytes` | counter | kind: `x`, `y` | two at once |\n" +
		"| `rate_limit_latency_ms metric names should not contain abbreviated units` | why | twin |\n"
	assert.Equal(t, map[string]string{"a_total": "things done", "b_total": "two at once", "c_bytes": "two at once"}, MetricsHelp(doc))
}

func TestFixLine(t *testing.T) {
	help := map[string]string{"go_cgo_calls_total": "calls from Go to C", "x_total": `a \ b`}
	for in, want := range map[string]string{
		"# HELP go_cgo_calls_count":                 "# HELP go_cgo_calls_total calls from Go to C",
		"# TYPE go_cgo_calls_count counter":         "# TYPE go_cgo_calls_total counter",
		"go_cgo_calls_count 0":                      "go_cgo_calls_total 0",
		"# TYPE process_io_read_bytes_total gauge":  "# TYPE process_io_read_bytes_total counter",
		"# HELP x_total":                            `# HELP x_total a \\ b`,
		"# HELP y_total":                            "# HELP y_total",
		"# HELP z_total kept":                       "# HELP z_total kept",
		`go_goroutines{a="go_cpu_count"} 1`:         `go_goroutines{a="go_cpu_count"} 1`,
		`go_cpu_count{a="b"} 2`:                     `go_cpus{a="b"} 2`,
		`sentinel_http_requests_total{route="a"} 3`: `sentinel_http_requests_total{route="a"} 3`,
	} {
		var out bytes.Buffer
		fixLine(&out, []byte(in), help)
		assert.Equal(t, want, out.String(), in)
	}
}
