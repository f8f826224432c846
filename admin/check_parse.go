package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// Limits of the check API's fields.
const (
	// MaxTokensRequested is the largest tokens_requested one check may ask
	// for; a check is also refused (400) when tokens_requested is over the
	// capacity of a limit that applies to it (see overCapacity).
	MaxTokensRequested = 1_000_000
	// MaxBatchChecks is the largest number of checks in one batch.
	MaxBatchChecks = 100
	maxNameLen     = 128 // tenant_id, resource
	maxKeyLen      = 256 // key, request_id, host
	maxPathLen     = 2048
	maxAttrs       = 64   // headers, query
	maxAttrLen     = 1024 // a header or query value
)

// checkRequest is the body of POST /v1/ratelimit/check.
//
// Key is the limited entity inside the tenant (a user ID or an API key); the limiter treats it as the request's API key, so limits.api_key and
// the tenant's budget apply to it exactly as to a proxied request carrying that
// key. RequestID is trusted (the caller holds the admin token) unless
// identity.trust_request_id is none: sliding_log spares its retries within
// the limiter's allowance.
type checkRequest struct {
	TenantID        string `json:"tenant_id"`
	Resource        string `json:"resource"`
	Key             string `json:"key"`
	TokensRequested *int64 `json:"tokens_requested"`
	RequestID       string `json:"request_id"`
	// Method, Host, Path, Headers and Query describe the request for the
	// policies that match or key on them; absent: those policies do not
	// apply (or do not count the check).
	Method  string            `json:"method"`
	Host    string            `json:"host"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Query   map[string]string `json:"query"`
	// Cost is what the check's cost limits reserve (absent: each limit's
	// estimate, from Headers or its default); ReservationTTL how long the
	// reservation waits for POST /v1/ratelimit/settle (DefaultReservationTTL).
	Cost           *int64 `json:"cost"`
	ReservationTTL string `json:"reservation_ttl"`
}

// ttl is reservation_ttl, valid, with its default.
func (r *checkRequest) ttl() time.Duration {
	d, err := time.ParseDuration(r.ReservationTTL)
	if r.ReservationTTL == "" || err != nil {
		return DefaultReservationTTL
	}
	return d
}

// tokens is tokens_requested with its default of 1.
func (r *checkRequest) tokens() int64 {
	if r.TokensRequested == nil {
		return 1
	}
	return *r.TokensRequested
}

// checkBatch is the body of POST /v1/ratelimit/check/batch.
type checkBatch struct {
	Checks []checkRequest `json:"checks"`
}

// badField is a 400 answer: the field (or "body") and what is wrong.
func badField(field, msg string) *catalog.ValidationError {
	return &catalog.ValidationError{Field: field, Msg: msg}
}

// parseCheck decodes and validates one check request. It accepts exactly one
// JSON object with known fields only.
func parseCheck(body []byte) (checkRequest, *catalog.ValidationError) {
	r, ok := parseCheckFast(body)
	if !ok {
		slow := new(checkRequest) // decodeStrict's argument escapes: kept off the fast path
		if fe := decodeStrict(body, slow); fe != nil {
			return *slow, fe
		}
		r = *slow
	}
	return r, r.validate("")
}

// parseCheckFast decodes the common check body, a flat object of the known
// fields with plain strings and an integer tokens_requested, in one pass and
// one allocation (the fields are substrings of one copy of body), without
// encoding/json's reflection (several times its cost, and most of the check
// API's own). It answers ok only when decodeStrict would decode body to the
// same request without an error; anything else (an escape sequence, a field
// name in another case, null, a float, malformed JSON) is left to
// decodeStrict, which names what is wrong. FuzzCheckParseFast holds the two
// to that.
func parseCheckFast(body []byte) (r checkRequest, ok bool) {
	// A string with an escape, a control character or invalid UTF-8 reads
	// differently to encoding/json (or not at all): those go to decodeStrict.
	if len(body) > MaxBody || bytes.IndexByte(body, '\\') >= 0 || !utf8.Valid(body) {
		return r, false
	}
	p := jsonScanner{s: string(body)}
	if !p.skip('{') {
		return r, false
	}
	if p.skip('}') {
		return r, p.end()
	}
	for {
		key, ok := p.str()
		if !ok || !p.skip(':') {
			return r, false
		}
		if dst := r.stringField(key); dst != nil {
			if *dst, ok = p.str(); !ok {
				return r, false
			}
		} else if dst := r.intField(key); dst == nil {
			return r, false
		} else {
			n, ok := p.int()
			if !ok {
				return r, false
			}
			*dst = &n
		}
		if p.skip('}') {
			return r, p.end()
		}
		if !p.skip(',') {
			return r, false
		}
	}
}

// stringField is the string field of r named key in JSON, or nil.
func (r *checkRequest) stringField(key string) *string {
	for _, f := range [...]struct {
		name string
		v    *string
	}{{"tenant_id", &r.TenantID}, {"resource", &r.Resource}, {"key", &r.Key}, {"request_id", &r.RequestID},
		{"method", &r.Method}, {"host", &r.Host}, {"path", &r.Path}, {"reservation_ttl", &r.ReservationTTL}} {
		if f.name == key {
			return f.v
		}
	}
	return nil
}

// intField is the integer field of r named key in JSON, or nil.
func (r *checkRequest) intField(key string) **int64 {
	switch key {
	case "tokens_requested":
		return &r.TokensRequested
	case "cost":
		return &r.Cost
	}
	return nil
}

// jsonScanner reads the tokens of a flat JSON object from s; each method
// skips the whitespace before its token.
type jsonScanner struct {
	s string
	i int
}

func (p *jsonScanner) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// skip consumes c when it is the next token.
func (p *jsonScanner) skip(c byte) bool {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (p *jsonScanner) end() bool {
	p.space()
	return p.i == len(p.s)
}

// str reads a string without escapes or control characters (the caller
// has ruled out backslashes and invalid UTF-8).
func (p *jsonScanner) str() (string, bool) {
	if !p.skip('"') {
		return "", false
	}
	start := p.i
	for ; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; {
		case c == '"':
			p.i++
			return p.s[start : p.i-1], true
		case c < 0x20:
			return "", false
		}
	}
	return "", false
}

// int reads a JSON integer literal in int64's range,
// -?(0|[1-9][0-9]*), as encoding/json reads into an int64.
func (p *jsonScanner) int() (int64, bool) {
	p.space()
	start := p.i
	if p.i < len(p.s) && p.s[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i == digits || p.i-digits > 1 && p.s[digits] == '0' {
		return 0, false
	}
	// A fraction or exponent after the digits is not a ',' or '}': the
	// caller declines the body.
	n, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
	return n, err == nil
}

// parseBatch decodes and validates a batch; one bad check rejects the batch.
func parseBatch(body []byte) (checkBatch, *catalog.ValidationError) {
	var b checkBatch
	if fe := decodeStrict(body, &b); fe != nil {
		return b, fe
	}
	if len(b.Checks) == 0 {
		return b, badField("checks", "missing or empty; want 1 to "+strconv.Itoa(MaxBatchChecks)+" checks")
	}
	if len(b.Checks) > MaxBatchChecks {
		return b, badField("checks", strconv.Itoa(len(b.Checks))+" checks; at most "+strconv.Itoa(MaxBatchChecks)+" allowed")
	}
	for i := range b.Checks {
		if fe := b.Checks[i].validate("checks[" + strconv.Itoa(i) + "]."); fe != nil {
			return b, fe
		}
	}
	return b, nil
}

// validate checks the fields' presence and ranges; prefix goes before each
// field name in the error.
func (r *checkRequest) validate(prefix string) *catalog.ValidationError {
	if fe := checkName(prefix+"tenant_id", r.TenantID, true, maxNameLen); fe != nil {
		return fe
	}
	if fe := checkName(prefix+"resource", r.Resource, true, maxNameLen); fe != nil {
		return fe
	}
	if fe := checkName(prefix+"key", r.Key, false, maxKeyLen); fe != nil {
		return fe
	}
	if fe := checkName(prefix+"request_id", r.RequestID, false, maxKeyLen); fe != nil {
		return fe
	}
	if fe := r.validateRequest(prefix); fe != nil {
		return fe
	}
	if n := r.tokens(); n < 0 || n > MaxTokensRequested {
		return badField(prefix+"tokens_requested", "must be between 0 (a peek) and "+strconv.Itoa(MaxTokensRequested)+", got "+strconv.FormatInt(n, 10))
	}
	return r.validateCost(prefix)
}

// validateCost checks cost and reservation_ttl.
func (r *checkRequest) validateCost(prefix string) *catalog.ValidationError {
	if r.Cost != nil && (*r.Cost < 1 || *r.Cost > store.MaxLimit) {
		return badField(prefix+"cost", "must be between 1 and "+strconv.FormatInt(store.MaxLimit, 10)+", got "+strconv.FormatInt(*r.Cost, 10))
	}
	if r.ReservationTTL == "" {
		return nil
	}
	if d, err := time.ParseDuration(r.ReservationTTL); err != nil || d < time.Second || d > MaxReservationTTL {
		return badField(prefix+"reservation_ttl", strconv.Quote(r.ReservationTTL)+" is not a duration from 1s to 1h (30s, 5m)")
	}
	return nil
}

// validateRequest checks the fields that describe the request.
func (r *checkRequest) validateRequest(prefix string) *catalog.ValidationError {
	for _, f := range [...]struct {
		name, v string
		max     int
	}{{"method", r.Method, 16}, {"host", r.Host, maxKeyLen}, {"path", r.Path, maxPathLen}} {
		if fe := checkName(prefix+f.name, f.v, false, f.max); fe != nil {
			return fe
		}
	}
	for _, m := range [...]struct {
		name string
		m    map[string]string
	}{{"headers", r.Headers}, {"query", r.Query}} {
		if len(m.m) > maxAttrs {
			return badField(prefix+m.name, strconv.Itoa(len(m.m))+" entries; at most "+strconv.Itoa(maxAttrs)+" allowed")
		}
		for k, v := range m.m {
			if fe := checkName(prefix+m.name+"."+k, k, true, maxNameLen); fe != nil {
				return fe
			}
			if fe := checkName(prefix+m.name+"."+k, v, false, maxAttrLen); fe != nil {
				return fe
			}
		}
	}
	return nil
}

// checkName checks a string field: required or not, at most max bytes, no
// control characters.
func checkName(field, v string, required bool, max int) *catalog.ValidationError {
	if v == "" {
		if required {
			return badField(field, "missing; want a non-empty string")
		}
		return nil
	}
	if len(v) > max {
		return badField(field, strconv.Itoa(len(v))+" bytes long; at most "+strconv.Itoa(max)+" allowed")
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return badField(field, "contains a control character")
		}
	}
	return nil
}

// decodeStrict decodes body into v, rejecting unknown fields and anything
// after the first JSON value, and names the field in its errors.
func decodeStrict(body []byte, v any) *catalog.ValidationError {
	if len(body) > MaxBody {
		return badField("body", bodyTooLargeMsg)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonFieldError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badField("body", "unexpected data after the JSON object")
	}
	return nil
}

// jsonFieldError turns an encoding/json error into the field it is about.
func jsonFieldError(err error) *catalog.ValidationError {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return badField("body", "empty; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badField("body", "truncated JSON")
	case errors.As(err, &syntax):
		return badField("body", "malformed JSON at offset "+strconv.FormatInt(syntax.Offset, 10)+": "+syntax.Error())
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badField("body", "want a JSON object, got "+typ.Value)
		}
		// A list that names its entries' index (catalog.PolicyLimits) gets its
		// own name put before it with a dot: limits.[1].period.
		typ.Field = strings.ReplaceAll(typ.Field, ".[", "[")
		want := jsonTypeName(typ.Type.Kind().String())
		switch {
		case typ.Type == reflect.TypeFor[confutil.Duration]():
			want = "a duration such as 10s or 1m"
		case typ.Value != "":
			// An enum (an algorithm, a plan) says in its parser's words
			// what the configuration would say of the same value.
			if err := confutil.TextError(typ.Type, typ.Value); err != nil {
				return badField(typ.Field, err.Error())
			}
		}
		return badField(typ.Field, "want "+want+", got "+typ.Value)
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		if f, err := strconv.Unquote(name); err == nil {
			name = f
		}
		if name == "" {
			return badField("body", `unknown field ""`)
		}
		return badField(name, "unknown field")
	}
	return badField("body", msg)
}

func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "int64", "int", "int32", "uint64", "uint32", "uint8", "uint16", "int8", "int16":
		return "an integer"
	case "float64", "float32":
		return "a number"
	case "bool":
		return "true or false"
	case "slice":
		return "an array"
	case "struct", "map", "ptr":
		return "an object"
	}
	return kind
}

// overCapacity answers a 400 naming tokens_requested (after prefix) when
// the request asks more than a limit that applies can ever grant at once:
// such a check could never pass, so it is not a retryable refusal.
func overCapacity(lim Limiter, prefix string, req *limit.Request) *catalog.ValidationError {
	most, scope := lim.MaxTokens(req)
	if req.Tokens <= most {
		return nil
	}
	return badField(prefix+"tokens_requested", strconv.FormatInt(req.Tokens, 10)+" is over "+
		strconv.FormatInt(most, 10)+", the most the "+scope.String()+" limit can grant at once; it can never pass")
}
