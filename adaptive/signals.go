package adaptive

import (
	"errors"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shirou/gopsutil/v3/mem"
)

// Signals are the normalised inputs of the pressure score, each in [0, 1].
type Signals struct {
	// CPU and Scheduler are the measured values × ForwardedShare.
	CPU             float64 `json:"cpu"`
	Memory          float64 `json:"memory"`
	Scheduler       float64 `json:"scheduler"`
	Inflight        float64 `json:"inflight"`
	UpstreamErrors  float64 `json:"upstream_errors"`
	UpstreamLatency float64 `json:"upstream_latency"`
	// ForwardedShare is the share of the sample's requests that were sent
	// upstream (not a signal of its own: it weighs CPU and Scheduler).
	ForwardedShare float64 `json:"forwarded_share"`
	// Unavailable lists the signals that could not be read (each counted as
	// moderate pressure: an unreadable signal is neither ignored nor alarming).
	Unavailable []string `json:"unavailable,omitempty"`
}

// hostSampler reads CPU, memory and scheduler latency. CPU is the
// container's use against its cgroup (v2) quota when there is one, else the
// process's own use against GOMAXPROCS cores; memory is against the cgroup
// limit when there is one, else the host's.
type hostSampler struct {
	cgroupCPU   bool
	quotaCores  float64 // cpu.max quota / period
	lastUsage   int64   // cgroup usage_usec
	lastAt      time.Time
	schedSample []metrics.Sample
	lastSched   *metrics.Float64Histogram
}

const cgroupRoot = "/sys/fs/cgroup/"

func newHostSampler() *hostSampler {
	h := &hostSampler{schedSample: []metrics.Sample{{Name: "/sched/latencies:seconds"}}}
	if q, ok := cgroupCPUQuota(); ok {
		h.cgroupCPU, h.quotaCores = true, q
	}
	return h
}

// cgroupCPUQuota reads cpu.max: "max 100000" (no quota) or "200000 100000".
func cgroupCPUQuota() (float64, bool) {
	b, err := os.ReadFile(cgroupRoot + "cpu.max")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 || f[0] == "max" {
		return 0, false
	}
	q, err1 := strconv.ParseFloat(f[0], 64)
	p, err2 := strconv.ParseFloat(f[1], 64)
	if err1 != nil || err2 != nil || p <= 0 || q <= 0 {
		return 0, false
	}
	return q / p, true
}

// cpuLoad is the CPU used since the last call, as a fraction of the quota
// or of the cores the process may use.
func (h *hostSampler) cpuLoad(now time.Time) (float64, error) {
	usage, cores, err := h.cpuUsage()
	if err != nil {
		return 0, err
	}
	defer func() { h.lastUsage, h.lastAt = usage, now }()
	if h.lastAt.IsZero() {
		return 0, nil
	}
	el := now.Sub(h.lastAt).Seconds()
	if el <= 0 {
		return 0, nil
	}
	return clamp(float64(usage-h.lastUsage) / 1e6 / el / cores), nil
}

// cpuUsage is the CPU time used so far (µs) and the cores it is measured
// against: the container's against its cgroup quota when there is one, else
// the process's own against GOMAXPROCS. Host-wide CPU would make a gateway
// shed its traffic because a neighbour is busy; the neighbour's effect on us
// shows in the scheduler latency signal instead.
func (h *hostSampler) cpuUsage() (usec int64, cores float64, err error) {
	if h.cgroupCPU {
		usec, err = cgroupUsageUsec()
		return usec, h.quotaCores, err
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, err
	}
	return (ru.Utime.Nano() + ru.Stime.Nano()) / 1000, float64(runtime.GOMAXPROCS(0)), nil
}

func cgroupUsageUsec() (int64, error) {
	b, err := os.ReadFile(cgroupRoot + "cpu.stat")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("cpu.stat: no usage_usec")
}

// memoryLoad is memory in use against the cgroup limit when there is one,
// else the host's. Below 70% it is no pressure; 95% is full pressure.
func memoryLoad() (float64, error) {
	frac := -1.0
	if b, err := os.ReadFile(cgroupRoot + "memory.max"); err == nil {
		if limit, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64); err == nil && limit > 0 {
			if c, err := os.ReadFile(cgroupRoot + "memory.current"); err == nil {
				if cur, err := strconv.ParseFloat(strings.TrimSpace(string(c)), 64); err == nil {
					frac = cur / limit
				}
			}
		}
	}
	if frac < 0 {
		vm, err := mem.VirtualMemory()
		if err != nil {
			return 0, err
		}
		frac = vm.UsedPercent / 100
	}
	return clamp((frac - 0.70) / 0.25), nil
}

// schedLatency is the p99 of the Go scheduler latency since the last call,
// in seconds.
func (h *hostSampler) schedLatency() (float64, error) {
	metrics.Read(h.schedSample)
	if h.schedSample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0, errors.New("runtime/metrics: no /sched/latencies:seconds")
	}
	cur := h.schedSample[0].Value.Float64Histogram()
	prev := h.lastSched
	h.lastSched = cloneHist(cur)
	if prev == nil || len(prev.Counts) != len(cur.Counts) {
		return 0, nil
	}
	var total uint64
	for i := range cur.Counts {
		total += cur.Counts[i] - prev.Counts[i]
	}
	if total == 0 {
		return 0, nil
	}
	rank := total - total/100
	var seen uint64
	for i := range cur.Counts {
		seen += cur.Counts[i] - prev.Counts[i]
		if seen >= rank {
			upper := cur.Buckets[i+1]
			if upper > 1e9 {
				upper = cur.Buckets[i]
			}
			return upper, nil
		}
	}
	return 0, nil
}

func cloneHist(h *metrics.Float64Histogram) *metrics.Float64Histogram {
	return &metrics.Float64Histogram{Counts: append([]uint64(nil), h.Counts...), Buckets: h.Buckets}
}

func clamp(v float64) float64 {
	switch {
	case v != v || v < 0:
		return 0
	case v > 1:
		return 1
	}
	return v
}

// score combines the signals: their weighted mean, raised to the
// worst single signal (× 0.95, so one saturated signal alone reaches
// Critical only when it is fully saturated together with some other load).
// The mean alone would let a saturated upstream (latency 1, errors 1) with
// an idle gateway (CPU 0.1) score about 0.3: Normal mode while the backend
// drowns. The maximum term is what lets protection engage then.
func score(s Signals, w Weights) float64 {
	sum := w.CPU + w.Memory + w.Scheduler + w.Inflight + w.UpstreamErrors + w.UpstreamLatency
	mean := (w.CPU*s.CPU + w.Memory*s.Memory + w.Scheduler*s.Scheduler + w.Inflight*s.Inflight +
		w.UpstreamErrors*s.UpstreamErrors + w.UpstreamLatency*s.UpstreamLatency) / sum
	worst := 0.0
	for _, v := range []struct{ v, w float64 }{{s.CPU, w.CPU}, {s.Memory, w.Memory}, {s.Scheduler, w.Scheduler},
		{s.Inflight, w.Inflight}, {s.UpstreamErrors, w.UpstreamErrors}, {s.UpstreamLatency, w.UpstreamLatency}} {
		if v.w > 0 {
			worst = max(worst, v.v)
		}
	}
	return clamp(max(mean, 0.95*worst))
}
