package cost

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
)

// Sink and sink keep the compiler from dropping what the tests and the
// parallel benchmarks compute.
var (
	Sink int64
	sink atomic.Int64
)

// sseStream is an OpenAI-style chat completion stream of n content chunks
// of about 150 bytes, a usage chunk and [DONE].
func sseStream(n int) []byte {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "data: {\"id\":\"chatcmpl-9x\",\"object\":\"chat.completion.chunk\",\"created\":1717000000,"+
			"\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%03d\"}}],\"usage\":null}\n\n", i)
	}
	b.WriteString(`data: {"id":"chatcmpl-9x","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":200,"total_tokens":205}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return []byte(b.String())
}

// jsonAnswer is a 4 KB chat completion with usage at its end.
func jsonAnswer() []byte {
	content := strings.Repeat(`Some text with \"quotes\", {braces} and [brackets]. `, 70)
	return []byte(`{"id":"chatcmpl-9x","object":"chat.completion","created":1717000000,"model":"m",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"` + content + `"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":5,"completion_tokens":200,"total_tokens":205}}`)
}

// chunks splits b into pieces of size bytes, as a proxy's copy buffer
// would pass them.
func chunks(b []byte, size int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := min(len(b), size)
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

func benchMeter(b *testing.B, a *Actual, ct string, body []byte, size int) {
	parts := chunks(body, size)
	if v := read(b, a, ct, parts...); v <= 0 {
		b.Fatalf("the answer gives %d", v)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var m Meter
		var sum int64
		for pb.Next() {
			m.Reset(a, []byte(ct))
			for _, p := range parts {
				_, _ = m.Write(p)
			}
			v, _ := m.Value()
			sum += v
		}
		sink.Add(sum)
	})
}

func BenchmarkMeterSSE(b *testing.B) {
	benchMeter(b, &Actual{SSE: "usage.total_tokens"}, "text/event-stream", sseStream(200), 150)
}

func BenchmarkMeterJSON(b *testing.B) {
	benchMeter(b, &Actual{JSON: "usage.total_tokens"}, "application/json", jsonAnswer(), 4096)
}

// BenchmarkMeterJSONStdlib is the baseline: encoding/json decoding the
// whole answer, which must first be kept in memory.
func BenchmarkMeterJSONStdlib(b *testing.B) {
	body := jsonAnswer()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var v struct {
				Usage struct {
					TotalTokens int64 `json:"total_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(body, &v); err != nil || v.Usage.TotalTokens == 0 {
				b.Error("no value")
			}
		}
	})
}

func BenchmarkEstimate(b *testing.B) {
	hv := []byte("250")
	header := func(string) []byte { return hv }
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":256,"stream":true}`)
	for _, tc := range []struct {
		name string
		e    Estimate
	}{{"fixed", Estimate{Fixed: 1}}, {"header", Estimate{Header: "X-Max-Tokens", Max: 400}}, {"json", Estimate{JSON: "max_tokens", Max: 400}}} {
		e := tc.e
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var sum int64
				for pb.Next() {
					sum += e.Of(header, body, int64(len(body)))
				}
				sink.Add(sum)
			})
		})
	}
}
