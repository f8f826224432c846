package httppath

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNormalizePath(t *testing.T) {
	f := func(raw, want string) {
		t.Helper()
		got, e := Normalize(nil, []byte(raw))
		assert.Equal(t, OK, e, "%q: %s", raw, e)
		assert.Equal(t, want, string(got), raw)
	}
	f("/", "/")
	f("//", "/")
	f("/a/b", "/a/b")
	f("/a/b/", "/a/b/")
	f("/a//b///c", "/a/b/c")
	f("/a/./b/.", "/a/b/")
	f("/a/b/../c", "/a/c")
	f("/a/b/..", "/a/")
	f("/..", "/")
	f("/../../a", "/a")
	f("/%41%7a%30%2d%5f%7E", "/Az0-_~")
	f("/a%2a%3b", "/a%2A%3B")
	f("/a%20b", "/a%20b")
	f("/a;b=1/c", "/a;b=1/c")
	f("/%25", "/%25")
	f("/%2541", "/%2541")
	f("/a..b/...", "/a..b/...")
	f("/caf\xc3\xa9", "/caf\xc3\xa9")

	bad := func(raw string, want Error) {
		t.Helper()
		dst := []byte("kept")
		got, e := Normalize(dst, []byte(raw))
		assert.Equal(t, want, e, raw)
		assert.Equal(t, "kept", string(got), "dst is left as it was")
	}
	bad("", pathNotAbsolute)
	bad("a/b", pathNotAbsolute)
	bad("/a%", pathBadEscape)
	bad("/a%2", pathBadEscape)
	bad("/a%g0", pathBadEscape)
	bad("/a%00", pathControl)
	bad("/a\x00", pathControl)
	bad("/a%0d%0a", pathControl)
	bad("/a\x7f", pathControl)
	bad("/a\\b", pathBackslash)
	bad("/a%5cb", pathBackslash)
	bad("/a%2fb", pathEncodedStructure)
	bad("/%2e%2e/a", pathEncodedStructure)
	bad("/a%2E", pathEncodedStructure)
	bad("/%252e%252e/a", pathDoubleEncoded)
	bad("/a%252F", pathDoubleEncoded)
	bad("/a%255c", pathDoubleEncoded)
	bad("/a%2500", pathDoubleEncoded)
	bad("/a/..;/b", pathDotParams)
	bad("/a/.;x/b", pathDotParams)
	bad("/a%20", pathEdgeSpace)
	bad("/%20a/b", pathEdgeSpace)
	bad("/a#b", pathFragment)
}

func TestSplitRequestURI(t *testing.T) {
	tests := []struct {
		uri, host, path, query string
		hasQuery, ok           bool
	}{
		{"/a?b=1", "", "/a", "b=1", true, true},
		{"/a?", "", "/a", "", true, true},
		{"/a", "", "/a", "", false, true},
		{"http://h.example/x?q", "h.example", "/x", "q", true, true},
		{"HTTPS://h:8443", "h:8443", "/", "", false, true},
		{"http://h?q", "h", "/", "q", true, true},
		{"http://user@h/x", "", "", "", false, false},
		{"http:///x", "", "", "", false, false},
		{"ftp://h/x", "", "", "", false, false},
		{"*", "", "", "", false, false},
		{"h:443", "", "", "", false, false},
	}
	for _, tt := range tests {
		host, path, query, ok := SplitRequestURI([]byte(tt.uri))
		if assert.Equal(t, tt.ok, ok, tt.uri) && ok {
			assert.Equal(t, tt.host, string(host), tt.uri)
			assert.Equal(t, tt.path, string(path), tt.uri)
			assert.Equal(t, tt.query, string(query), tt.uri)
			assert.Equal(t, tt.hasQuery, query != nil, tt.uri)
		}
	}
}

// FuzzNormalizePath: a normalised path is absolute, canonical (normalising
// it again changes nothing) and holds nothing a backend could read as
// another path.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "/a/../b", "//x/./y/", "/%2e%2E", "/%252e", "/a%5Cb", "/a;b/..;/c", "/%41%7e", "/a%20", "/\x00", "/a%zz"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, e := Normalize(nil, raw)
		if e != OK {
			if len(out) != 0 {
				t.Fatalf("%q: refused (%s) but wrote %q", raw, e, out)
			}
			return
		}
		if len(out) == 0 || out[0] != '/' {
			t.Fatalf("%q → %q: not absolute", raw, out)
		}
		for _, bad := range []string{"//", "/./", "/../", "\\", "\x00", "#"} {
			if bytes.Contains(out, []byte(bad)) {
				t.Fatalf("%q → %q holds %q", raw, out, bad)
			}
		}
		if bytes.HasSuffix(out, []byte("/.")) || bytes.HasSuffix(out, []byte("/..")) {
			t.Fatalf("%q → %q ends with a dot segment", raw, out)
		}
		for i := 0; i < len(out); i++ {
			if out[i] != '%' {
				continue
			}
			v, ok := unescape(out, i)
			if !ok || isUnreserved(v) || v == '/' || v == '.' || v == '\\' || out[i+1] != upperHex(out[i+1]) || out[i+2] != upperHex(out[i+2]) {
				t.Fatalf("%q → %q: escape at %d is not canonical", raw, out, i)
			}
		}
		again, e := Normalize(nil, out)
		if e != OK || !bytes.Equal(again, out) {
			t.Fatalf("%q → %q → %q (%s): not idempotent", raw, out, again, e)
		}
	})
}
