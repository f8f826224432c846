package limit

import (
	"unsafe"

	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// appendRuleKey appends the store key of the rule that applies to req (see
// catalog.Catalog.Lookup): {rule:<tenant>:<resource>}, or
// {rule:*anonymous*:<resource>:<ip>} for an anonymous client.
func appendRuleKey(dst []byte, req *Request, anon bool) []byte {
	if !anon {
		return store.AppendKeyStrings(dst, "", "rule", req.Tenant, req.Resource)
	}
	// The IP is read as a string for this call only: no copy.
	ip := unsafe.String(unsafe.SliceData(req.IP), len(req.IP))
	return store.AppendKeyStrings(dst, "", "rule", catalog.AnonymousTenant, req.Resource, ip)
}
