package rls

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// recordPeer, when set, is the address of a running envoyproxy/ratelimit:
// TestPeerAnswers then sends it the calls and records its answers.
var recordPeer = flag.String("record-peer", "", "host:port of envoyproxy/ratelimit: record its answers to "+peerCalls+" instead of testing")

const peerCalls = "testdata/peer/calls.json"

// peerFiles are envoyproxy/ratelimit's example configuration files, which
// both services load unchanged.
var peerFiles = []string{"testdata/peer/config.yaml", "testdata/peer/example.yaml"}

// peerScript is calls.json: the calls, and the peer's answers once recorded.
type peerScript struct {
	Comment string `json:"comment"`
	// Start is when the recording's first call was made (UTC); AtMS of a
	// call counts from it.
	Start time.Time  `json:"start"`
	Calls []peerCall `json:"calls"`
}

// peerCall is one ShouldRateLimit call and the peer's answer to it.
type peerCall struct {
	Name string `json:"name"`
	// Align is "minute" or "second": the recorder waits for the next
	// boundary before the call, so that the calls that follow share the
	// peer's fixed window.
	Align string `json:"align,omitempty"`
	// SameSecond: the call's answer needs the calls before it within one
	// second (per-second rules); the replay on a real clock skips it.
	SameSecond bool `json:"same_second,omitempty"`
	// Differs says why Sentinel's code and limit_remaining differ from the
	// peer's on this call, as docs/envoy.md says; only the statuses' limits
	// are compared.
	Differs string          `json:"differs,omitempty"`
	Request json.RawMessage `json:"request"`
	AtMS    int64           `json:"at_ms"`
	Answer  json.RawMessage `json:"answer,omitempty"`
	Error   *peerError      `json:"error,omitempty"`
}

type peerError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func loadPeerScript(t *testing.T) *peerScript {
	data, err := os.ReadFile(peerCalls)
	require.NoError(t, err)
	var s peerScript
	require.NoError(t, json.Unmarshal(data, &s))
	return &s
}

// TestPeerAnswers replays calls that envoyproxy/ratelimit answered and
// compares Sentinel's answers with its answers, field by field: overall
// code, every status's code, current_limit (requests_per_unit, unit, name)
// and limit_remaining, the response headers, and the error's gRPC code and
// message. duration_until_reset depends on time and on the window (the
// peer's fixed, Sentinel's sliding or calendar): it must be set where the
// peer sets it, and within (0, the unit's longest length] (0 for a whole
// budget). A call marked Differs is one where docs/envoy.md says why the
// answers differ: only its statuses' limits are compared.
//
// Both load envoyproxy/ratelimit's example files (testdata/peer/*.yaml)
// unchanged, with their default settings. On the in-memory store the clock
// is the recording's (each call at its recorded time), so that every call
// replays, the per-second ones too; on redis-server the clock is real and
// the calls that need one second (SameSecond) are skipped.
//
// How calls.json was recorded (nothing of the peer is kept in the
// repository): envoyproxy/ratelimit at commit f2fb157 (the NOTICE), its
// source in a scratch folder outside the repository, built with
// `go build -o /tmp/rlspeer/ratelimit ./src/service_cmd` (every module came
// from the module proxy), and run on loopback with only its addresses,
// Redis and the files' folder set:
//
//	redis-server --port 16379 --bind 127.0.0.1 --save '' &
//	mkdir -p /tmp/rlspeer/runtime/config && cp rls/testdata/peer/*.yaml /tmp/rlspeer/runtime/config/
//	USE_STATSD=false HOST=127.0.0.1 PORT=18080 GRPC_HOST=127.0.0.1 GRPC_PORT=18081 \
//	  DEBUG_HOST=127.0.0.1 DEBUG_PORT=16070 REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:16379 \
//	  RUNTIME_ROOT=/tmp/rlspeer/runtime RUNTIME_SUBDIRECTORY=. RUNTIME_WATCH_ROOT=false \
//	  /tmp/rlspeer/ratelimit &
//	redis-cli -p 16379 flushall
//	go test ./rls -count=1 -run TestPeerAnswers -record-peer 127.0.0.1:18081
//
// The last command is this test in recording mode: it sends the calls to
// the peer, waiting for a minute's or a second's boundary where a call says
// so, and writes the answers, the error codes and the calls' times into
// calls.json (a minute or two). A call's Differs is written by hand.
func TestPeerAnswers(t *testing.T) {
	script := loadPeerScript(t)
	if *recordPeer != "" {
		recordPeerAnswers(t, script, *recordPeer)
		return
	}
	require.False(t, script.Start.IsZero(), "calls.json has no recording")
	t.Run("memory", func(t *testing.T) {
		var at atomic.Int64
		at.Store(script.Start.UnixNano())
		now := func() time.Time { return time.Unix(0, at.Load()) }
		c := peerClient(t, store.NewMemoryStore(store.MemoryOptions{Now: now}), now)
		for _, call := range script.Calls {
			at.Store(script.Start.Add(time.Duration(call.AtMS) * time.Millisecond).UnixNano())
			replayPeerCall(t, c, &call)
		}
	})
	t.Run("redis", func(t *testing.T) {
		if testing.Short() {
			t.Skip("needs redis-server")
		}
		c := peerClient(t, redisStore(t, "peer"), time.Now)
		for _, call := range script.Calls {
			if !call.SameSecond {
				replayPeerCall(t, c, &call)
			}
		}
	})
}

