package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a process this command started; it stops with the command
// (stop, or the context's deadline).
type proc struct {
	name string
	addr string // its gRPC address (Redis: its address)
	cmd  *exec.Cmd
}

func (p *proc) stop() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
		}
	}
}

// start runs cmd with its output in dir/name.log, and waits until addr
// accepts connections.
func start(ctx context.Context, dir, name, addr string, cmd *exec.Cmd) (*proc, error) {
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, addr: addr, cmd: cmd}
	for deadline := time.Now().Add(20 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return p, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop()
			out, _ := os.ReadFile(log.Name())
			return nil, fmt.Errorf("%s does not listen on %s: %v\n%s", name, addr, err, tail(out))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tail is the last lines of a log, for an error.
func tail(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(len(lines)-15, 0):], "\n")
}

// freeAddr is a loopback address no one listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func startRedis(ctx context.Context, dir string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.CommandContext(ctx, "redis-server", "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	return start(ctx, dir, "redis", addr, cmd)
}

// measureFresh starts the service name ("sentinel", or "ratelimit" for
// envoyproxy/ratelimit) on Redis, loaded with bench.yaml, runs r on it and
// stops it.
func measureFresh(ctx context.Context, o *options, dir string, r row, name string, redis *proc) (measure, error) {
	file, err := benchFile()
	if err != nil {
		return measure{}, err
	}
	var p *proc
	switch {
	case o.api == "check":
		p, err = startSentinelCheck(ctx, o.sentinel, dir, redis.addr, r)
	case o.api == "proxy":
		var backend *proc
		if backend, err = startBackend(ctx, o.backend, dir); err != nil {
			return measure{}, err
		}
		defer backend.stop()
		p, err = startSentinelProxy(ctx, o.sentinel, dir, redis.addr, backend.addr, r)
	case name == "sentinel":
		p, err = startSentinel(ctx, o.sentinel, dir, redis.addr, file)
	default:
		p, err = startERL(ctx, o.erl, dir, redis.addr, file)
	}
	if err != nil {
		return measure{}, err
	}
	defer p.stop()
	return measureRow(ctx, o, r, p, redis)
}

func startSentinel(ctx context.Context, bin, dir, redisAddr, file string) (*proc, error) {
	a, err := sentinelAddrs()
	if err != nil {
		return nil, err
	}
	api := fmt.Sprintf("grpc: {listen: %q, config_files: [%q]}\n", a[2], file)
	return startSentinelWith(ctx, bin, dir, "sentinel", a, a[2], redisAddr, "http://127.0.0.1:9", "", api)
}

// startSentinelCheck runs Sentinel for its check API on row r: a tenant
// and the API key limit on the keys the row sends (rowLimit).
func startSentinelCheck(ctx context.Context, bin, dir, redisAddr string, r row) (*proc, error) {
	a, err := sentinelAddrs()
	if err != nil {
		return nil, err
	}
	limit, window := rowLimit(r)
	api := fmt.Sprintf("tenants:\n  - {id: bench, plan: PREMIUM}\nlimits: {api_key: %d, window: %s}\n", limit, window)
	return startSentinelWith(ctx, bin, dir, "sentinel-check", a, a[1], redisAddr, "http://127.0.0.1:9", "", api)
}

// startBackend runs the demo backend, answering every request with the
// same 64 bytes.
func startBackend(ctx context.Context, bin, dir string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	return start(ctx, dir, "backend", addr, exec.CommandContext(ctx, bin, "-listen", addr, "-fixed-body", "64"))
}

// startSentinelProxy runs Sentinel's proxy in front of the backend at
// upstream for row r: the client address limit (limits.ip, on the address
// the load client puts in X-Forwarded-For; rowLimit).
func startSentinelProxy(ctx context.Context, bin, dir, redisAddr, upstream string, r row) (*proc, error) {
	a, err := sentinelAddrs()
	if err != nil {
		return nil, err
	}
	limit, window := rowLimit(r)
	api := fmt.Sprintf("limits: {ip: %d, window: %s}\n", limit, window)
	return startSentinelWith(ctx, bin, dir, "sentinel-proxy", a, a[0], redisAddr, "http://"+upstream, `, trusted_proxies: ["127.0.0.1"]`, api)
}

// rowLimit is the limit a row's keys get on the check API and the proxy: a
// million a minute (never reached), or the row's limit a second.
func rowLimit(r row) (limit int, window string) {
	if r.limit > 0 {
		return r.limit, "1s"
	}
	return 1_000_000, "1m"
}

// sentinelAddrs are free addresses for Sentinel's listen, admin_listen
// and grpc.listen.
func sentinelAddrs() ([3]string, error) {
	var a [3]string
	for i := range a {
		var err error
		if a[i], err = freeAddr(); err != nil {
			return a, err
		}
	}
	return a, nil
}

// startSentinelWith writes the configuration every benchmark's Sentinel
// shares (its listen and admin addresses a[0] and a[1], one route to
// upstream, Redis at redisAddr, adaptive off), with serverExtra in its
// server section and api after it, to name.yaml in dir, and starts
// Sentinel on it, ready once it listens on wait.
func startSentinelWith(ctx context.Context, bin, dir, name string, a [3]string, wait, redisAddr, upstream, serverExtra, api string) (*proc, error) {
	cfg := fmt.Sprintf(`server: {listen: %q, admin_listen: %q, drain_delay: 0s, shutdown_grace: 1s%s}
upstreams:
  api: {targets: [%q]}
routes:
  - {path_prefix: /, upstream: api, resource: default}
redis: {addrs: [%q]}
adaptive: {enabled: false}
log: {level: warn}
%s`, a[0], a[1], serverExtra, upstream, redisAddr, api)
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	// BENCH_SENTINEL_ARGS adds flags, "-pprof 127.0.0.1:6061" to profile a row.
	args := append([]string{"-config", path}, strings.Fields(os.Getenv("BENCH_SENTINEL_ARGS"))...)
	return start(ctx, dir, "sentinel", wait, exec.CommandContext(ctx, bin, args...))
}

// startERL runs envoyproxy/ratelimit as its README runs it, with only its
// addresses, Redis and the file's folder set (statsd off).
func startERL(ctx context.Context, bin, dir, redisAddr, file string) (*proc, error) {
	conf := filepath.Join(dir, "runtime", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(conf, "bench.yaml"), b, 0o644); err != nil {
		return nil, err
	}
	env := []string{"USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"RUNTIME_ROOT=" + filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=.", "RUNTIME_WATCH_ROOT=false"}
	var grpcAddr string
	for _, name := range []string{"", "GRPC_", "DEBUG_"} {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		host, port, _ := net.SplitHostPort(a)
		env = append(env, name+"HOST="+host, name+"PORT="+port)
		if name == "GRPC_" {
			grpcAddr = a
		}
	}
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), env...)
	return start(ctx, dir, "ratelimit", grpcAddr, cmd)
}

// cpu is the CPU time a process has used (user and system).
func cpu(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's name, which ends with the last ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go runs on.
const clockTicks = 100

// rss is a process's resident memory in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}
