package admin

import (
	"testing"
)

// FuzzCheckParse: the check API's parser never panics, and what it accepts
// respects the documented ranges.
func FuzzCheckParse(f *testing.F) {
	for _, s := range []string{
		`{"tenant_id":"acme","resource":"default","key":"k","tokens_requested":3}`,
		`{"tenant_id":"acme","resource":"r"}`,
		`{"tenant_id":"","tokens_requested":0}`,
		`{"tenant_id":"a","tokens_requested":1e9}`,
		`{"tenant_id":"a","tokens_requested":-1}`,
		`{"tenant_id":"a","bogus":true}`,
		`{"tenant_id":"a"} {}`,
		`[]`, `null`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, fe := parseCheck(body)
		if fe != nil {
			if fe.Field == "" {
				t.Fatalf("an error without a field: %v", fe)
			}
			return
		}
		if n := req.tokens(); n < 1 || n > MaxTokensRequested {
			t.Fatalf("accepted tokens_requested %d", n)
		}
		if req.TenantID == "" || len(req.TenantID) > maxNameLen || len(req.Key) > maxKeyLen {
			t.Fatalf("accepted %+v", req)
		}
	})
}
