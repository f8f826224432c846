package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const header = "round\tname\tlabel\tbaseline\trequests\tduration_us\tp50_us\tp99_us\tnon2xx\tsockerr\tgateway_ms\tbackend_ms\tredis_ms\twrk_ms\tmodes\n"

func TestTableRatiosAreTakenPerRound(t *testing.T) {
	// Round 1 is slow for both, round 3 fast for both: the ratio per round is
	// 0.5, 0.5 and 0.5, while the ratio of the medians would be 20/50 = 0.4.
	in := header +
		"1\tnginx\tnginx, proxy\tnginx\t100\t1000000\t100\t1000\t0\t0\t50\t10\t0\t20\t-\n" +
		"1\tgw\tgateway\tnginx\t50\t1000000\t200\t2000\t5\t0\t50\t10\t0\t20\tmoderate,critical\n" +
		"2\tnginx\tnginx, proxy\tnginx\t50\t1000000\t100\t1000\t0\t0\t50\t10\t0\t20\t-\n" +
		"2\tgw\tgateway\tnginx\t25\t1000000\t200\t3000\t0\t0\t50\t10\t0\t20\t-\n" +
		"3\tnginx\tnginx, proxy\tnginx\t40\t1000000\t100\t1000\t0\t0\t50\t10\t0\t20\t-\n" +
		"3\tgw\tgateway\tnginx\t20\t1000000\t200\t4000\t0\t0\t50\t10\t0\t20\tcritical\n"
	out := render(t, in)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4)
	assert.Equal(t, "| nginx, proxy | 50 | 50 | 0.10 | 1.00 | 0 | – | – | 1000.0 | 200.0 | 0.0 | 400.0 | baseline | baseline | baseline | – | – | – | – | – |", lines[2])
	// gateway: median req/s 25, 2xx/s 45, 25, 20: 25; 2xx ratios 0.45, 0.5,
	// 0.5; p99 3 ms; status >= 400 in 5 of 50 in round 1 (10%), 0 in the
	// others: median 0; CPU 50 ms over 25 requests = 2000 µs.
	assert.Equal(t, "| gateway | 25 | 25 | 0.20 | 3.00 | 0 | moderate 1/3, critical 2/3 | – | 2000.0 | 400.0 | 0.0 | 800.0 | 0.50× | 0.50× | 3.00× | – | – | – | – | – |", lines[3])
}

// The req/s ratio shows the rounds' range when they differ.
func TestTableShowsTheRatiosRange(t *testing.T) {
	in := header +
		"1\tnginx\tnginx\tnginx\t100\t1000000\t100\t1000\t0\t0\t50\t10\t0\t20\t-\n" +
		"1\tgw\tgateway\tnginx\t40\t1000000\t200\t2000\t0\t0\t50\t10\t0\t20\t-\n" +
		"2\tnginx\tnginx\tnginx\t100\t1000000\t100\t1000\t0\t0\t50\t10\t0\t20\t-\n" +
		"2\tgw\tgateway\tnginx\t60\t1000000\t200\t2000\t0\t0\t50\t10\t0\t20\t-\n" +
		"3\tnginx\tnginx\tnginx\t100\t1000000\t100\t1000\t0\t0\t50\t10\t0\t20\t-\n" +
		"3\tgw\tgateway\tnginx\t50\t1000000\t200\t2000\t0\t0\t50\t10\t0\t20\t-\n"
	out := render(t, in)
	assert.Contains(t, out, "| 0.50× (0.40–0.60) | 0.50× | 2.00× |")
	assert.Contains(t, out, "| baseline | baseline | baseline |")
}

func TestTableWithoutBaselineRun(t *testing.T) {
	out := render(t, header+"1\tgw\tgateway\tnginx\t5000\t2000000\t200\t2000\t1\t0\t50\t10\t0\t20\t-\n")
	assert.Contains(t, out, "| gateway | 2.5k | 2.5k | 0.20 | 2.00 | 0.020% | – | – |")
	assert.Contains(t, out, "| – | – | – |")
}