// redisStore is a store on a fresh redis-server, its keys under prefix.
func redisStore(t *testing.T, prefix string) store.Store {
	srv := redistest.Start(t)
	client, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return store.NewRedisStore(client, store.RedisStoreOptions{KeyPrefix: prefix})
}

// peerClient serves the peer's files with the default configuration on st.
func peerClient(t *testing.T, st store.Store, now func() time.Time) rlsv3.RateLimitServiceClient {
	lim, cat := filesLimiter(t, st, limit.Options{Now: now}, nil)
	return rlsv3.NewRateLimitServiceClient(start(t, Config{ConfigFiles: peerFiles}, lim, cat))
}

// filesLimiter is a limiter on st with the default configuration, changed
// by mod (when not nil), and opts with a catalog of its own.
func filesLimiter(t *testing.T, st store.Store, opts limit.Options, mod func(*limit.Config)) (*limit.Limiter, *catalog.Catalog) {
	var cfg limit.Config
	cfg.SetDefaults()
	cfg.StoreTimeout = time.Second // the race detector slows every call
	if mod != nil {
		mod(&cfg)
	}
	cat, err := catalog.NewCatalog(nil, nil, nil)
	require.NoError(t, err)
	opts.Catalog = cat
	lim, err := limit.NewLimiter(cfg, st, opts)
	require.NoError(t, err)
	t.Cleanup(lim.Close)
	return lim, cat
}

// replayPeerCall makes one call and reports each way its answer differs
// from the peer's.
func replayPeerCall(t *testing.T, c rlsv3.RateLimitServiceClient, call *peerCall) {
	t.Helper()
	var req rlsv3.RateLimitRequest
	require.NoError(t, protojson.Unmarshal(call.Request, &req), call.Name)
	resp, err := c.ShouldRateLimit(context.Background(), &req)
	if call.Error != nil {
		st, _ := status.FromError(err)
		if err == nil || st.Code().String() != call.Error.Code || st.Message() != call.Error.Message {
			t.Errorf("%s: peer error %s %q; Sentinel %s", call.Name, call.Error.Code, call.Error.Message, describeAnswer(resp, err))
		}
		return
	}
	var want rlsv3.RateLimitResponse
	require.NoError(t, protojson.Unmarshal(call.Answer, &want), call.Name)
	if err != nil {
		t.Errorf("%s: peer %s; Sentinel %s", call.Name, describeAnswer(&want, nil), describeAnswer(nil, err))
		return
	}
	if call.Differs != "" {
		want.OverallCode = resp.OverallCode
		for i, w := range want.Statuses {
			if i < len(resp.Statuses) {
				w.Code, w.LimitRemaining = resp.Statuses[i].Code, resp.Statuses[i].LimitRemaining
			}
		}
	}
	if diffs := answerDiffs(&want, resp); len(diffs) > 0 {
		t.Errorf("%s: %s\n\tpeer     %s\n\tSentinel %s", call.Name, strings.Join(diffs, "; "), describeAnswer(&want, nil), describeAnswer(resp, nil))
	}
}

