package catalog

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Lookup returns the policy named name among those that apply now.
func (ps *PolicySet) Lookup(name string) (*CompiledPolicy, bool) {
	for _, p := range ps.All() {
		if p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// ValueError is a key value that no request can carry for the policy's
// attribute at Index.
type ValueError struct {
	Index int
	Msg   string
}

func (e *ValueError) Error() string { return e.Msg }

// AppendIdentityOf appends the identity that a request carrying values
// makes (AppendIdentity's, exemptions aside), so that the budget of one
// client can be named without its request (DELETE /v1/counters?policy=).
// values[i] is the value of the policy's i-th key attribute as a request
// carries it: an ip attribute takes an IP address (an IPv4-mapped one is
// the IPv4 address), an ip/N one an address within the prefix or the
// prefix itself (10.1.2.0/24). A wrong count of values, an empty value or
// an address that does not parse is a *ValueError.
func (p *CompiledPolicy) AppendIdentityOf(dst []byte, values []string) ([]byte, error) {
	if len(values) != len(p.Attrs) {
		return dst, &ValueError{Index: -1, Msg: fmt.Sprintf("policy %q has %d key attributes (%s), got %d values",
			p.Name, len(p.Attrs), p.keyNames(), len(values))}
	}
	for i, v := range values {
		s, err := p.Attrs[i].subjectOf(v)
		if err != nil {
			return dst, &ValueError{Index: i, Msg: err.Error()}
		}
		var ipBuf [48]byte
		if i > 0 {
			dst = append(dst, ':')
		}
		dst = appendValue(dst, p.Attrs[i].value(&s, ipBuf[:0]))
	}
	return dst, nil
}

// subjectOf is a request that carries v as a's value.
func (a *KeyAttr) subjectOf(v string) (Subject, error) {
	if v == "" {
		return Subject{}, fmt.Errorf("the %s value is empty: a request without one is not counted", a)
	}
	var s Subject
	switch a.Kind {
	case AttrIP, AttrIPPrefix:
		addr, err := a.addrOf(v)
		if err != nil {
			return s, err
		}
		s.IP = []byte(addr.Unmap().String())
	case AttrAPIKey:
		s.APIKey = []byte(v)
	case AttrTenant:
		s.Tenant = v
	case AttrPlan:
		s.Plan = v
	case AttrResource:
		s.Resource = v
	case AttrMethod:
		s.Method = []byte(v)
	case AttrPath:
		s.Path = []byte(v)
	case AttrHeader, AttrQuery:
		s.Attrs = oneValue(v)
	}
	return s, nil
}

// addrOf reads an ip attribute's value: an address, or for ip/N an
// address in the prefix or the N-bit prefix.
func (a *KeyAttr) addrOf(v string) (netip.Addr, error) {
	if a.Kind == AttrIPPrefix && strings.Contains(v, "/") {
		pr, err := netip.ParsePrefix(v)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("%q is not an IP address or prefix", v)
		}
		if pr.Bits() != a.Bits {
			return netip.Addr{}, fmt.Errorf("%q is a /%d; the key is %s", v, pr.Bits(), a)
		}
		return pr.Addr(), nil
	}
	addr, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", v)
	}
	return addr, nil
}

// String is the attribute as a policy's key writes it.
func (a KeyAttr) String() string {
	switch a.Kind {
	case AttrIPPrefix:
		return "ip/" + strconv.Itoa(a.Bits)
	case AttrHeader:
		return "header:" + string(a.Name)
	case AttrQuery:
		return "query:" + string(a.Name)
	}
	for name, k := range simpleAttrs {
		if k == a.Kind {
			return name
		}
	}
	return "?"
}

// keyNames is the policy's key as its configuration writes it.
func (p *CompiledPolicy) keyNames() string {
	names := make([]string, len(p.Attrs))
	for i := range p.Attrs {
		names[i] = p.Attrs[i].String()
	}
	return strings.Join(names, ", ")
}

// oneValue is Attrs that gives every header and query parameter one value.
type oneValue string

func (v oneValue) Header([]byte) []byte { return []byte(v) }
func (v oneValue) Query([]byte) []byte  { return []byte(v) }
