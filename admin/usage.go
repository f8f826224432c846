package admin

import (
	"context"
	"errors"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/reply"
)

// usage serves GET /v1/usage?policy=P&key=V[&key=V2...] (the key values as
// DELETE /v1/counters takes them): for each limit of the policy, what the
// key has used, what remains and when the budget is whole again, read from
// the store without taking anything (limit.Limiter.Usage). A policy that
// multiplies its limits by the plan answers them multiplied by the plan of
// the tenant or API key in its key. 503 when the store cannot answer.
func (s *Server) usage(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	t, status, fe := s.policyTarget(args)
	if fe != nil {
		writeError(ctx, status, fe.Field, fe.Msg)
		return
	}
	p, _ := s.deps.Writer.PolicySet().Lookup(string(args.Peek("policy")))
	plan := s.planOf(p, t.answer["key"].([]string))
	names := limitNames(p)
	b := append(make([]byte, 0, 256), `{"policy":`...)
	b = strconv.AppendQuote(b, p.Name)
	b = append(b, `,"limits":[`...)
	for i := range t.keys {
		a, err := s.limitUsage(p, i, t.keys[i], plan)
		if errors.Is(err, limit.ErrStoreUnavailable) {
			writeError(ctx, fasthttp.StatusServiceUnavailable, "store", "the rate-limit store did not answer; try again")
			return
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendUsage(b, names[i], &a)
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetBody(append(b, "]}\n"...))
}

// limitUsage is the usage of p's limit i for the store key: a window's,
// bucket's or quota's budget, or a concurrency limit's slots in use (its
// limit the slots, reset and window 0).
func (s *Server) limitUsage(p *catalog.CompiledPolicy, i int, key []byte, plan float64) (limit.Applied, error) {
	params := p.LimitParams(i, plan)
	if i < len(p.Metered) && p.Metered[i] != nil && p.Metered[i].Slots > 0 {
		inUse, err := s.deps.Limiter.SlotUsage(context.Background(), key, params.Limit)
		return limit.Applied{Limit: params.Limit, Remaining: max(params.Limit-inUse, 0)}, err
	}
	return s.deps.Limiter.Usage(context.Background(), key, params)
}

// appendUsage appends one limit's usage: {"name":"1m","limit":1000,
// "used":250,"remaining":750,"reset_ms":42000,"window_ms":60000}.
func appendUsage(b []byte, name string, a *limit.Applied) []byte {
	b = append(b, `{"name":`...)
	b = strconv.AppendQuote(b, name)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, a.Limit, 10)
	b = append(b, `,"used":`...)
	b = strconv.AppendInt(b, max(a.Limit-a.Remaining, 0), 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, a.Remaining, 10)
	b = append(b, `,"reset_ms":`...)
	b = strconv.AppendInt(b, reply.CeilMillis(a.Reset), 10)
	b = append(b, `,"window_ms":`...)
	b = strconv.AppendInt(b, reply.CeilMillis(a.Window), 10)
	return append(b, '}')
}

// planOf is the plan multiplier of p's limits for the key values: 1
// unless p multiplies by the plan and its key names a tenant or an API
// key that the catalog knows.
func (s *Server) planOf(p *catalog.CompiledPolicy, values []string) float64 {
	plans, ok := s.deps.Catalog.(interface{ PlanMultiplier(string) float64 })
	if !p.PlanMultiplier || !ok {
		return 1
	}
	for i, a := range p.Attrs {
		switch a.Kind {
		case catalog.AttrTenant:
			if plan, ok := s.deps.Catalog.TenantPlan(values[i]); ok {
				return plans.PlanMultiplier(plan)
			}
		case catalog.AttrAPIKey:
			for _, t := range s.deps.Catalog.Tenants() {
				for _, k := range t.APIKeys {
					if k == values[i] {
						return plans.PlanMultiplier(string(t.Plan))
					}
				}
			}
		}
	}
	return 1
}
