package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// row is one load: the descriptor each call sends.
type row struct {
	name   string
	key    string
	values int // 0: one value; else a value drawn among this many per call
	limit  int // per second, for a row that reaches its limit (0: never)
}

var allRows = []row{
	{name: "hot", key: "hot"},
	{name: "100k", key: "user", values: 100_000},
	{name: "1m", key: "user", values: 1_000_000},
	{name: "flood", key: "flood", limit: 100},
}

func parseRows(list string) ([]row, error) {
	var out []row
	for _, name := range strings.Split(list, ",") {
		i := -1
		for j, r := range allRows {
			if r.name == strings.TrimSpace(name) {
				i = j
			}
		}
		if i < 0 {
			return nil, fmt.Errorf("-rows: no row %q (hot, 100k, 1m, flood)", name)
		}
		out = append(out, allRows[i])
	}
	return out, nil
}

// measure is one row on one service.
type measure struct {
	calls, ok, errors int64
	seconds           float64
	cpu, redisCPU     time.Duration // the service's and Redis' over the row
	commands          int64         // store calls Redis ran over the row (storeCalls)
	rss               int64         // the service's, at the row's end
}

func (m measure) perSecond() float64 { return float64(m.calls) / m.seconds }
func (m measure) cpuPerCall() float64 {
	return float64(m.cpu.Microseconds()) / float64(max(m.calls, 1))
}
func (m measure) redisPerCall() float64 {
	return float64(m.redisCPU.Microseconds()) / float64(max(m.calls, 1))
}
func (m measure) commandsPerCall() float64 { return float64(m.commands) / float64(max(m.calls, 1)) }

func (m measure) String() string {
	return fmt.Sprintf("%8.0f calls/s, %d OK, %d errors, %.1f µs CPU a call, Redis %.1f µs and %.3f store calls a call, RSS %d MB",
		m.perSecond(), m.ok, m.errors, m.cpuPerCall(), m.redisPerCall(), m.commandsPerCall(), m.rss>>20)
}

// measureRow empties Redis, then runs r on s for the row's duration.
func measureRow(ctx context.Context, o *options, r row, s *proc, redis *proc) (measure, error) {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redis.addr}, DisableCache: true})
	if err != nil {
		return measure{}, err
	}
	defer rc.Close()
	if err := rc.Do(ctx, rc.B().Flushall().Build()).Error(); err != nil {
		return measure{}, err
	}
	call, done, err := caller(o, s.addr)
	if err != nil {
		return measure{}, err
	}
	defer done()
	if _, err := call(ctx, r, 0); err != nil { // connected and serving
		return measure{}, err
	}
	before, err := snapshot(ctx, s, rc)
	if err != nil {
		return measure{}, err
	}
	m := load(ctx, call, r, o)
	after, err := snapshot(ctx, s, rc)
	m.cpu, m.redisCPU, m.commands, m.rss = after.cpu-before.cpu, after.redisCPU-before.redisCPU, after.commands-before.commands, after.rss
	return m, err
}

// callFunc makes one call of row r (n picks its key) and reports whether
// it was allowed.
type callFunc func(ctx context.Context, r row, n int) (bool, error)

// caller returns the calls of o.api to the service at addr, and what
// closes their connections.
func caller(o *options, addr string) (callFunc, func(), error) {
	if o.api == "proxy" {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.callers}}
		url := "http://" + addr + "/"
		return func(ctx context.Context, r row, n int) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return false, err
			}
			req.Header.Set("X-Forwarded-For", clientIP(r, n))
			resp, err := client.Do(req)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				return false, err
			}
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
				return false, fmt.Errorf("proxy: %s", resp.Status)
			}
			return resp.StatusCode == http.StatusOK, nil
		}, client.CloseIdleConnections, nil
	}
	if o.api == "check" {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.callers}}
		url := "http://" + addr + "/v1/ratelimit/check"
		return func(ctx context.Context, r row, n int) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(checkBody(r, n)))
			if err != nil {
				return false, err
			}
			resp, err := client.Do(req)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return false, err
			}
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
				return false, fmt.Errorf("check API: %s: %s", resp.Status, b)
			}
			return bytes.Contains(b, []byte(`"allowed":true`)), nil
		}, client.CloseIdleConnections, nil
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	return func(ctx context.Context, r row, n int) (bool, error) {
		resp, err := client.ShouldRateLimit(ctx, request(r, n))
		if err != nil {
			return false, err
		}
		return resp.OverallCode == rlsv3.RateLimitResponse_OK, nil
	}, func() { conn.Close() }, nil
}

