package limit

import (
	"context"
	"testing"
	"time"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/cost"
)

// maxTokensHeader is Attrs behind a pointer, as the request path passes
// it, with the X-Max-Tokens header of a model call.
type maxTokensHeader struct{ v []byte }

func (h *maxTokensHeader) Header(n []byte) []byte {
	if string(n) == "X-Max-Tokens" {
		return h.v
	}
	return nil
}

func (h *maxTokensHeader) Query([]byte) []byte { return nil }

// meteredKinds are tokensPolicy's limit (per API key on chat, a minute)
// counting requests (plain), counting a cost estimated from X-Max-Tokens
// (cost) and counting only 401 and 403 answers (count_if), each with the
// actual cost the benchmark settles it at (-1: not settled, nothing
// reserved).
var meteredKinds = []struct {
	name   string
	limit  func(*catalog.PolicyLimit)
	actual int64
}{
	{"plain", func(l *catalog.PolicyLimit) { l.Cost = nil }, -1},
	{"cost", func(*catalog.PolicyLimit) {}, 150}, // 400 reserved, 250 given back
	{"count_if", func(l *catalog.PolicyLimit) {
		l.Cost, l.CountIf = nil, &cost.CountIf{Status: cost.Statuses{"401", "403"}}
	}, 0}, // a 200: not counted
	{"concurrency", func(l *catalog.PolicyLimit) {
		*l = catalog.PolicyLimit{Concurrency: catalog.MaxConcurrency} // a slot taken and given back
	}, 0},
	{"max_wait", func(l *catalog.PolicyLimit) { l.Cost, l.MaxWait = nil, confutil.Duration(time.Second) }, -1}, // admitted: no queue
}

// meteredLimiter is a limiter over the in-process store whose leases
// serve every decision of a run (IP, tenant and the policy's limit), with
// tokensPolicy's limit changed by mod, and a model call for it.
func meteredLimiter(t testing.TB, mod func(*catalog.PolicyLimit)) (*Limiter, *countingStore, *Request) {
	cfg := testLimitsConfig(func(c *Config) {
		c.IP, c.Tenant, c.Window, c.LeaseTTL, c.MaxLease = 1<<39, 1<<39, time.Hour, time.Minute, 1<<19
	})
	p := tokensPolicy(1 << 39)
	mod(&p.Limits[0])
	st := memStore(t)
	l := newTestLimiter(t, cfg, st, Options{Catalog: testCatalog(t), Policies: withPolicies(t, cfg, p)})
	req := &Request{IP: []byte("10.0.0.1"), APIKey: []byte("k1"), Tenant: "acme", Plan: "PREMIUM", Resource: "chat",
		Method: []byte("POST"), Attrs: &maxTokensHeader{v: []byte("400")}, BodyLen: -1}
	return l, st, req
}

// decideAndSettle is one request as the proxy makes it: the decision,
// then, once the answer has ended, the settlement of its reservation.
func decideAndSettle(tb testing.TB, l *Limiter, req *Request, d *Decision, actual int64) {
	l.Decide(context.Background(), req, d)
	if !d.Allowed {
		tb.Fatalf("refused: %+v", d)
	}
	if actual >= 0 {
		l.Settle(&d.Reserved[0], actual)
	}
}

// BenchmarkCostLimitLocal is a decision with one policy limit from a
// local lease (beside the IP and tenant limits): plain counts requests;
// cost reserves the X-Max-Tokens estimate (400) and settles it at 150, and
// count_if reserves 1 and settles a 200 at 0, as the proxy does when the
// answer ends; concurrency takes a slot from the pod's idle ones and gives
// it back; max_wait is plain with a max_wait, admitted without waiting.
// The difference with plain is what each adds.
func BenchmarkCostLimitLocal(b *testing.B) {
	for _, k := range meteredKinds {
		b.Run(k.name, func(b *testing.B) {
			l, st, req := meteredLimiter(b, k.limit)
			var d Decision
			for range 1000 {
				decideAndSettle(b, l, req, &d, k.actual)
			}
			if k.actual >= 0 && d.NReserved != 1 {
				b.Fatalf("%d reservations", d.NReserved)
			}
			calls := st.calls.Load()
			b.ReportAllocs()
			for b.Loop() {
				decideAndSettle(b, l, req, &d, k.actual)
			}
			b.ReportMetric(float64(st.calls.Load()-calls)/float64(b.N), "store-calls/op")
		})
	}
}
