package reply

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
)

func TestSetRateLimitHeaders(t *testing.T) {
	var h fasthttp.ResponseHeader
	d := limit.Decision{Scope: limit.ScopeTenant, Limit: 100, Remaining: -3, Window: 1500 * time.Millisecond, Reset: 200 * time.Millisecond, RetryAfter: 1001 * time.Microsecond}
	SetRateLimitHeaders(&h, &d)
	assert.Equal(t, `"tenant";q=100;w=2`, string(h.Peek("RateLimit-Policy")), "a decision that lists no limits: its own")
	assert.Equal(t, `"tenant";r=0;t=1`, string(h.Peek("RateLimit")), "a refusal: its retry-after")
	assert.Equal(t, "100", string(h.Peek("X-RateLimit-Limit")))
	assert.Equal(t, "0", string(h.Peek("X-RateLimit-Remaining")))
	assert.Equal(t, "2", string(h.Peek("X-RateLimit-Retry-After-Ms")))

	d.RetryAfter = -1
	SetRateLimitHeaders(&h, &d)
	assert.Equal(t, "-1", string(h.Peek("X-RateLimit-Retry-After-Ms")), "never")
	assert.Equal(t, `"tenant";r=0`, string(h.Peek("RateLimit")), "no t when more never comes")
}

// TestHeaderSets: each set writes its headers, with the values all of
// them have, and no other.
func TestHeaderSets(t *testing.T) {
	d := limit.Decision{Allowed: true, Scope: limit.ScopeTenant, Limit: 100, Remaining: 40, Window: time.Second, Reset: 300 * time.Millisecond}
	var all fasthttp.ResponseHeader
	AllHeaders.Set(&all, &d)
	draft := RateLimitHeaderNames[:draftHeaders]
	legacy := RateLimitHeaderNames[draftHeaders:]
	for _, c := range []struct {
		set       HeaderSet
		with, out []string
	}{
		{AllHeaders, RateLimitHeaderNames[:], nil},
		{DraftHeaders, draft, legacy},
		{LegacyHeaders, legacy, draft},
		{NoHeaders, nil, RateLimitHeaderNames[:]},
	} {
		var h fasthttp.ResponseHeader
		c.set.Set(&h, &d)
		for _, n := range c.with {
			assert.Equal(t, string(all.Peek(n)), string(h.Peek(n)), "set %d: %s", c.set, n)
			assert.NotEmpty(t, h.Peek(n), "set %d: %s", c.set, n)
		}
		for _, n := range c.out {
			assert.Nil(t, h.Peek(n), "set %d: %s", c.set, n)
		}
	}
	assert.Equal(t, []string{"RateLimit-Policy", "RateLimit"}, draft)
}

// TestRateLimitListsEveryLimit: RateLimit-Policy has an item per limit that
// applied, each with its name, q and w (none for a bucket that never
// refills); RateLimit the most restrictive one's r and t, t at most its
// window.
func TestRateLimitListsEveryLimit(t *testing.T) {
	d := limit.Decision{Allowed: true, Scope: limit.ScopeRule, Limit: 20, Remaining: 3, Window: 10 * time.Second, Reset: 25 * time.Second}
	withApplied(&d,
		limit.Applied{Scope: limit.ScopeRule, Limit: 20, Remaining: 3, Window: 10 * time.Second},
		limit.Applied{Scope: limit.ScopeTenant, Limit: 300, Remaining: 250, Window: time.Second},
		limit.Applied{Scope: limit.ScopePolicy, Name: `bi"ds\é`, Limit: 5},
		limit.Applied{Scope: limit.ScopeLimit, Name: "daily", Limit: 1000, Window: 24 * time.Hour})
	var h fasthttp.ResponseHeader
	SetRateLimitHeaders(&h, &d)
	assert.Equal(t, `"rule";q=20;w=10, "tenant";q=300;w=1, "bi\"ds\\??";q=5, "daily";q=1000;w=86400`, string(h.Peek("RateLimit-Policy")))
	assert.Equal(t, `"rule";r=3;t=10`, string(h.Peek("RateLimit")), "t never beyond the window")
	assert.Equal(t, "20", string(h.Peek("X-RateLimit-Limit")))
	assert.Equal(t, "3", string(h.Peek("X-RateLimit-Remaining")))

	d = limit.Decision{Allowed: true, Shadowed: true, Scope: limit.ScopeIP, Limit: 5, Remaining: 0, Window: time.Minute, Reset: 30 * time.Second}
	SetRateLimitHeaders(&h, &d)
	assert.Equal(t, `"ip";r=0;t=30`, string(h.Peek("RateLimit")), "a shadow answer shows the real remaining")
}

