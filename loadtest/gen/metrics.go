package main

import (
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// sample is one series of a Prometheus text page.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// snapshot is a scrape of the gateway's /metrics; nil when there is no
// admin URL or the scrape failed.
type snapshot map[string]sample // by the series as written

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

var scrapeClient = &http.Client{Timeout: 5 * time.Second}

// scrape reads admin/metrics.
func scrape(admin string) snapshot {
	if admin == "" {
		return nil
	}
	resp, err := scrapeClient.Get(admin + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil
	}
	return parseMetrics(string(b))
}

func parseMetrics(text string) snapshot {
	s := snapshot{}
	for _, line := range strings.Split(text, "\n") {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		labels := map[string]string{}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			labels[p[1]] = p[2]
		}
		s[m[1]+m[2]] = sample{name: m[1], labels: labels, value: v}
	}
	return s
}

// delta sums after − before over the series of name whose labels pass keep
// (nil: all).
func delta(before, after snapshot, name string, keep func(map[string]string) float64) float64 {
	total := 0.0
	for k, a := range after {
		if a.name != name {
			continue
		}
		w := 1.0
		if keep != nil {
			w = keep(a.labels)
		}
		total += w * (a.value - before[k].value)
	}
	return total
}

// byLabel is after − before of name per value of label, as "a=3 b=1"
// (zero deltas left out; "-" when there are none).
func byLabel(before, after snapshot, name, label string) (string, float64) {
	sums := map[string]float64{}
	total := 0.0
	for k, a := range after {
		if a.name != name {
			continue
		}
		d := a.value - before[k].value
		sums[a.labels[label]] += d
		total += d
	}
	var parts []string
	for v, d := range sums {
		if d != 0 {
			parts = append(parts, v+"="+strconv.FormatFloat(d, 'f', -1, 64))
		}
	}
	if len(parts) == 0 {
		return "-", 0
	}
	sort.Strings(parts)
	return strings.Join(parts, " "), total
}

var modeRank = map[string]int{"normal": 0, "moderate": 1, "aggressive": 2, "critical": 3}

// gatewayDelta is what the gateway's metrics say about one phase.
type gatewayDelta struct {
	ok                  bool   // both scrapes worked
	sheds, rejections   string // by reason
	shedTotal           float64
	ejections, trips    float64
	modesUp, modesDown  float64
	modeBefore, modeEnd float64
	clientFaults        string // by reason, when the gateway counts them
	upstreamOutcomes    string // sentinel_upstream_requests_total by outcome
}

func gatewayChange(before, after snapshot) gatewayDelta {
	if before == nil || after == nil {
		return gatewayDelta{}
	}
	d := gatewayDelta{ok: true}
	d.sheds, d.shedTotal = byLabel(before, after, "sentinel_shed_total", "reason")
	d.rejections, _ = byLabel(before, after, "sentinel_proxy_rejections_total", "reason")
	d.upstreamOutcomes, _ = byLabel(before, after, "sentinel_upstream_requests_total", "outcome")
	d.clientFaults = clientFaults(before, after)
	d.ejections = delta(before, after, "sentinel_upstream_ejections_total", nil)
	d.trips = delta(before, after, "sentinel_upstream_breaker_transitions_total", func(l map[string]string) float64 {
		return b2f(l["to"] == "open")
	})
	d.modesUp = delta(before, after, "sentinel_adaptive_mode_transitions_total", func(l map[string]string) float64 {
		return b2f(modeRank[l["to"]] > modeRank[l["from"]])
	})
	d.modesDown = delta(before, after, "sentinel_adaptive_mode_transitions_total", func(l map[string]string) float64 {
		return b2f(modeRank[l["to"]] < modeRank[l["from"]])
	})
	d.modeBefore = before["sentinel_adaptive_mode"].value
	d.modeEnd = after["sentinel_adaptive_mode"].value
	return d
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// clientFaults is after − before of the gateway's counters of client faults
// (any sentinel_*client*_total series), as "name{reason or kind}=n", so that the
// report shows them under whatever name the gateway gives them.
func clientFaults(before, after snapshot) string {
	sums := map[string]float64{}
	for k, a := range after {
		if !strings.HasPrefix(a.name, "sentinel_") || !strings.Contains(a.name, "client") || !strings.HasSuffix(a.name, "_total") {
			continue
		}
		key := strings.TrimPrefix(strings.TrimSuffix(a.name, "_total"), "sentinel_")
		if r := a.labels["reason"] + a.labels["kind"]; r != "" {
			key += "{" + r + "}"
		}
		sums[key] += a.value - before[k].value
	}
	var parts []string
	for k, v := range sums {
		if v != 0 {
			parts = append(parts, k+"="+strconv.FormatFloat(v, 'f', -1, 64))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
