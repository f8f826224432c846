package cost

import "math"

// Of returns the estimate of one request, from its headers (header returns
// a header's value, nil when absent), its body (read only for a JSON
// source; nil when not read) and its length in bytes (bodyLen; negative
// when unknown, as fasthttp's ContentLength is for a chunked body). A
// header, JSON number or length that is missing or not a non-negative
// integer gives Default; the result is capped at Max. It allocates
// nothing.
func (e *Estimate) Of(header func(name string) []byte, body []byte, bodyLen int64) int64 {
	var v int64
	ok := false
	switch {
	case e.Fixed > 0:
		return e.Fixed
	case e.Header != "":
		v, ok = parseCount(header(e.Header))
	case e.JSON != "":
		var m matcher
		m.reset(e.JSON)
		m.write(body)
		v, ok = m.value()
	case e.BodyBytes:
		v, ok = bodyLen, bodyLen >= 0
	}
	if !ok {
		v = e.fallback()
	}
	if e.Max > 0 && v > e.Max {
		v = e.Max
	}
	return v
}

// NeedsBody reports whether Of reads the request's body: the proxy then
// reads it whole before it estimates.
func (e *Estimate) NeedsBody() bool { return e.JSON != "" }

// fallback is Default, or 1 when it is not set.
func (e *Estimate) fallback() int64 {
	if e.Default < 1 {
		return 1
	}
	return e.Default
}

// FromHeader returns the answer's cost from its Header, through header (as
// Estimate.Of's); ok is false when a has no header, or the header is
// missing or not a non-negative integer. It allocates nothing.
func (a *Actual) FromHeader(header func(name string) []byte) (n int64, ok bool) {
	if a.Header == "" {
		return 0, false
	}
	return parseCount(header(a.Header))
}

// NeedsBody reports whether the answer's cost is in its body: the proxy
// then feeds the body to a Meter.
func (a *Actual) NeedsBody() bool { return a.JSON != "" || a.SSE != "" }

// parseCount reads a non-negative decimal integer, spaces and tabs around
// it allowed.
func parseCount(b []byte) (int64, bool) {
	b = trimOWS(b)
	if len(b) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}
