package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agnivade/levenshtein"
	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
)

var (
	durationType     = reflect.TypeFor[time.Duration]()
	confDurationType = reflect.TypeFor[confutil.Duration]()
)

// durationHook decodes durations from text ("500ms", "1s", "1m"). A bare
// number other than 0 is refused: YAML's `window: 10` would otherwise be
// 10 nanoseconds.
func durationHook(_ reflect.Type, to reflect.Type, data any) (any, error) {
	if to != durationType && to != confDurationType {
		return data, nil
	}
	var d time.Duration
	switch v := data.(type) {
	case string:
		var err error
		if d, err = time.ParseDuration(strings.TrimSpace(v)); err != nil {
			if _, nerr := strconv.ParseFloat(strings.TrimSpace(v), 64); nerr == nil && v != "0" {
				return nil, bareNumber(v)
			}
			return nil, fmt.Errorf("`%s` is not a duration; use e.g. 500ms, 1s, 1m", v)
		}
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		if reflect.ValueOf(v).IsZero() {
			break
		}
		return nil, bareNumber(fmt.Sprint(v))
	case time.Duration, confutil.Duration:
		return data, nil
	default:
		return data, nil
	}
	if to == confDurationType {
		return confutil.Duration(d), nil
	}
	return d, nil
}

// wholeNumberHook refuses a fraction for an integer key: mapstructure would
// truncate `limits.tenant: 100.5` to 100 without a word.
func wholeNumberHook(_ reflect.Type, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
	default:
		return data, nil
	}
	if to == durationType || to == confDurationType {
		return data, nil
	}
	var f float64
	switch v := data.(type) {
	case float64:
		f = v
	case float32:
		f = float64(v)
	default:
		return data, nil
	}
	if f != math.Trunc(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("`%v` is not %s", data, kindName(to))
	}
	return data, nil
}

func bareNumber(v string) error {
	return fmt.Errorf("`%s` is a bare number, not a duration; give its unit, e.g. %sms or %ss", v, v, v)
}

// decodeHooks turn the text of durations, lists and TextUnmarshaler values
// into their types.
var decodeHooks = mapstructure.ComposeDecodeHookFunc(
	durationHook,
	wholeNumberHook,
	mapstructure.StringToSliceHookFunc(","),
	mapstructure.TextUnmarshallerHookFunc(),
)

// decodeLeniently decodes v again with every value that cannot decode
// replaced by its zero value, and returns that configuration and the
// pass's metadata. mapstructure records no unused keys for a section in
// which a value failed to decode, so without this pass an unknown key next
// to a type error would go unreported until the type error is fixed; the
// configuration is validated for the same reason.
func decodeLeniently[T any](v *viper.Viper) (*T, mapstructure.Metadata) {
	var md mapstructure.Metadata
	var cfg T
	_ = v.Unmarshal(&cfg, viper.DecodeHook(lenientHook), func(dc *mapstructure.DecoderConfig) {
		dc.Metadata = &md
	})
	return &cfg, md
}

// lenientHook runs decodeHooks and turns a value that would not decode into
// to's zero value.
func lenientHook(from, to reflect.Value) (any, error) {
	out, err := mapstructure.DecodeHookExec(decodeHooks, from, to)
	if err != nil {
		return reflect.Zero(to.Type()).Interface(), nil
	}
	switch to.Kind() {
	case reflect.Struct, reflect.Map:
		if ov := reflect.ValueOf(out); ov.Kind() != reflect.Map && ov.Kind() != reflect.Struct {
			return reflect.Zero(to.Type()).Interface(), nil
		}
	case reflect.Slice:
		if ov := reflect.ValueOf(out); ov.Kind() != reflect.Slice && ov.Kind() != reflect.Array {
			return reflect.Zero(to.Type()).Interface(), nil
		}
	case reflect.Pointer, reflect.Interface:
	default:
		if mapstructure.Decode(out, reflect.New(to.Type()).Interface()) != nil {
			return reflect.Zero(to.Type()).Interface(), nil
		}
	}
	return out, nil
}

