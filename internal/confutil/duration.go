package confutil

import (
	"encoding/json"
	"reflect"
	"strconv"
	"time"
)

// Duration is a time.Duration that JSON, YAML and the environment spell as
// text: "1s", "250ms", "1m30s". The zero Duration marshals as "0s".
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d as time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: it reads what
// time.ParseDuration reads.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return &DurationError{Text: string(text)}
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON reads a JSON string as UnmarshalText does. A bad value is a
// *json.UnmarshalTypeError, which encoding/json completes with the field's
// name, so that an API can answer which field is wrong.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // as for the other types: null leaves the value alone
	}
	s, err := strconv.Unquote(string(b))
	if err == nil && d.UnmarshalText([]byte(s)) == nil {
		return nil
	}
	return &json.UnmarshalTypeError{Value: describeJSON(b), Type: reflect.TypeFor[Duration]()}
}

// describeJSON names a bad JSON value for an error: string "fast", number 5.
func describeJSON(b []byte) string {
	switch {
	case len(b) > 0 && b[0] == '"':
		return "string " + string(b)
	case string(b) == "true" || string(b) == "false":
		return "bool"
	case len(b) > 0 && (b[0] == '{' || b[0] == '['):
		return "an object or array"
	}
	return "number " + string(b)
}

// DurationError is the error of a text that is not a duration.
type DurationError struct{ Text string }

func (e *DurationError) Error() string {
	return strconv.Quote(e.Text) + " is not a duration such as 10s or 1m"
}
