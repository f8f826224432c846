package reply

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
)

// The header names in fasthttp's canonical form, set without normalizing
// them again on every answer.
var (
	keyRateLimitPolicy = canonical("RateLimit-Policy")
	keyRateLimit       = canonical("RateLimit")
	keyXLimit          = canonical("X-RateLimit-Limit")
	keyXRemaining      = canonical("X-RateLimit-Remaining")
	keyXRetryAfterMs   = canonical("X-RateLimit-Retry-After-Ms")
	keyRetryAfter      = canonical(fasthttp.HeaderRetryAfter)
)

func canonical(name string) []byte { return fasthttp.AppendNormalizedHeaderKey(nil, name) }

// SetRateLimitHeaders sets the rate-limit headers of a decision, on proxied
// answers and on check API answers: the IETF draft's RateLimit-Policy and
// RateLimit fields (draft-ietf-httpapi-ratelimit-headers: policy "sentinel"
// with quota q and window w in seconds; remaining r and seconds to reset t)
// and the seed's X-RateLimit-Limit, -Remaining and -Retry-After-Ms. It
// allocates nothing.
func SetRateLimitHeaders(h *fasthttp.ResponseHeader, d *limit.Decision) {
	var buf [64]byte
	b := append(buf[:0], `"sentinel";q=`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, ceilSeconds(d.Window), 10)
	h.SetCanonical(keyRateLimitPolicy, b)

	b = append(buf[:0], `"sentinel";r=`...)
	b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, ceilSeconds(d.Reset), 10)
	h.SetCanonical(keyRateLimit, b)

	h.SetCanonical(keyXLimit, strconv.AppendInt(buf[:0], d.Limit, 10))
	h.SetCanonical(keyXRemaining, strconv.AppendInt(buf[:0], max(d.Remaining, 0), 10))
	h.SetCanonical(keyXRetryAfterMs, strconv.AppendInt(buf[:0], RetryAfterMillis(d.RetryAfter), 10))
}

// SetRetryAfter sets Retry-After of a refusal in whole seconds, at least 1,
// and leaves it out when the budget never comes back (a token bucket with
// refill 0). It allocates nothing.
func SetRetryAfter(h *fasthttp.ResponseHeader, d *limit.Decision) {
	if d.RetryAfter < 0 {
		return
	}
	var buf [20]byte
	h.SetCanonical(keyRetryAfter, strconv.AppendInt(buf[:0], max(1, ceilSeconds(d.RetryAfter)), 10))
}

// RetryAfterMillis is a retry-after in milliseconds, rounded up; -1 means
// never.
func RetryAfterMillis(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return CeilMillis(d)
}

// CeilMillis is d in milliseconds, rounded up; 0 for d ≤ 0.
func CeilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