// decodeMessages turns mapstructure's errors into one "key: what is wrong"
// line each, naming the SENTINEL_ variable when the value came from the
// environment. It returns the keys named too.
func decodeMessages(err error, fromEnv map[string]string) ([]string, map[string]bool) {
	var lines []string
	keys := map[string]bool{}
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		de, ok := err.(*mapstructure.DecodeError)
		if !ok {
			if inner := errors.Unwrap(err); inner != nil {
				walk(inner) // "decoding failed due to the following error(s)"
				return
			}
			lines = append(lines, err.Error())
			return
		}
		inner := de.Unwrap()
		_, joined := inner.(interface{ Unwrap() []error })
		if _, nested := inner.(*mapstructure.DecodeError); joined || nested {
			walk(inner)
			return
		}
		key := yamlKey(de.Name())
		keys[key] = true
		line := key + ": " + describe(inner)
		if name, ok := fromEnv[key]; ok {
			line += " (from " + name + ")"
		}
		lines = append(lines, line)
	}
	walk(err)
	slices.Sort(lines)
	return lines, keys
}

// describe says what is wrong with a value and what is allowed.
func describe(err error) string {
	var pe *mapstructure.ParseError
	var ue *mapstructure.UnconvertibleTypeError
	switch {
	case errors.As(err, &pe):
		return fmt.Sprintf("`%v` is not %s", pe.Value, kindName(pe.Expected.Type()))
	case errors.As(err, &ue):
		return fmt.Sprintf("`%v` is not %s", ue.Value, kindName(ue.Expected.Type()))
	}
	return err.Error()
}

// kindName names what a value of type t is written as.
func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number, e.g. 100"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number of 0 or more, e.g. 100"
	case reflect.Float32, reflect.Float64:
		return "a number, e.g. 1.5"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping of keys"
	}
	return "a " + t.String()
}

var (
	indexRE   = regexp.MustCompile(`\[\d+\]`)
	mapNameRE = regexp.MustCompile(`\[([^\]]*[^\]0-9][^\]]*)\]`)
)

// yamlKey writes mapstructure's name of a map entry (upstreams[api].timeout)
// as the YAML path (upstreams.api.timeout); list indexes stay ([0]).
func yamlKey(name string) string { return mapNameRE.ReplaceAllString(name, ".$1") }

// Suggest returns the known key closest to an unknown one ("" when none is
// within an edit distance of 2). Known keys use * for a map's names and [*]
// for a list's indexes.
func Suggest(unknown string, known []string) string {
	segs := strings.Split(indexRE.ReplaceAllString(unknown, "[*]"), ".")
	best, bestD := "", 3
	for _, k := range known {
		ks := strings.Split(k, ".")
		if len(ks) != len(segs) {
			continue
		}
		d := 0
		out := make([]string, len(ks))
		for i := range ks {
			out[i] = ks[i]
			if ks[i] == "*" {
				out[i] = segs[i]
				continue
			}
			if base, ok := strings.CutSuffix(ks[i], "[*]"); ok {
				s, sok := strings.CutSuffix(segs[i], "[*]")
				if !sok {
					d = 3
					break
				}
				d += levenshtein.ComputeDistance(s, base)
				out[i] = base + "[*]"
				continue
			}
			d += levenshtein.ComputeDistance(segs[i], ks[i])
		}
		if d > 0 && d < bestD {
			best, bestD = restoreIndexes(unknown, strings.Join(out, ".")), d
		}
	}
	return best
}

// restoreIndexes puts the unknown key's list indexes back into a suggestion.
func restoreIndexes(unknown, s string) string {
	idx := indexRE.FindAllString(unknown, -1)
	for _, i := range idx {
		s = strings.Replace(s, "[*]", i, 1)
	}
	return s
}
