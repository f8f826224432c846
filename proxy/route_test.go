package proxy

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func testTable() *Table {
	return compileRoutes([]Route{
		{PathPrefix: "/", Upstream: "web", Resource: "root"},
		{PathPrefix: "/api", Upstream: "api", Resource: "api"},
		{PathPrefix: "/api/v2/", Upstream: "api2", Resource: "v2"},
		{PathPrefix: "/api", Host: "Admin.Example.com", Upstream: "adm", Resource: "adm"},
		{PathPrefix: "/static/", Upstream: "web", Resource: "static"},
	})
}

func TestRouteMatch(t *testing.T) {
	tab := testTable()
	tests := []struct{ host, path, want string }{
		{"x.com", "/", "root"},
		{"x.com", "/apix", "root"},
		{"x.com", "/api", "api"},
		{"x.com", "/api/", "api"},
		{"x.com", "/api/users", "api"},
		{"x.com", "/api/v2", "api"}, // "/api/v2/" needs the slash
		{"x.com", "/api/v2/", "v2"},
		{"x.com", "/api/v2/items", "v2"},
		{"admin.example.com", "/api/x", "adm"},
		{"ADMIN.example.COM:8443", "/api", "adm"},
		{"admin.example.com", "/other", "root"}, // host routes first, then generic
		{"x.com", "/static/a.css", "static"},
		{"x.com", "/static", "root"},
	}
	for _, tt := range tests {
		r := tab.match([]byte(tt.host), []byte(tt.path))
		if assert.NotNil(t, r, "%s%s", tt.host, tt.path) {
			assert.Equal(t, tt.want, r.Resource, "%s%s", tt.host, tt.path)
		}
	}
}

func TestRouteNoMatch(t *testing.T) {
	tab := compileRoutes([]Route{{PathPrefix: "/api", Upstream: "api"}, {PathPrefix: "/x", Host: "h", Upstream: "api"}})
	assert.Nil(t, tab.match([]byte("h"), []byte("/")))
	assert.Nil(t, tab.match([]byte("h"), []byte("/apix")))
	assert.Nil(t, tab.match([]byte("other"), []byte("/x")))
	assert.NotNil(t, tab.match([]byte("h:80"), []byte("/x/y")))
}

func TestLowerHost(t *testing.T) {
	for in, want := range map[string]string{"A.B:80": "a.b", "[::1]:80": "[::1]", "[::1]": "[::1]", "h": "h", "": ""} {
		got, ok := lowerHost(nil, []byte(in))
		_ = ok
		got2, ok2 := lowerHost(make([]byte, 0, 64), []byte(in))
		assert.True(t, ok2)
		assert.Equal(t, want, string(got2), in)
		_ = got
	}
}

func FuzzRouteMatch(f *testing.F) {
	for _, s := range []string{"/", "/api", "/api/", "/apix", "/api/v2/x", "//", ""} {
		f.Add("x.com", s)
	}
	f.Add("ADMIN.example.com:1", "/api/x")
	tab := testTable()
	f.Fuzz(func(t *testing.T, host, path string) {
		r := tab.match([]byte(host), []byte(path))
		if r == nil {
			return // only paths that do not start with "/"
		}
		p := r.PathPrefix
		if len(path) < len(p) || path[:len(p)] != p {
			t.Fatalf("route %q matched path %q", p, path)
		}
		if p[len(p)-1] != '/' && len(path) > len(p) && path[len(p)] != '/' {
			t.Fatalf("route %q matched %q off a segment boundary", p, path)
		}
		// No longer host-less prefix may match.
		for _, o := range tab.generic {
			if r.Host == "" && len(o.prefix) > len(r.prefix) && o.matches([]byte(path)) {
				t.Fatalf("route %q chosen over longer %q for %q", p, o.PathPrefix, path)
			}
		}
	})
}