// withApplied lists as in d's applied limits.
func withApplied(d *limit.Decision, as ...limit.Applied) {
	d.NApplied = copy(d.Applied[:], as)
}

func TestSetRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		after time.Duration
		want  string
	}{{0, "1"}, {10 * time.Millisecond, "1"}, {2100 * time.Millisecond, "3"}, {-1, ""}} {
		var h fasthttp.ResponseHeader
		SetRetryAfter(&h, &limit.Decision{RetryAfter: tc.after})
		assert.Equal(t, tc.want, string(h.Peek("Retry-After")), tc.after)
	}
}

func TestProblemJSON(t *testing.T) {
	for _, tc := range []struct {
		p    Problem
		want string
	}{
		{Problem{Msg: "no route"}, `{"error":"no route"}`},
		{Problem{Msg: "no route", RequestID: []byte{}}, `{"error":"no route","request_id":""}`},
		{Problem{Msg: "no route", RequestID: []byte("r-1")}, `{"error":"no route","request_id":"r-1"}`},
		{Problem{Field: "tokens_requested", Msg: "must be between 1 and 10"},
			`{"error":"tokens_requested: must be between 1 and 10","field":"tokens_requested"}`},
		{Problem{Field: "plan", Msg: `"GOLD" is not a plan`}, `{"error":"plan: \"GOLD\" is not a plan","field":"plan"}`},
		{Problem{Msg: "a\\b\nc\xffé"}, `{"error":"a\\b c\ufffdé"}`},
	} {
		assert.Equal(t, tc.want+"\n", string(tc.p.AppendJSON(nil)))
	}
}

func TestProblemWrite(t *testing.T) {
	var ctx fasthttp.RequestCtx
	buf := Problem{Field: "body", Msg: "empty"}.Write(&ctx, fasthttp.StatusBadRequest, make([]byte, 0, 64))
	assert.Equal(t, fasthttp.StatusBadRequest, ctx.Response.StatusCode())
	assert.Equal(t, "application/json", string(ctx.Response.Header.ContentType()))
	assert.Equal(t, string(buf), string(ctx.Response.Body()))
	assert.Equal(t, 64, cap(buf), "the buffer is reused")
}

// FuzzAppendJSONString: any input gives one valid JSON string, which
// decodes to the input for printable UTF-8.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "abc", `"\`, "\x00\x1f\x7f", "é€😀", "\xff\xfe", "\xe2\x82", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := AppendJSONString(nil, s)
		require.True(t, utf8.Valid(b), "%q", b)
		var got string
		require.NoError(t, json.Unmarshal(b, &got), "%q", b)
		assert.Equal(t, string(AppendJSONString(nil, []byte(s))), string(b), "string and []byte agree")
		printable := utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 })
		if printable {
			assert.Equal(t, s, got)
		}
	})
}

// TestRetryAfterAndTAgree: a refusal's RateLimit t is Retry-After's value,
// even when the retry ends past the window (a sliding window's can), as
// the draft asks of the two fields.
func TestRetryAfterAndTAgree(t *testing.T) {
	for _, ra := range []time.Duration{0, time.Millisecond, 10300 * time.Millisecond, 25 * time.Second} {
		var h fasthttp.ResponseHeader
		d := limit.Decision{Scope: limit.ScopeRule, Limit: 5, Window: 10 * time.Second, RetryAfter: ra}
		SetRateLimitHeaders(&h, &d)
		SetRetryAfter(&h, &d)
		rl := string(h.Peek("RateLimit"))
		assert.Equal(t, `"rule";r=0;t=`+string(h.Peek("Retry-After")), rl, "retry after %v", ra)
	}
}

// TestRefusalBody: the refusal's fields name the policy without its
// window suffix, and windows are written as configured.
func TestRefusalBody(t *testing.T) {
	d := limit.Decision{Scope: limit.ScopePolicy, Name: "bids-per-user/1m", Limit: 20, Window: time.Minute, RetryAfter: 412 * time.Millisecond}
	assert.Equal(t, `"scope":"policy","policy":"bids-per-user","window":"1m","limit":20,"retry_after_ms":412`, string(AppendRefusal(nil, &d)))
	d = limit.Decision{Scope: limit.ScopeRule, Limit: 5, Window: 30 * 24 * time.Hour, RetryAfter: -1}
	assert.Equal(t, `"scope":"rule","window":"30d","limit":5,"retry_after_ms":-1`, string(AppendRefusal(nil, &d)))
	d = limit.Decision{Scope: limit.ScopeLimit, Name: "uploads", Limit: 5, Window: 90 * time.Minute}
	assert.Equal(t, `"scope":"limit","limit_name":"uploads","window":"1h30m","limit":5,"retry_after_ms":0`, string(AppendRefusal(nil, &d)))
}
