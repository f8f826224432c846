package limit

import (
	"reflect"
	"testing"
	"unsafe"
)

// TestSpecClearZeroesAllButBuf fills a spec's bytes and clears it: every
// field but the key buffer must be zero again, so that a field added to
// spec and not to clear fails here.
func TestSpecClearZeroesAllButBuf(t *testing.T) {
	var s spec
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&s)), unsafe.Sizeof(s))
	for i := range raw {
		raw[i] = 0xff
	}
	// Pointers and strings full of 0xff are never read: clear overwrites them.
	s.clear()
	typ := reflect.TypeOf(s)
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Name == "buf" {
			continue
		}
		for _, b := range raw[f.Offset : f.Offset+f.Type.Size()] {
			if b != 0 {
				t.Fatalf("spec.%s is not zero after clear: add it to spec.clear", f.Name)
			}
		}
	}
}
