package harness

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Scrape reads one sample from the admin /metrics: the sum of the series of
// name whose labels include every given label="value".
func Scrape(t testing.TB, admin, name string, labels ...string) float64 {
	t.Helper()
	a := Do(t, "GET", admin+"/metrics", "")
	require.Equal(t, http.StatusOK, a.Status)
	return SumSeries(string(a.Body), name, labels...)
}

// SampleLine matches one sample line of the exposition format: the
// metric's name, its labels ({...}, optional) and its value.
var SampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)`)

// SumSeries is the sum of the samples of name in the exposition text whose
// labels include every given label="value" pair.
func SumSeries(text, name string, labels ...string) float64 {
	total := 0.0
	for _, line := range strings.Split(text, "\n") {
		m := SampleLine.FindStringSubmatch(line)
		if m == nil || m[1] != name || !hasLabels(m[2], labels) {
			continue
		}
		if v, err := strconv.ParseFloat(m[3], 64); err == nil {
			total += v
		}
	}
	return total
}

func hasLabels(set string, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		if !strings.Contains(set, labels[i]+`="`+labels[i+1]+`"`) {
			return false
		}
	}
	return true
}