// clientIP is the client address of row r's call n through the proxy (its
// X-Forwarded-For, which the gateway trusts from the load client), limited
// by limits.ip: 10.0.0.1 for a row of one key.
func clientIP(r row, n int) string {
	v := 1
	if r.values > 0 {
		v = n % r.values
	}
	return fmt.Sprintf("10.%d.%d.%d", v>>16&255, v>>8&255, v&255)
}

// checkBody is the check API's body for the call of row r; n picks its key
// (the API key limit's: limits.api_key).
func checkBody(r row, n int) string {
	return `{"tenant_id":"bench","resource":"default","key":"` + r.key + "-" + value(r, n) + `"}`
}

// snapshot reads the service's CPU time and memory and Redis' CPU time
// and store calls (the counters of a measure, as they are now).
func snapshot(ctx context.Context, s *proc, rc rueidis.Client) (measure, error) {
	var m measure
	var err error
	if m.cpu, err = cpu(s.cmd.Process.Pid); err != nil {
		return m, err
	}
	if m.rss, err = rss(s.cmd.Process.Pid); err != nil {
		return m, err
	}
	m.redisCPU, m.commands, err = redisStats(ctx, rc)
	return m, err
}

// request is the call of row r; n picks its descriptor's value.
func request(r row, n int) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*corev3.RateLimitDescriptor{
		{Entries: []*corev3.RateLimitDescriptor_Entry{{Key: r.key, Value: value(r, n)}}},
	}}
}

// value is the key's value of row r's call n: one for a row of one key.
func value(r row, n int) string {
	if r.values > 0 {
		return strconv.Itoa(n % r.values)
	}
	return "1"
}

// load runs o.callers callers of r with call for o.duration.
func load(ctx context.Context, call callFunc, r row, o *options) measure {
	var calls, ok, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(o.duration)
	for c := range o.callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(start.UnixNano())))
			for time.Now().Before(end) && ctx.Err() == nil {
				allowed, err := call(ctx, r, rng.IntN(1<<30))
				calls.Add(1)
				switch {
				case err != nil:
					errs.Add(1)
				case allowed:
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return measure{calls: calls.Load(), ok: ok.Load(), errors: errs.Load(), seconds: time.Since(start).Seconds()}
}

// storeCalls are the commands that are one decision's store call: a
// script's run for Sentinel, INCRBY (pipelined with its EXPIRE) for
// envoyproxy/ratelimit.
var storeCalls = map[string]bool{"cmdstat_evalsha": true, "cmdstat_eval": true, "cmdstat_incrby": true}

// redisStats reads Redis' CPU time (user and system) and the store calls
// it has run (storeCalls).
func redisStats(ctx context.Context, rc rueidis.Client) (time.Duration, int64, error) {
	info, err := rc.Do(ctx, rc.B().Info().Section("everything").Build()).ToString()
	if err != nil {
		return 0, 0, err
	}
	var cpuSec float64
	var commands int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "used_cpu_sys:"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			cpuSec += f
		} else if v, ok := strings.CutPrefix(line, "used_cpu_user:"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			cpuSec += f
		} else if name, stats, ok := strings.Cut(line, ":"); ok && storeCalls[name] {
			calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			commands += n
		}
	}
	return time.Duration(cpuSec * float64(time.Second)), commands, nil
}
