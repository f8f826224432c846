package admin

import (
	"reflect"
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

// FuzzCheckParseFast: whatever the fast path accepts, decodeStrict decodes
// to the same request without an error. The fast path may decline anything;
// it may never decide differently.
func FuzzCheckParseFast(f *testing.F) {
	for _, s := range []string{
		`{"tenant_id":"acme","resource":"default","key":"k","tokens_requested":3}`,
		`{"tenant_id":"acme","resource":"r","request_id":"id-1"}`,
		` {"tenant_id" : "a" , "tokens_requested" : -0 } `,
		`{"tenant_id":"a","tenant_id":"b"}`,
		`{"tenant_id":"a","tokens_requested":01}`,
		`{"tenant_id":"a","tokens_requested":1.0}`,
		`{"tenant_id":"a","tokens_requested":NaN}`,
		`{"tenant_id":"a","tokens_requested":9223372036854775808}`,
		`{"tenant_id":"a","tokens_requested":null}`,
		`{"Tenant_ID":"a"}`,
		`{"tenant_id":"a\u00e9"}`,
		"{\"tenant_id\":\"a\xff\"}",
		"{\"tenant_id\":\"a\x01\"}",
		"{\"tenant_id\":\"a\"}\x00",
		`{"tenant_id":"a",}`,
		`{"tenant_id":"a","tokens_requested":-}`,
		`{"tenant_id":"a","tokens_requested":1e3}`,
		`{"tenant_id":"a","tokens_requested":2,"tokens_requested":3}`,
		`{"tenant_id":"a" "resource":"b"}`,
		`{"tenant_id":"a","resource":"b"`,
		`{"tenant_id":"a"}}`,
		"{\t\"tenant_id\"\r\n:\"a\"}",
		"{\"tenant_id\":\"a\u2028\"}",
		`{ }`,
		`{"tenant_id":"a"} {}`,
		`[]`, `null`, `{`, ``, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fast, ok := parseCheckFast(body)
		if !ok {
			return
		}
		var slow checkRequest
		if fe := decodeStrict(body, &slow); fe != nil {
			t.Fatalf("fast path accepted %q, decodeStrict: %s: %s", body, fe.Field, fe.Msg)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast path %+v, decodeStrict %+v", body, fast, slow)
		}
	})
}

// The fast path takes the bodies clients send; the rest go to decodeStrict.
func TestParseCheckFastTakesCommonBodies(t *testing.T) {
	n := int64(3)
	for body, want := range map[string]checkRequest{
		`{"tenant_id":"acme","resource":"default","key":"k"}`:                              {TenantID: "acme", Resource: "default", Key: "k"},
		`{"tenant_id": "acme", "resource": "r", "tokens_requested": 3, "request_id": "i"}`: {TenantID: "acme", Resource: "r", TokensRequested: &n, RequestID: "i"},
		"{\n  \"tenant_id\": \"acme\",\n  \"resource\": \"caf\u00e9\"\n}\n":                {TenantID: "acme", Resource: "caf\u00e9"},
	} {
		got, ok := parseCheckFast([]byte(body))
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: got %+v, %v; want %+v", body, got, ok, want)
		}
	}
	for _, body := range []string{`{"tenant_id":"a\n"}`, `{"TENANT_ID":"a"}`, `{"tenant_id":"a","tokens_requested":2.0}`, `{"key":null}`} {
		if _, ok := parseCheckFast([]byte(body)); ok {
			t.Errorf("%q: the fast path took it", body)
		}
	}
}

func BenchmarkParseCheck(b *testing.B) {
	body := []byte(`{"tenant_id":"bench","resource":"default","key":"hot","tokens_requested":1}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := parseCheckFast(body); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r checkRequest
			if fe := decodeStrict(body, &r); fe != nil {
				b.Fatal(fe.Msg)
			}
		}
	})
}
