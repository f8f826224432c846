package admin

import (
	"context"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
	"github.com/sentinel-gateway/sentinel/limit/store"
)

// counterScopes are the scopes DELETE /v1/counters resets, with their
// resets counted.
var counterScopes = map[string]limit.Scope{
	"ip": limit.ScopeIP, "api_key": limit.ScopeAPIKey, "tenant": limit.ScopeTenant, "rule": limit.ScopeRule,
}

// resetCounts count the resets by scope (sentinel_limit_resets_total): a
// policy's once, whatever its number of limits.
var resetCounts = func() map[string]*metrics.Counter {
	m := map[string]*metrics.Counter{}
	for _, name := range []string{"ip", "api_key", "tenant", "rule", "policy"} {
		m[name] = metrics.NewCounter(`sentinel_limit_resets_total{scope="` + name + `"}`)
	}
	return m
}()

// counterTarget is the budget a reset names: the scope it is counted
// under, what the answer and the audit line say of it, and its store keys
// with their params (one for a scope, one per limit for a policy).
type counterTarget struct {
	scope  string
	answer map[string]any
	log    []any
	keys   [][]byte
	params []store.Params
}

// resetCounter serves DELETE /v1/counters?scope=S&key=K and
// DELETE /v1/counters?policy=P&key=V[&key=V2...]: the budget of one key is
// whole again on every pod. The store drops its counts, then every pod
// hears of it (Deps.Resets) and drops what it holds for the key. Each
// reset is logged with the admin request's peer.
func (s *Server) resetCounter(ctx *fasthttp.RequestCtx) {
	t, status, fe := s.resetTarget(ctx.QueryArgs())
	if fe != nil {
		writeError(ctx, status, fe.Field, fe.Msg)
		return
	}
	c, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	for i, k := range t.keys {
		if err := s.deps.Limiter.Reset(c, k, t.params[i]); err != nil {
			msg := "cannot reset the counter: "
			if i > 0 {
				msg = "reset " + strconv.Itoa(i) + " of the policy's " + strconv.Itoa(len(t.keys)) + " limits, then could not reset the next: "
			}
			writeError(ctx, fasthttp.StatusServiceUnavailable, "", msg+err.Error())
			return
		}
	}
	slog.Info("admin: counter reset", append([]any{"peer", ctx.RemoteAddr().String()}, t.log...)...)
	resetCounts[t.scope].Inc()
	if err := s.publishResets(c, t.keys); err != nil {
		writeError(ctx, fasthttp.StatusServiceUnavailable, "", "the counter was reset in the store, but not every pod was told "+
			"(each drops its leased permits within a lease lifetime): "+err.Error())
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, t.answer)
}

// publishResets tells every pod of the reset of each store key, one
// message a key as pods of any version read them.
func (s *Server) publishResets(ctx context.Context, keys [][]byte) error {
	if s.deps.Resets == nil {
		return nil
	}
	for _, k := range keys {
		if err := s.deps.Resets.Publish(ctx, string(k)); err != nil {
			return err
		}
	}
	return nil
}

// resetTarget reads the budget a reset names: a policy's (policy=) or a
// scope's (scope=), not both.
func (s *Server) resetTarget(args *fasthttp.Args) (counterTarget, int, *catalog.ValidationError) {
	if !args.Has("policy") {
		return s.counterTarget(args)
	}
	if args.Has("scope") {
		return counterTarget{}, fasthttp.StatusBadRequest, badField("policy", "give scope or policy, not both")
	}
	return s.policyTarget(args)
}

// counterTarget reads and checks scope and key: 400 naming the field for a
// missing or malformed one, 404 for a scope, tenant or rule that does not
// exist.
func (s *Server) counterTarget(args *fasthttp.Args) (counterTarget, int, *catalog.ValidationError) {
	name, key := string(args.Peek("scope")), string(args.Peek("key"))
	if name == "" {
		return counterTarget{}, fasthttp.StatusBadRequest, badField("scope", "missing; want one of api_key, ip, rule, tenant (or policy=NAME)")
	}
	scope, ok := counterScopes[name]
	if !ok {
		return counterTarget{}, fasthttp.StatusNotFound, badField("scope", strconv.Quote(name)+" is not one of api_key, ip, rule, tenant")
	}
	if fe := checkName("key", key, true, maxKeyLen); fe != nil {
		return counterTarget{}, fasthttp.StatusBadRequest, fe
	}
	parts, status, fe := s.counterParts(scope, key)
	if fe != nil {
		return counterTarget{}, status, fe
	}
	k := limit.ScopeKey(nil, scope, parts...)
	return counterTarget{scope: name, keys: [][]byte{k}, params: []store.Params{{}},
		answer: map[string]any{"scope": name, "key": key},
		log:    []any{"scope", name, "key", key, "store_key", string(k)}}, 0, nil
}

// counterParts are the parts of scope's store key for the key value: the
// IP in the proxy's text form, the API key, a known tenant, or a rule's
// tenant and resource ("tenant/resource", "*anonymous*/resource/IP").
func (s *Server) counterParts(scope limit.Scope, key string) ([]string, int, *catalog.ValidationError) {
	switch scope {
	case limit.ScopeIP:
		ip, err := netip.ParseAddr(key)
		if err != nil {
			return nil, fasthttp.StatusBadRequest, badField("key", strconv.Quote(key)+" is not an IP address")
		}
		return []string{ip.Unmap().String()}, 0, nil
	case limit.ScopeTenant:
		if _, ok := s.deps.Catalog.Tenant(key); !ok {
			return nil, fasthttp.StatusNotFound, badField("key", "no tenant "+strconv.Quote(key))
		}
	case limit.ScopeRule:
		return s.ruleParts(key)
	}
	return []string{key}, 0, nil
}

// ruleParts reads a rule's key: "tenant/resource", or for the anonymous
// rule, which limits each client IP, "*anonymous*/resource/IP".
func (s *Server) ruleParts(key string) ([]string, int, *catalog.ValidationError) {
	parts := strings.SplitN(key, "/", 3)
	anon := parts[0] == catalog.AnonymousTenant
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" || anon != (len(parts) == 3) {
		return nil, fasthttp.StatusBadRequest, badField("key", strconv.Quote(key)+
			" is not tenant/resource, or "+catalog.AnonymousTenant+"/resource/IP for the anonymous rule")
	}
	if _, ok := s.deps.Catalog.Rule(parts[0], parts[1]); !ok {
		return nil, fasthttp.StatusNotFound, badField("key", "no rule for tenant "+strconv.Quote(parts[0])+" and resource "+strconv.Quote(parts[1]))
	}
	if anon {
		ip, err := netip.ParseAddr(parts[2])
		if err != nil {
			return nil, fasthttp.StatusBadRequest, badField("key", strconv.Quote(parts[2])+" is not an IP address")
		}
		parts[2] = ip.Unmap().String()
	}
	return parts, 0, nil
}
