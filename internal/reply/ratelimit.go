package reply

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
)

// RateLimitHeaderNames are the rate-limit headers as the docs spell them,
// in the order AppendRateLimitValue numbers them: the IETF draft's
// RateLimit-Policy and RateLimit fields (draft-ietf-httpapi-ratelimit-headers:
// policy "sentinel", or the deciding policy's name, with quota q and window
// w in seconds; remaining r and seconds to reset t), then X-RateLimit-Limit, -Remaining and -Retry-After-Ms.
var RateLimitHeaderNames = [...]string{
	"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Retry-After-Ms",
}

// rateLimitKeys are the same names in fasthttp's canonical form, set without
// normalizing them again on every answer.
var rateLimitKeys = func() (k [len(RateLimitHeaderNames)][]byte) {
	for i, n := range RateLimitHeaderNames {
		k[i] = fasthttp.AppendNormalizedHeaderKey(nil, n)
	}
	return k
}()

var keyRetryAfter = fasthttp.AppendNormalizedHeaderKey(nil, fasthttp.HeaderRetryAfter)

// AppendRateLimitValue appends the value of the rate-limit header
// RateLimitHeaderNames[i] for the decision d to b.
func AppendRateLimitValue(b []byte, i int, d *limit.Decision) []byte {
	switch i {
	case 0:
		b = appendPolicyName(b, d)
		b = append(b, `;q=`...)
		b = strconv.AppendInt(b, d.Limit, 10)
		b = append(b, ";w="...)
		return strconv.AppendInt(b, ceilSeconds(d.Window), 10)
	case 1:
		b = appendPolicyName(b, d)
		b = append(b, `;r=`...)
		b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
		b = append(b, ";t="...)
		return strconv.AppendInt(b, ceilSeconds(d.Reset), 10)
	case 2:
		return strconv.AppendInt(b, d.Limit, 10)
	case 3:
		return strconv.AppendInt(b, max(d.Remaining, 0), 10)
	}
	return strconv.AppendInt(b, RetryAfterMillis(d.RetryAfter), 10)
}

// appendPolicyName appends the item name of the RateLimit fields: the
// policy that decided (its names need no escaping in a structured-field
// string), or "sentinel" for the other limits.
func appendPolicyName(b []byte, d *limit.Decision) []byte {
	if d.Scope != limit.ScopePolicy || d.Name == "" {
		return append(b, `"sentinel"`...)
	}
	b = append(b, '"')
	b = append(b, d.Name...)
	return append(b, '"')
}

// SetRateLimitHeaders sets the rate-limit headers of a decision, on proxied
// answers and on check API answers. It allocates nothing.
func SetRateLimitHeaders(h *fasthttp.ResponseHeader, d *limit.Decision) {
	var buf [128]byte // room for a policy's name
	for i, k := range rateLimitKeys {
		h.SetCanonical(k, AppendRateLimitValue(buf[:0], i, d))
	}
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

// LimitName is the name of a limit in answers: a Limit's or a policy's
// Name, or the scope of a derived limit (ip, api_key, tenant, rule).
func LimitName(a *limit.Applied) string {
	if (a.Scope == limit.ScopeLimit || a.Scope == limit.ScopePolicy) && a.Name != "" {
		return a.Name
	}
	return a.Scope.String()
}
