//go:build !race

package reply

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
)

// TestAnswersAllocateNothing: the proxy's request path calls these on every
// limited answer.
func TestAnswersAllocateNothing(t *testing.T) {
	var ctx fasthttp.RequestCtx
	d := limit.Decision{Limit: 100, Remaining: 7, Window: time.Second, Reset: time.Second, RetryAfter: time.Second}
	for i, name := range []string{"", "", "a-policy-with-a-forty-byte-long-name-abc", "daily"} {
		d.Applied[i] = limit.Applied{Scope: limit.Scope(i + 1), Name: name, Limit: 100, Window: time.Duration(i) * time.Hour}
	}
	d.NApplied = 4
	buf := make([]byte, 0, 256)
	id := []byte("0123456789abcdef")
	run := func() {
		ctx.Response.Reset()
		SetRateLimitHeaders(&ctx.Response.Header, &d)
		SetRetryAfter(&ctx.Response.Header, &d)
		buf = Problem{Msg: "rate limit exceeded é", RequestID: id}.Write(&ctx, fasthttp.StatusTooManyRequests, buf)
	}
	run()
	if n := testing.AllocsPerRun(1000, run); n != 0 {
		t.Fatalf("%.1f allocations per answer", n)
	}
}
