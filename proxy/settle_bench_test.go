package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/cost"
)

// chatStream is a streamed chat completion as an OpenAI-style API sends
// it with its usage asked for: events chunks of about 190 bytes, then the
// usage event (total_tokens: usage) and [DONE].
func chatStream(events, usage int) []byte {
	var b bytes.Buffer
	for i := range events {
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-A1b2C3","object":"chat.completion.chunk","created":1717000000,"model":"gpt-4o-mini",`+
			`"choices":[{"index":0,"delta":{"content":" tok%03d"},"finish_reason":null}],"usage":null}`+"\n\n", i)
	}
	fmt.Fprintf(&b, `data: {"id":"chatcmpl-A1b2C3","object":"chat.completion.chunk","created":1717000000,"model":"gpt-4o-mini",`+
		`"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", usage-12, usage)
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// lastSettled is a Settler that keeps the last actual cost it was given.
type lastSettled struct{ actual int64 }

func (s *lastSettled) Settle(_ *limit.Reservation, actual int64) { s.actual = actual }
func (s *lastSettled) ReadsBody(string) bool                     { return false }
func (s *lastSettled) Wait(context.Context, *limit.Request, *limit.Decision, time.Time) bool {
	return false
}

// BenchmarkStreamedUsage reads a streamed answer's usage as the proxy
// does: a 200-event SSE answer (about 40 KB) read in 4 KB pieces, each
// copied on to the client (io.Discard here) and, in metered, written to a
// settlement too, which settles the reservation at the usage event's
// total_tokens when the stream ends. copy is the floor: the same reads
// without metering.
func BenchmarkStreamedUsage(b *testing.B) {
	body := chatStream(200, 4212)
	ct := []byte("text/event-stream; charset=utf-8")
	m := &catalog.Metered{Cost: &cost.Cost{
		Estimate: cost.Estimate{Header: "X-Max-Tokens", Default: 100, Max: 8000},
		Actual:   cost.Actual{SSE: "usage.total_tokens"},
	}}
	for _, metered := range []bool{false, true} {
		name := "copy"
		if metered {
			name = "metered"
		}
		b.Run(name, func(b *testing.B) {
			settler := &lastSettled{}
			buf := make([]byte, 4096)
			var rd bytes.Reader
			answer := func() {
				r := limit.Reservation{N: 8000, Meter: m}
				var st *settlement
				if metered {
					st = acquireSettlement(settler)
					st.add(&r, ct)
				}
				rd.Reset(body)
				for {
					n, err := rd.Read(buf)
					_, _ = io.Discard.Write(buf[:n])
					if st != nil {
						_, _ = st.Write(buf[:n])
					}
					if err == io.EOF {
						break
					}
				}
				if st != nil {
					st.End(true)
				}
			}
			answer()
			if want := int64(4212); metered && settler.actual != want {
				b.Fatalf("settled at %d, want %d", settler.actual, want)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				answer()
			}
		})
	}
}
