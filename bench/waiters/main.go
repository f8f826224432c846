// Command bench-waiters measures what requests waiting for their limit
// (max_wait) cost the gateway: it starts the gateway binary on the
// in-memory store with a policy that holds every request but the first of a
// key for up to a minute, opens -n connections whose requests wait, and
// prints the gateway's resident memory before and while they wait (and per
// waiting request), and the latency of other requests (on a route without
// the policy) before and while they wait. `make bench-waiters` runs it.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	bin := flag.String("sentinel", "", "the gateway's binary (required)")
	n := flag.Int("n", 10000, "waiting requests")
	keys := flag.Int("keys", 10, "keys the waiting requests are spread over")
	probes := flag.Int("probes", 2000, "requests of another route timed before and while they wait")
	flag.Parse()
	if err := run(*bin, *n, *keys, *probes); err != nil {
		fmt.Fprintln(os.Stderr, "bench-waiters:", err)
		os.Exit(1)
	}
}

// run starts the upstream and the gateway, measures, and stops them.
func run(bin string, n, keys, probes int) error {
	if bin == "" {
		return fmt.Errorf("-sentinel is required")
	}
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() {
		_ = http.Serve(up, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }))
	}()
	gw, admin := freePort(), freePort()
	dir, err := os.MkdirTemp("", "bench-waiters-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	conf := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(conf, []byte(config(gw, admin, up.Addr().String(), n)), 0o600); err != nil {
		return err
	}
	cmd := exec.Command(bin, "-config", conf)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := waitUp(gw); err != nil {
		return err
	}
	return measure(cmd.Process.Pid, gw, admin, n, keys, probes)
}

// config is the gateway's configuration: a policy holding every request
// but the first of each X-User for a window of 30 s, waiting up to a
// minute; no other limit, no adaptive layer.
func config(gw, admin, up string, n int) string {
	return fmt.Sprintf(`server: {listen: "%s", admin_listen: "%s", write_timeout: 2m, idle_timeout: 2m}
upstreams: {api: {targets: ["http://%s"]}}
routes:
  - {path_prefix: /wait, upstream: api, resource: wait}
  - {path_prefix: /, upstream: api, resource: default}
limits: {ip: 0, tenant: 0, wait_queue: %d, wait_queue_per_key: %d}
policies:
  - name: held
    match: {resources: [wait]}
    key: ["header:X-User"]
    limits: [{limit: 1, window: 30s, max_wait: 1m}]
adaptive: {enabled: false}
log: {level: error}
`, gw, admin, up, n+1000, n)
}

// measure takes the figures and prints them.
func measure(pid int, gw, admin string, n, keys, probes int) error {
	before, err := rss(pid)
	if err != nil {
		return err
	}
	base := latencies(gw, probes)
	conns, err := openWaiters(gw, n, keys)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if err != nil {
		return err
	}
	waiting, err := waitFor(admin, n-keys)
	if err != nil {
		return err
	}
	during, err := rss(pid)
	if err != nil {
		return err
	}
	loaded := latencies(gw, probes)
	fmt.Printf("| waiting | RSS before | RSS while waiting | per waiting request | other route p50 / p99 before | while waiting |\n")
	fmt.Printf("| --- | --- | --- | --- | --- | --- |\n")
	fmt.Printf("| %d | %.1f MB | %.1f MB | %.1f KB | %s / %s | %s / %s |\n", waiting, mb(before), mb(during),
		float64(during-before)/1024/float64(max(waiting, 1)), pct(base, 50), pct(base, 99), pct(loaded, 50), pct(loaded, 99))
	return nil
}

// openWaiters opens n connections, each sending one request of the policy
// for one of keys users: all but the first of each user wait.
func openWaiters(gw string, n, keys int) ([]net.Conn, error) {
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, err := net.Dial("tcp", gw)
		if err != nil {
			return conns, fmt.Errorf("connection %d: %w", i, err)
		}
		conns = append(conns, c)
		req := "GET /wait/x HTTP/1.1\r\nHost: bench\r\nX-User: u" + strconv.Itoa(i%keys) + "\r\n\r\n"
		if _, err := c.Write([]byte(req)); err != nil {
			return conns, err
		}
	}
	return conns, nil
}

// waitFor scrapes the gateway's metrics until at least want requests wait
// (at most 60 s), and returns how many do.
func waitFor(admin string, want int) (int, error) {
	end := time.Now().Add(60 * time.Second)
	for {
		got, err := waitingNow(admin)
		if err == nil && got >= want || time.Now().After(end) {
			return got, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitingNow sums sentinel_limit_waiting over the policy's limits.
func waitingNow(admin string) (int, error) {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "sentinel_limit_waiting{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			total += v
		}
	}
	return int(total), sc.Err()
}

// latencies times n requests, one after another, on the route without
// the policy.
func latencies(gw string, n int) []time.Duration {
	c := &http.Client{Timeout: 5 * time.Second}
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		resp, err := c.Get("http://" + gw + "/other")
		if err != nil {
			continue
		}
		resp.Body.Close()
		out = append(out, time.Since(start))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func pct(d []time.Duration, p int) string {
	if len(d) == 0 {
		return "-"
	}
	return d[min(len(d)*p/100, len(d)-1)].Round(time.Microsecond).String()
}

// rss is the resident memory of pid, in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for %d", pid)
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitUp waits until the gateway accepts connections (at most 20 s).
func waitUp(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the gateway did not listen on %s", addr)
}