// answerDiffs lists how got differs from the peer's want.
func answerDiffs(want, got *rlsv3.RateLimitResponse) []string {
	var diffs []string
	if want.OverallCode != got.OverallCode {
		diffs = append(diffs, "overall code")
	}
	if len(want.ResponseHeadersToAdd) != len(got.ResponseHeadersToAdd) {
		diffs = append(diffs, "response headers")
	}
	if len(want.Statuses) != len(got.Statuses) {
		return append(diffs, "number of statuses")
	}
	for i, w := range want.Statuses {
		g := got.Statuses[i]
		p := fmt.Sprintf("statuses[%d].", i)
		if w.Code != g.Code {
			diffs = append(diffs, p+"code")
		}
		if w.LimitRemaining != g.LimitRemaining {
			diffs = append(diffs, p+"limit_remaining")
		}
		wl, gl := w.CurrentLimit, g.CurrentLimit
		if (wl == nil) != (gl == nil) || wl.GetRequestsPerUnit() != gl.GetRequestsPerUnit() || wl.GetUnit() != gl.GetUnit() || wl.GetName() != gl.GetName() {
			diffs = append(diffs, p+"current_limit")
		}
		if (w.DurationUntilReset == nil) != (g.DurationUntilReset == nil) {
			diffs = append(diffs, p+"duration_until_reset set")
		} else if g.DurationUntilReset != nil {
			longest, _ := longestUnit(g.GetCurrentLimit().GetUnit())
			// 0 only for a whole budget: nothing to reset.
			whole := g.LimitRemaining == g.GetCurrentLimit().GetRequestsPerUnit()
			if d := g.DurationUntilReset.AsDuration(); d < 0 || (d == 0 && !whole) || d > longest {
				diffs = append(diffs, p+"duration_until_reset out of (0, "+longest.String()+"]")
			}
		}
	}
	return diffs
}

// longestUnit is the longest a unit's window can be: a calendar month or
// year at its longest.
func longestUnit(u rlsv3.RateLimitResponse_RateLimit_Unit) (time.Duration, bool) {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 31 * 24 * time.Hour, true
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 366 * 24 * time.Hour, true
	}
	return unitLength(u)
}

// describeAnswer is a one-line form of an answer: the overall code, then
// each status's code, requests per unit and unit, name, remaining and
// duration until reset.
func describeAnswer(resp *rlsv3.RateLimitResponse, err error) string {
	if err != nil {
		st, _ := status.FromError(err)
		return fmt.Sprintf("error %s %q", st.Code(), st.Message())
	}
	var b strings.Builder
	b.WriteString(resp.OverallCode.String())
	for _, st := range resp.Statuses {
		b.WriteString(" [" + st.Code.String())
		if l := st.CurrentLimit; l != nil {
			fmt.Fprintf(&b, " %d/%s", l.RequestsPerUnit, l.Unit)
			if l.Name != "" {
				fmt.Fprintf(&b, " %q", l.Name)
			}
		}
		fmt.Fprintf(&b, " rem %d", st.LimitRemaining)
		if st.DurationUntilReset != nil {
			fmt.Fprintf(&b, " reset %s", st.DurationUntilReset.AsDuration())
		}
		b.WriteString("]")
	}
	if n := len(resp.ResponseHeadersToAdd); n > 0 {
		fmt.Fprintf(&b, " +%d headers", n)
	}
	return b.String()
}

// recordPeerAnswers sends the script's calls to the peer at addr and
// writes its answers into calls.json.
func recordPeerAnswers(t *testing.T, script *peerScript, addr string) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	for i := range script.Calls {
		call := &script.Calls[i]
		waitForBoundary(call.Align)
		if i == 0 {
			script.Start = time.Now().UTC()
		}
		call.AtMS = time.Since(script.Start).Milliseconds()
		var req rlsv3.RateLimitRequest
		require.NoError(t, protojson.Unmarshal(call.Request, &req), call.Name)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.ShouldRateLimit(ctx, &req)
		cancel()
		call.Answer, call.Error = nil, nil
		if err != nil {
			st, _ := status.FromError(err)
			call.Error = &peerError{Code: st.Code().String(), Message: st.Message()}
		} else {
			call.Answer, err = protojson.Marshal(resp)
			require.NoError(t, err)
		}
		t.Logf("%s: %s", call.Name, describeAnswer(resp, err))
	}
	out, err := json.MarshalIndent(script, "", " ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(peerCalls, append(out, '\n'), 0o644))
}

// waitForBoundary sleeps until just after the next minute or second.
func waitForBoundary(align string) {
	var unit, after time.Duration
	switch align {
	case "minute":
		unit, after = time.Minute, 300*time.Millisecond
	case "second":
		unit, after = time.Second, 20*time.Millisecond
	default:
		return
	}
	now := time.Now()
	time.Sleep(now.Truncate(unit).Add(unit + after).Sub(now))
}
