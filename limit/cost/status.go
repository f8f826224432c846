package cost

import (
	"encoding/json"
	"fmt"
	"reflect"
)

// CountIf makes a limit count only the requests whose answer matches, so
// that "3 failed logins a minute" counts 401 and 403 answers alone. A
// limit without it counts every request; its configuration holds a nil
// *CountIf.
type CountIf struct {
	// Status lists the statuses counted: codes (401) and classes ("5xx").
	Status Statuses `mapstructure:"status" json:"status,omitempty"`
}

// Statuses are status codes (100-599) and status classes ("1xx" to "5xx",
// in any case), kept as the configuration spells them. YAML's [401, "5xx"]
// decodes into them because the configuration's decoder is weakly typed
// (viper's default): it writes the integer 401 as "401". JSON decodes them
// with UnmarshalJSON and writes codes back as numbers.
type Statuses []string

// StatusSet is a compiled Statuses, one bit per status from 100 to 599, so
// that matching an answer reads one word.
type StatusSet [8]uint64

// Match reports whether status is in the set. It allocates nothing.
func (s *StatusSet) Match(status int) bool {
	i := status - 100
	return i >= 0 && i < 500 && s[i/64]&(1<<(i%64)) != 0
}

// Match reports whether status is one of s's codes or in one of its
// classes; entries that are neither match nothing. It allocates nothing,
// but parses every entry: the request path uses the StatusSet of Compile.
func (s Statuses) Match(status int) bool {
	for _, v := range s {
		if lo, hi, ok := parseStatus(v); ok && lo <= status && status <= hi {
			return true
		}
	}
	return false
}

// Compile returns the set of statuses c counts, or the first error of
// Validate.
func (c *CountIf) Compile() (StatusSet, error) {
	var set StatusSet
	if errs := c.Validate(""); len(errs) > 0 {
		return set, errs[0]
	}
	for _, v := range c.Status {
		lo, hi, _ := parseStatus(v)
		for st := lo; st <= hi; st++ {
			i := st - 100
			set[i/64] |= 1 << (i % 64)
		}
	}
	return set, nil
}

// Validate returns one error per bad key of c, each naming the key under
// prefix, the limit's path (policies[0].limits[0]; "" names the keys from
// count_if).
func (c *CountIf) Validate(prefix string) []error {
	key := join(prefix, "count_if.status")
	if len(c.Status) == 0 {
		return []error{fmt.Errorf("%s: list at least one status (401) or class (5xx)", key)}
	}
	var errs []error
	for i, v := range c.Status {
		if _, _, ok := parseStatus(v); !ok {
			errs = append(errs, fmt.Errorf("%s[%d]: %q is not a status (100-599) nor a class (1xx-5xx)", key, i, v))
		}
	}
	return errs
}

// parseStatus returns the statuses an entry names, from lo to hi.
func parseStatus(v string) (lo, hi int, ok bool) {
	if len(v) != 3 || v[0] < '1' || v[0] > '5' {
		return 0, 0, false
	}
	lo = int(v[0]-'0') * 100
	if (v[1] == 'x' || v[1] == 'X') && (v[2] == 'x' || v[2] == 'X') {
		return lo, lo + 99, true
	}
	if !isDigit(v[1]) || !isDigit(v[2]) {
		return 0, 0, false
	}
	lo += int(v[1]-'0')*10 + int(v[2]-'0')
	return lo, lo, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// UnmarshalJSON reads an array of codes and classes: [401, "5xx"]. A
// number is kept as written, so that Validate names a bad one (600, 401.5).
func (s *Statuses) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if jsonKind(b) != "array" {
		return &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeFor[Statuses]()}
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(Statuses, len(raw))
	for i, r := range raw {
		switch jsonKind(r) {
		case "number":
			out[i] = string(r)
		case "string":
			if err := json.Unmarshal(r, &out[i]); err != nil {
				return err
			}
		default:
			return &json.UnmarshalTypeError{Value: jsonKind(r), Type: reflect.TypeFor[Statuses]()}
		}
	}
	*s = out
	return nil
}

// MarshalJSON writes codes as numbers and classes as strings, as a person
// writes them: [401, "5xx"].
func (s Statuses) MarshalJSON() ([]byte, error) {
	if s == nil {
		return []byte("null"), nil
	}
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
		if len(v) == 3 && isDigit(v[0]) && isDigit(v[1]) && isDigit(v[2]) {
			out[i] = json.RawMessage(v)
		}
	}
	return json.Marshal(out)
}

// jsonKind names the kind of a JSON value, as json.UnmarshalTypeError
// does.
func jsonKind(b []byte) string {
	if len(b) == 0 {
		return "empty"
	}
	switch b[0] {
	case '"':
		return "string"
	case '[':
		return "array"
	case '{':
		return "object"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}
