package reply

import (
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit"
)

// RateLimitHeaderNames are the rate-limit headers as the docs spell them,
// in the order AppendRateLimitValue numbers them: the IETF draft's
// RateLimit-Policy and RateLimit fields (draft-ietf-httpapi-ratelimit-headers),
// then X-RateLimit-Limit, -Remaining and -Retry-After-Ms.
//
// RateLimit-Policy is a structured-field list with one item per limit that
// applied to the answer, its name a string (LimitName) with the quota q and
// the window w in seconds: "tenant";q=300;w=1, "rule";q=20. A token bucket
// that never refills has no window (the draft's w is a non-zero interval),
// so its item has no w; a calendar quota's w is its current period's
// length. RateLimit is the one item of the most restrictive of them (the
// one the X-RateLimit-* fields describe): its remaining r and the seconds t
// until more quota comes. On a refusal t is Retry-After's value, as the
// draft asks of the two fields (they name the same point in time); on an
// answer that passed it is the time until the budget is whole, never
// beyond the window. t is left out when no more ever comes.
// No partition key (pk) is sent: the limits' keys (a client IP, an API key,
// a tenant) are the client's own, and the names tell the limits apart.
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
		return appendPolicyList(b, d)
	case 1:
		b = appendSFString(b, LimitName(&limit.Applied{Scope: d.Scope, Name: d.Name}))
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
		if t := resetSeconds(d); t >= 0 {
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, t, 10)
		}
		return b
	case 2:
		return strconv.AppendInt(b, d.Limit, 10)
	case 3:
		return strconv.AppendInt(b, max(d.Remaining, 0), 10)
	}
	return strconv.AppendInt(b, RetryAfterMillis(d.RetryAfter), 10)
}

// resetSeconds is RateLimit's t for d: a refusal's Retry-After (a sliding
// window's retry may end past the window, and a client that retried at a
// t cut to the window would be refused again), else the time until the
// budget is whole, in whole seconds and at most the window; -1 when more
// never comes (a refusal with no retry, or a token bucket that never
// refills, which has no window).
func resetSeconds(d *limit.Decision) int64 {
	if !d.Allowed {
		return retryAfterSeconds(d.RetryAfter)
	}
	if d.Window <= 0 || d.Reset < 0 {
		return -1
	}
	return min(ceilSeconds(d.Reset), ceilSeconds(d.Window))
}

// retryAfterSeconds is Retry-After's value for a refusal's retry-after:
// whole seconds, rounded up, at least 1; -1 when more never comes.
func retryAfterSeconds(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return max(1, ceilSeconds(d))
}

// appendSFString appends s as a structured-field string: printable ASCII,
// '"' and '\' escaped; any other byte (a name from the configuration may
// hold one) becomes '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// HeaderSet is which of the rate-limit headers an answer carries.
type HeaderSet uint8

// The header sets: the IETF draft's (RateLimit-Policy, RateLimit), the
// older X-RateLimit-* ones (Limit, Remaining, Retry-After-Ms), both, or
// none.
const (
	DraftHeaders HeaderSet = 1 << iota
	LegacyHeaders
	AllHeaders           = DraftHeaders | LegacyHeaders
	NoHeaders  HeaderSet = 0
)

// draftHeaders is how many of RateLimitHeaderNames the draft's are (the
// first ones).
const draftHeaders = 2

// Set sets the rate-limit headers of hs of a decision. It allocates
// nothing while the policy list fits its buffer (eight limits with names
// of 40 bytes).
func (hs HeaderSet) Set(h *fasthttp.ResponseHeader, d *limit.Decision) {
	from, to := 0, len(rateLimitKeys)
	if hs&DraftHeaders == 0 {
		from = draftHeaders
	}
	if hs&LegacyHeaders == 0 {
		to = draftHeaders
	}
	var buf [512]byte
	for i := from; i < to; i++ {
		h.SetCanonical(rateLimitKeys[i], AppendRateLimitValue(buf[:0], i, d))
	}
}

// SetRateLimitHeaders sets all the rate-limit headers of a decision (the
// check API's answers; the proxy's carry server.rate_limit_headers').
func SetRateLimitHeaders(h *fasthttp.ResponseHeader, d *limit.Decision) {
	AllHeaders.Set(h, d)
}

// SetRetryAfter sets Retry-After of a refusal in whole seconds, at least 1,
// and leaves it out when the budget never comes back (a token bucket with
// refill 0). It allocates nothing.
func SetRetryAfter(h *fasthttp.ResponseHeader, d *limit.Decision) {
	s := retryAfterSeconds(d.RetryAfter)
	if s < 0 {
		return
	}
	var buf [20]byte
	h.SetCanonical(keyRetryAfter, strconv.AppendInt(buf[:0], s, 10))
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

// AppendRefusal appends the fields of a refusal's JSON body that say what
// refused and when to retry, without the braces:
// "scope":"policy","policy":"bids-per-user","window":"1m","limit":20,"retry_after_ms":412.
// policy names a policy (a policy of several limits is named without the
// window its limit is known by in RateLimit-Policy), limit_name a named
// Limit; window is the limit's window as configured ("1m", "1h30m"; whole
// days as "30d", a calendar quota's current period) and is left out for a
// token bucket that never refills. It allocates nothing.
func AppendRefusal(b []byte, d *limit.Decision) []byte {
	b = append(b, `"scope":`...)
	b = AppendJSONString(b, d.Scope.String())
	if d.Name != "" {
		switch d.Scope {
		case limit.ScopePolicy:
			name, _, _ := strings.Cut(d.Name, "/")
			b = append(b, `,"policy":`...)
			b = AppendJSONString(b, name)
		case limit.ScopeLimit:
			b = append(b, `,"limit_name":`...)
			b = AppendJSONString(b, d.Name)
		}
	}
	if d.Window > 0 {
		b = append(b, `,"window":"`...)
		b = AppendWindow(b, d.Window)
		b = append(b, '"')
	}
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, `,"retry_after_ms":`...)
	return strconv.AppendInt(b, RetryAfterMillis(d.RetryAfter), 10)
}

// AppendWindow appends a limit's window as a person configures it: whole
// days as "7d" and "30d" (a calendar quota's period), others as
// confutil.AppendDuration writes them ("1m", "10s", "1h30m").
func AppendWindow(b []byte, w time.Duration) []byte {
	const day = 24 * time.Hour
	if w >= day && w%day == 0 {
		b = strconv.AppendInt(b, int64(w/day), 10)
		return append(b, 'd')
	}
	return confutil.AppendDuration(b, w)
}
