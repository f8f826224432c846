package main

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePhases(t *testing.T) {
	ps, err := parsePhases("a.warm:10s:P=20,S=5,F=1;a.spike:2s:F=1000,A=5:http://127.0.0.1:1/x?y=1&z=2;e.saturate:3s:C=64")
	require.NoError(t, err)
	require.Len(t, ps, 3)
	assert.Equal(t, [3]float64{20, 5, 1}, ps[0].rates)
	assert.Equal(t, 2*time.Second, ps[1].duration)
	assert.Equal(t, 5.0, ps[1].attack)
	assert.Equal(t, "http://127.0.0.1:1/x?y=1&z=2", ps[1].hook)
	assert.Equal(t, "a", ps[1].group())
	assert.Equal(t, "spike", ps[1].role())
	assert.Equal(t, 64, ps[2].closed)
	for _, bad := range []string{"x", "a:zz:P=1", "a:1s:Q=1", "a:1s:P=-1", "a:1s:C=1.5"} {
		_, err := parsePhases(bad)
		assert.Error(t, err, bad)
	}
}

func TestTallyAndQuantile(t *testing.T) {
	tl := newTally()
	tl.add(200, false, 10*time.Millisecond, 0)
	tl.add(200, false, 30*time.Millisecond, 0)
	tl.add(429, true, time.Millisecond, 2*time.Second)
	tl.add(503, true, time.Millisecond, time.Second)
	tl.add(503, false, time.Millisecond, 0)
	tl.add(0, false, 0, 0)
	tl.drop(3 * time.Second)
	assert.EqualValues(t, 2, tl.ok)
	assert.EqualValues(t, 1, tl.limited)
	assert.EqualValues(t, 1, tl.shed)
	assert.EqualValues(t, 1, tl.upstream5xx)
	assert.EqualValues(t, 1, tl.errors)
	assert.EqualValues(t, 1, tl.dropped)
	assert.Equal(t, time.Second, tl.firstShed)
	assert.Equal(t, 3*time.Second, tl.lastFail)
	assert.Equal(t, 30*time.Millisecond, quantile(tl.latencies, 0.99))
	assert.Equal(t, time.Duration(0), quantile(nil, 0.5))
}

func TestFullAfter(t *testing.T) {
	o := outcome{phase: phase{duration: 8 * time.Second}}
	for i := range o.plans {
		o.plans[i] = newTally()
	}
	d, ok := o.fullAfter()
	assert.True(t, ok)
	assert.Zero(t, d)
	o.plans[1].add(503, true, 0, 1500*time.Millisecond)
	o.plans[2].add(503, true, 0, 2500*time.Millisecond)
	d, ok = o.fullAfter()
	assert.True(t, ok)
	assert.Equal(t, 2500*time.Millisecond, d)
	o.plans[0].add(0, false, 0, 7500*time.Millisecond)
	_, ok = o.fullAfter()
	assert.False(t, ok, "failing into the last second: not recovered")
}

func TestGatewayChange(t *testing.T) {
	before := parseMetrics(`sentinel_shed_total{upstream="api",plan="FREE",reason="concurrency"} 5
sentinel_adaptive_mode_transitions_total{from="normal",to="moderate"} 1
sentinel_adaptive_mode 0
`)
	after := parseMetrics(`# HELP x
sentinel_shed_total{upstream="api",plan="FREE",reason="concurrency"} 12
sentinel_shed_total{upstream="api",plan="STANDARD",reason="queue_timeout"} 2
sentinel_proxy_rejections_total{reason="mode_free_blocked"} 4
sentinel_upstream_ejections_total{upstream="api",target="http://127.0.0.1:1"} 1
sentinel_upstream_breaker_transitions_total{upstream="api",target="http://127.0.0.1:1",to="open"} 2
sentinel_upstream_breaker_transitions_total{upstream="api",target="http://127.0.0.1:1",to="half_open"} 2
sentinel_adaptive_mode_transitions_total{from="normal",to="moderate"} 2
sentinel_adaptive_mode_transitions_total{from="moderate",to="aggressive"} 1
sentinel_adaptive_mode_transitions_total{from="aggressive",to="moderate"} 1
sentinel_proxy_client_faults_total{kind="malformed"} 3
sentinel_adaptive_mode 1
`)
	d := gatewayChange(before, after)
	require.True(t, d.ok)
	assert.Equal(t, "concurrency=7 queue_timeout=2", d.sheds)
	assert.Equal(t, 9.0, d.shedTotal)
	assert.Equal(t, "mode_free_blocked=4", d.rejections)
	assert.Equal(t, 1.0, d.ejections)
	assert.Equal(t, 2.0, d.trips)
	assert.Equal(t, 2.0, d.modesUp)
	assert.Equal(t, 1.0, d.modesDown)
	assert.Equal(t, 1.0, d.modeEnd)
	assert.Equal(t, "proxy_client_faults{malformed}=3", d.clientFaults)
	assert.False(t, gatewayChange(nil, after).ok)
}

func TestChecks(t *testing.T) {
	mk := func(name string, d time.Duration, ok, sent [3]int64, lat time.Duration) outcome {
		o := outcome{phase: phase{name: name, duration: d}, result: result{compare: newTally(), hostile: newAttackTally()}}
		for i := range o.plans {
			o.plans[i] = newTally()
			o.plans[i].elapsed = d
			o.plans[i].sent = sent[i]
			for range ok[i] {
				o.plans[i].add(200, false, lat, 0)
			}
		}
		o.gw = gatewayDelta{ok: true}
		return o
	}
	outs := []outcome{
		mk("a.warmup", 5*time.Second, [3]int64{100, 100, 100}, [3]int64{100, 100, 100}, 50*time.Millisecond),
		mk("a.spike", 10*time.Second, [3]int64{200, 190, 600}, [3]int64{200, 200, 10000}, 120*time.Millisecond),
		mk("a.recovery", 8*time.Second, [3]int64{160, 160, 160}, [3]int64{160, 160, 160}, 50*time.Millisecond),
	}
	outs[2].plans[2].add(503, true, 0, 2*time.Second)
	got := map[string]string{}
	for _, c := range checks(outs, 100) {
		got[c.target] = c.result
	}
	assert.Equal(t, "PASS", got["goodput ≥ 90% of capacity"])     // 99/s
	assert.Equal(t, "PASS", got["PREMIUM availability ≥ 99.5%"])  // 100%
	assert.Equal(t, "FAIL", got["PREMIUM p99 ≤ 2× unloaded p99"]) // 120 ms > 100 ms
	assert.Equal(t, "PASS", got["STANDARD availability ≥ 95%"])   // 95%
	assert.Equal(t, "PASS", got["every plan fully available ≤ 3s after the spike"])
	assert.Equal(t, "PASS", got["≤ 1 mode change up and ≤ 1 down (spike + recovery)"])
}

// TestAttackFraming checks the bytes the attacker writes: what a server
// reads from each kind.
func TestAttackFraming(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		var b strings.Builder
		for !strings.HasSuffix(b.String(), "\r\n0\r\n\r\n") {
			line, err := r.ReadString('\n')
			if err != nil {
				break
			}
			b.WriteString(line)
		}
		got <- b.String()
		_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
	}()
	o := attackOptions{key: "k", timeout: time.Second}
	assert.Equal(t, "400", o.send(ln.Addr().String(), kindMalformed))
	req := <-got
	assert.Contains(t, req, "Transfer-Encoding: chunked\r\n")
	assert.Contains(t, req, "X-API-Key: k\r\n")
	assert.Contains(t, req, "\r\n\r\nZZ\r\nhello\r\n0\r\n\r\n")
}
