package adaptive

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// The gauges read the controllers of the process (one in production; tests
// build several): the most pressed one is shown.
var (
	ctrlMu sync.Mutex
	ctrls  = map[*Controller]struct{}{}
)

func register(c *Controller) {
	ctrlMu.Lock()
	ctrls[c] = struct{}{}
	ctrlMu.Unlock()
	for name := range c.concurrency {
		labels := `{upstream="` + name + `"}`
		metrics.GetOrCreateGauge(`sentinel_concurrency_limit`+labels, func() float64 {
			return worst(func(c *Controller) float64 {
				if l := c.concurrency[name]; l != nil {
					return l.Limit()
				}
				return 0
			})
		})
		metrics.GetOrCreateGauge(`sentinel_concurrency_inflight`+labels, func() float64 {
			return worst(func(c *Controller) float64 {
				if l := c.concurrency[name]; l != nil {
					return float64(l.Inflight())
				}
				return 0
			})
		})
	}
}

func unregister(c *Controller) {
	ctrlMu.Lock()
	delete(ctrls, c)
	ctrlMu.Unlock()
}

// worst returns a value over the registered controllers: the maximum.
func worst(f func(c *Controller) float64) float64 {
	ctrlMu.Lock()
	defer ctrlMu.Unlock()
	v := 0.0
	for c := range ctrls {
		v = max(v, f(c))
	}
	return v
}

func signal(name string, f func(s *Signals) float64) {
	metrics.NewGauge(`sentinel_adaptive_signal{signal="`+name+`"}`, func() float64 {
		return worst(func(c *Controller) float64 {
			c.mu.Lock()
			defer c.mu.Unlock()
			return f(&c.signals)
		})
	})
}

func init() {
	signal("cpu", func(s *Signals) float64 { return s.CPU })
	signal("memory", func(s *Signals) float64 { return s.Memory })
	signal("scheduler", func(s *Signals) float64 { return s.Scheduler })
	signal("inflight", func(s *Signals) float64 { return s.Inflight })
	signal("upstream_errors", func(s *Signals) float64 { return s.UpstreamErrors })
	signal("upstream_latency", func(s *Signals) float64 { return s.UpstreamLatency })
	pressure := func(scope string, f func(c *Controller) float64) {
		metrics.NewGauge(`sentinel_adaptive_pressure{scope="`+scope+`"}`, func() float64 {
			return worst(func(c *Controller) float64 {
				c.mu.Lock()
				defer c.mu.Unlock()
				return f(c)
			})
		})
	}
	pressure("local", func(c *Controller) float64 { return c.local })
	pressure("cluster", func(c *Controller) float64 { return c.cluster })
	pressure("effective", func(c *Controller) float64 { return c.effective })
	metrics.NewGauge(`sentinel_adaptive_mode`, func() float64 {
		return worst(func(c *Controller) float64 { return float64(c.Policy().Mode) })
	})
	metrics.NewGauge(`sentinel_adaptive_multiplier`, func() float64 {
		m := 1.0
		ctrlMu.Lock()
		defer ctrlMu.Unlock()
		for c := range ctrls {
			m = min(m, c.Policy().Multiplier)
		}
		return m
	})
	metrics.NewGauge(`sentinel_adaptive_live_pods`, func() float64 {
		return worst(func(c *Controller) float64 { return float64(c.LivePods()) })
	})
}

var clusterErrors = metrics.NewCounter(`sentinel_adaptive_cluster_errors_total`)

// modeTransitions returns the counter of one transition.
func modeTransitions(from, to Mode) *metrics.Counter {
	return metrics.GetOrCreateCounter(`sentinel_adaptive_mode_transitions_total{from="` + from.String() + `",to="` + to.String() + `"}`)
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
func formatInt(v int64) string     { return strconv.FormatInt(v, 10) }

// parseEntry reads "score:unix ms".
func parseEntry(v string) (float64, time.Time, bool) {
	s, ms, ok := strings.Cut(v, ":")
	if !ok {
		return 0, time.Time{}, false
	}
	score, err1 := strconv.ParseFloat(s, 64)
	at, err2 := strconv.ParseInt(ms, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, time.Time{}, false
	}
	return clamp(score), time.UnixMilli(at), true
}