// The optional store columns: calls per request and the share unanswered,
// medians over the rounds.
func TestTableStoreCalls(t *testing.T) {
	h := strings.TrimSuffix(header, "\n") + "\tstore_calls\tstore_unanswered\n"
	in := h +
		"1\tgw\tgateway\tgw\t1000\t1000000\t200\t2000\t0\t0\t50\t10\t0\t20\t-\t500\t250\n" +
		"2\tgw\tgateway\tgw\t1000\t1000000\t200\t2000\t0\t0\t50\t10\t0\t20\t-\t100\t0\n" +
		"3\tgw\tgateway\tgw\t1000\t1000000\t200\t2000\t0\t0\t50\t10\t0\t20\t-\t200\t20\n" +
		"1\tnginx\tnginx\tgw\t1000\t1000000\t200\t2000\t0\t0\t50\t10\t0\t20\t-\t0\t0\n"
	out := render(t, in)
	assert.Contains(t, out, "| gateway | 1.0k | 1.0k | 0.20 | 2.00 | 0 | – | 0.200, 10.0% |")
	assert.Contains(t, out, "| nginx | 1.0k | 1.0k | 0.20 | 2.00 | 0 | – | – |")
	_, err := parse(strings.NewReader(h + "1\tgw\tgw\tx\t1\t1\t1\t1\t0\t0\t1\t1\t1\t1\t-\tsome\t0\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 2: store_calls")
}

// The optional floor and haproxy columns name two more references of a row,
// each ratio taken within its round; "-" is none.
func TestTableFloorAndHAProxy(t *testing.T) {
	h := strings.Replace(header, "baseline\t", "baseline\tfloor\thaproxy\t", 1)
	row := func(round, name, floor, hap string, requests, p99 int) string {
		return fmt.Sprintf("%s\t%s\t%s\tnginx\t%s\t%s\t%d\t1000000\t100\t%d\t0\t0\t50\t10\t0\t20\t-\n", round, name, name, floor, hap, requests, p99)
	}
	in := h +
		row("1", "nginx", "bare", "haproxy", 100, 1000) + row("1", "haproxy", "bare", "haproxy", 80, 2000) +
		row("1", "bare", "bare", "haproxy", 50, 1000) + row("1", "gw", "bare", "haproxy", 40, 4000) +
		row("2", "nginx", "bare", "haproxy", 100, 1000) + row("2", "haproxy", "bare", "haproxy", 100, 2000) +
		row("2", "bare", "bare", "haproxy", 40, 1000) + row("2", "gw", "bare", "haproxy", 40, 4000) +
		row("1", "c1", "-", "-", 10, 1000)
	out := render(t, in)
	assert.Contains(t, out, "| vs nginx: req/s (rounds' range) | 2xx/s | p99 | vs HAProxy: req/s | p99 | vs floor: req/s | p99 |")
	assert.Contains(t, out, "| nginx | 100 | 100 | 0.10 | 1.00 | 0 | – | – | 500.0 | 100.0 | 0.0 | 200.0 | baseline | baseline | baseline | 1.12× (1.00–1.25) | 0.50× | 2.25× (2.00–2.50) | 1.00× |")
	assert.Contains(t, out, "| haproxy | 90 | 90 | 0.10 | 2.00 | 0 | – | – | 562.5 | 112.5 | 0.0 | 225.0 | 0.90× (0.80–1.00) | 0.90× | 2.00× | baseline | baseline | 2.05× (1.60–2.50) | 2.00× |")
	// gw: 40/50 and 40/40 of the floor, 40/80 and 40/100 of HAProxy.
	assert.Contains(t, out, "| 0.40× | 0.40× | 4.00× | 0.45× (0.40–0.50) | 2.00× | 0.90× (0.80–1.00) | 4.00× |")
	assert.Contains(t, out, "| bare | 45 | 45 | 0.10 | 1.00 | 0 | – | – | 1125.0 | 225.0 | 0.0 | 450.0 | 0.45× (0.40–0.50) | 0.45× | 1.00× | 0.51× (0.40–0.62) | 0.50× | floor | floor |")
	assert.Contains(t, out, "| c1 | 10 | 10 | 0.10 | 1.00 | 0 | – | – | 5000.0 | 1000.0 | 0.0 | 2000.0 | 0.10× | 0.10× | 1.00× | – | – | – | – | – |\n")
}

func TestParseNamesWhatIsWrong(t *testing.T) {
	for in, want := range map[string]string{
		"":                             "empty input",
		"round\tname\n":                `header: no column "label"`,
		header + "1\tgw\tgateway\tx\n": "line 2: 4 fields, want 15",
		header + "1\tgw\tgw\tx\tmany\t1\t1\t1\t0\t0\t1\t1\t1\t1\t-\n": "line 2: requests",
		header + "1\tgw\tgw\tx\t0\t1\t1\t1\t0\t0\t1\t1\t1\t1\t-\n":    "line 2: gw: requests and duration_us must be > 0",
	} {
		_, err := parse(strings.NewReader(in))
		if assert.Error(t, err, in) {
			assert.Contains(t, err.Error(), want)
		}
	}
}

func TestMedian(t *testing.T) {
	assert.Equal(t, 2.0, median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
	assert.Equal(t, 7.0, median([]float64{7}))
}

// render parses the runs of in and returns the table written from them.
func render(t *testing.T, in string) string {
	t.Helper()
	runs, err := parse(strings.NewReader(in))
	require.NoError(t, err)
	var out strings.Builder
	require.NoError(t, write(&out, runs))
	return out.String()
}

// The optional gateway_rss_kb column: the gateway's peak memory, median
// over the rounds, in MiB.
func TestTablePeakMemory(t *testing.T) {
	h := strings.TrimSuffix(header, "\n") + "\tgateway_rss_kb\n"
	in := h +
		"1\tgw\tgateway\tgw\t1000\t1000000\t200\t2000\t0\t0\t50\t10\t0\t20\t-\t30720\n" +
		"2\tgw\tgateway\tgw\t1000\t1000000\t200\t2000\t0\t0\t50\t10\t0\t20\t-\t40960\n" +
		"3\tgw\tgateway\tgw\t1000\t1000000\t200\t2000\t0\t0\t50\t10\t0\t20\t-\t35840\n"
	out := render(t, in)
	assert.Contains(t, out, "| gateway peak RSS MiB |")
	assert.Contains(t, out, "| – | – | 35 |\n")
}
