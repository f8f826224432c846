package proxy

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExchangeReset fills every field of a pooled exchange, gives it back
// through the request path's own release and checks that the exchange the
// next request takes holds none of it. The fields are found by reflection,
// so a field added without being cleared by reset fails here.
func TestExchangeReset(t *testing.T) {
	s := newInProcessServer(t)
	x := s.acquireExchange()
	v := reflect.ValueOf(x).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		f := settable(v.Field(i))
		fill(t, f, name)
		require.False(t, f.IsZero(), "%s was not filled", name)
	}

	s.releaseExchange(x)
	assertEmpty(t, x) // what the pool holds, whichever exchange Get returns
	next := s.acquireExchange()
	assertEmpty(t, next)
	if next == x {
		assert.Positive(t, cap(next.uriBuf), "a buffer keeps its capacity")
	}
}

// assertEmpty checks that every field of x is zero, but for the buffers,
// which are empty.
func assertEmpty(t *testing.T, x *exchange) {
	t.Helper()
	v := reflect.ValueOf(x).Elem()
	for i := range v.NumField() {
		name, f := v.Type().Field(i).Name, v.Field(i)
		if f.Kind() == reflect.Slice {
			assert.Zero(t, f.Len(), "%s is not empty after reset", name)
			continue
		}
		assert.True(t, f.IsZero(), "%s is not zero after reset: %v", name, settable(f).Interface())
	}
}

// settable makes an unexported field writable.
func settable(f reflect.Value) reflect.Value {
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

// fill sets v, and everything inside it, to something other than zero.
func fill(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Type() {
	case reflect.TypeFor[netip.Addr]():
		v.Set(reflect.ValueOf(netip.MustParseAddr("192.0.2.1")))
		return
	case reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(time.Unix(1, 0)))
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	case reflect.String:
		v.SetString("the previous client's")
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(t, v.Index(0), path+"[0]")
	case reflect.Array:
		for i := range v.Len() {
			fill(t, v.Index(i), path)
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
	case reflect.Struct:
		for i := range v.NumField() {
			fill(t, settable(v.Field(i)), path+"."+v.Type().Field(i).Name)
		}
	case reflect.Interface:
		for _, c := range []any{errors.New("the previous client's"), strings.NewReader("the previous client's"), &requestAttrs{}} {
			if reflect.TypeOf(c).Implements(v.Type()) {
				v.Set(reflect.ValueOf(c))
				return
			}
		}
		t.Fatalf("fill: no value for %s (%s): add one", path, v.Type())
	default:
		t.Fatalf("fill: cannot fill %s (%s): add a case", path, v.Type())
	}
}
