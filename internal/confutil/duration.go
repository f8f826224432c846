package confutil

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration that JSON, YAML and the environment spell as
// text: "1s", "250ms", "1m30s". It is written as it is configured, without
// the zero units time.Duration writes ("1m", not "1m0s"); the zero
// Duration marshals as "0s".
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d as AppendDuration does.
func (d Duration) String() string { return string(AppendDuration(nil, time.Duration(d))) }

// AppendDuration appends d as a person configures it, in the units
// time.ParseDuration reads back and without the zero ones that
// time.Duration.String writes: "1m" (not "1m0s"), "720h" (not
// "720h0m0s"), "1h30m", "250ms". Other durations (fractions of a
// millisecond or, past a second, of a second) are written as time.Duration writes them. It allocates
// nothing beyond growing b for a whole number of milliseconds.
func AppendDuration(b []byte, d time.Duration) []byte {
	switch {
	case d == 0:
		return append(b, "0s"...)
	case d < 0 || d%time.Millisecond != 0 || d > time.Second && d%time.Second != 0:
		return append(b, d.String()...) // "1.5s" as time.Duration has it
	case d < time.Second:
		b = strconv.AppendInt(b, int64(d/time.Millisecond), 10)
		return append(b, "ms"...)
	}
	for _, u := range [...]struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if n := d / u.d; n > 0 {
			b = strconv.AppendInt(b, int64(n), 10)
			b = append(b, u.name...)
			d -= n * u.d
		}
	}
	return b
}

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

// UnmarshalJSONText reads a JSON string into u with u.UnmarshalText, for
// a type that JSON spells as a name (an enum); null leaves u alone, as for
// the other types. Its errors are *json.UnmarshalTypeError, the one error
// that encoding/json completes with the field's name (it passes
// UnmarshalText's own errors on without it): a value that is not a string
// is the error a string field gets, and a string that UnmarshalText refuses
// names u's type, so that an API can ask UnmarshalText's words again
// (TextError).
func UnmarshalJSONText(b []byte, u encoding.TextUnmarshaler) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil || string(b) == "null" {
		return err
	}
	if u.UnmarshalText([]byte(s)) != nil {
		return &json.UnmarshalTypeError{Value: describeJSON(b), Type: reflect.TypeOf(u).Elem()}
	}
	return nil
}

// TextError returns what UnmarshalText of a value of type t says about the
// JSON string of a *json.UnmarshalTypeError from UnmarshalJSONText (its
// Value, `string "..."`), or nil when t does not decode from text or the
// value is not a string.
func TextError(t reflect.Type, value string) error {
	u, ok := reflect.New(t).Interface().(encoding.TextUnmarshaler)
	quoted, isString := strings.CutPrefix(value, "string ")
	if !ok || !isString {
		return nil
	}
	s, err := strconv.Unquote(quoted)
	if err != nil {
		return nil
	}
	return u.UnmarshalText([]byte(s))
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
