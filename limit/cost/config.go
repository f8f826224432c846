package cost

import (
	"fmt"
	"strings"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
)

// Cost makes a limit count permits per request from a figure of the
// request (Estimate) and, when the answer has it, of the answer (Actual).
// A limit without cost counts one permit per request; its configuration
// holds a nil *Cost.
type Cost struct {
	// Estimate is what the request is counted for before it is forwarded.
	Estimate Estimate `mapstructure:"estimate" json:"estimate,omitzero"`
	// Actual, when set, replaces the estimate by the answer's figure.
	Actual Actual `mapstructure:"actual" json:"actual,omitzero"`
}

// Estimate is where a request's cost is read before the request is
// forwarded. Exactly one of Fixed, Header, JSON and BodyBytes is set.
type Estimate struct {
	// Fixed counts every request for this many permits (at least 1).
	Fixed int64 `mapstructure:"fixed" json:"fixed,omitempty"`
	// Header names a request header holding a non-negative integer.
	Header string `mapstructure:"header" json:"header,omitempty"`
	// JSON is the dotted path of a number in the request's JSON body
	// (max_tokens); a fraction is rounded up.
	JSON string `mapstructure:"json" json:"json,omitempty"`
	// BodyBytes counts the request body's length in bytes.
	BodyBytes bool `mapstructure:"body_bytes" json:"body_bytes,omitempty"`
	// Default is the estimate when the header, the JSON number or the
	// body length is missing or not a non-negative integer (default 1).
	Default int64 `mapstructure:"default" json:"default,omitempty"`
	// Max caps the estimate, so that a client cannot spend the window in
	// one request by asking for more (0: no cap).
	Max int64 `mapstructure:"max" json:"max,omitempty"`
}

// Actual is where the answer says what the request cost; at most one
// field is set, and none lets the estimate stand.
type Actual struct {
	// Header names an answer header holding a non-negative integer.
	Header string `mapstructure:"header" json:"header,omitempty"`
	// JSON is the dotted path of a number in a JSON answer
	// (usage.total_tokens).
	JSON string `mapstructure:"json" json:"json,omitempty"`
	// SSE is the dotted path of a number in the data of a text/event-stream
	// answer's events; the last event that carries it counts.
	SSE string `mapstructure:"sse" json:"sse,omitempty"`
}

// Path limits, so that a matcher holds its path's key boundaries in a
// fixed array.
const (
	maxPathLen  = 255
	maxPathKeys = 16
)

// Validate returns one error per bad key of c, each naming the key under
// prefix, the limit's path (policies[0].limits[0]; "" names the keys from
// cost).
func (c *Cost) Validate(prefix string) []error {
	errs := c.Estimate.validate(join(prefix, "cost.estimate"))
	return append(errs, c.Actual.validate(join(prefix, "cost.actual"))...)
}

func (e *Estimate) validate(key string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: "+format, append([]any{key, field}, args...)...))
	}
	if e.sources() != 1 {
		errs = append(errs, fmt.Errorf("%s: set exactly one of fixed, header, json, body_bytes", key))
	}
	switch {
	case e.Fixed < 0:
		bad("fixed", "%d must be at least 1", e.Fixed)
	case e.Fixed > 0 && e.Default != 0:
		bad("default", "a fixed estimate takes no default")
	case e.Fixed > 0 && e.Max != 0:
		bad("max", "a fixed estimate takes no max")
	}
	if e.Header != "" && !confutil.IsToken(e.Header) {
		bad("header", "%q is not a header name", e.Header)
	}
	if e.JSON != "" {
		if err := checkPath(e.JSON); err != nil {
			bad("json", "%v", err)
		}
	}
	if e.Default < 0 {
		bad("default", "%d must be at least 1", e.Default)
	}
	switch {
	case e.Max < 0:
		bad("max", "%d must be at least 1", e.Max)
	case e.Max > 0 && e.Max < e.fallback():
		bad("max", "%d is below default %d", e.Max, e.fallback())
	}
	return errs
}

// sources counts the estimate's sources that are set.
func (e *Estimate) sources() int {
	n := 0
	for _, set := range [...]bool{e.Fixed != 0, e.Header != "", e.JSON != "", e.BodyBytes} {
		if set {
			n++
		}
	}
	return n
}

func (a *Actual) validate(key string) []error {
	var errs []error
	n := 0
	for _, f := range [...]struct{ name, v string }{{"header", a.Header}, {"json", a.JSON}, {"sse", a.SSE}} {
		if f.v == "" {
			continue
		}
		n++
		if f.name == "header" && !confutil.IsToken(f.v) {
			errs = append(errs, fmt.Errorf("%s.header: %q is not a header name", key, f.v))
		}
		if err := checkPath(f.v); f.name != "header" && err != nil {
			errs = append(errs, fmt.Errorf("%s.%s: %w", key, f.name, err))
		}
	}
	if n > 1 {
		errs = append([]error{fmt.Errorf("%s: set at most one of header, json, sse", key)}, errs...)
	}
	return errs
}

// checkPath says why p is not a dotted path of object keys.
func checkPath(p string) error {
	if len(p) > maxPathLen || strings.Count(p, ".") >= maxPathKeys || !pathKeys(p) {
		return fmt.Errorf("%q is not a dotted path of at most %d object keys such as usage.total_tokens", p, maxPathKeys)
	}
	return nil
}

// pathKeys reports whether every dot-separated key of p is non-empty.
func pathKeys(p string) bool {
	for k := range strings.SplitSeq(p, ".") {
		if k == "" {
			return false
		}
	}
	return true
}

// join names key under prefix.
func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}
