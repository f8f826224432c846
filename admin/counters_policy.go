package admin

import (
	"errors"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/sentinel-gateway/sentinel/internal/confutil"
	"github.com/sentinel-gateway/sentinel/limit"
	"github.com/sentinel-gateway/sentinel/limit/catalog"
)

// maxPolicyValueLen bounds one key value of a policy reset. A request's
// value longer than catalog.MaxValueLen counts under its hash, so a reset
// takes values well past it, up to what a URL of the admin listener holds.
const maxPolicyValueLen = 2048

// policyTarget reads a policy reset: policy=NAME and one key=VALUE per
// attribute of the policy's key, in its order. Its budget is each of the
// policy's limits for that identity. 400 names the parameter that is
// missing or malformed, 404 a policy that does not apply on this pod.
func (s *Server) policyTarget(args *fasthttp.Args) (counterTarget, int, *catalog.ValidationError) {
	name := string(args.Peek("policy"))
	if fe := checkName("policy", name, true, maxNameLen); fe != nil {
		return counterTarget{}, fasthttp.StatusBadRequest, fe
	}
	p, ok := s.deps.Writer.PolicySet().Lookup(name)
	if !ok {
		return counterTarget{}, fasthttp.StatusNotFound, badField("policy", "no policy "+strconv.Quote(name))
	}
	var values []string
	for _, v := range args.PeekMulti("key") {
		values = append(values, string(v))
	}
	if len(values) == 0 {
		return counterTarget{}, fasthttp.StatusBadRequest, badField("key", "missing; want one key= per attribute of the policy's key, in its order")
	}
	for _, v := range values {
		if fe := checkName("key", v, true, maxPolicyValueLen); fe != nil {
			return counterTarget{}, fasthttp.StatusBadRequest, fe
		}
	}
	id, err := p.AppendIdentityOf(nil, values)
	if err != nil {
		return counterTarget{}, fasthttp.StatusBadRequest, badField("key", valueMsg(err, len(values)))
	}
	t := counterTarget{scope: "policy", answer: map[string]any{"policy": name, "key": values, "limits": limitNames(p)}}
	storeKeys := make([]string, len(p.Params))
	for i := range p.Params {
		t.keys = append(t.keys, limit.PolicyKey(nil, p, i, id))
		t.params = append(t.params, p.Params[i])
		storeKeys[i] = string(t.keys[i])
	}
	t.log = []any{"policy", name, "key", values, "store_keys", storeKeys}
	return t, 0, nil
}

// limitNames names a policy's limits as configured: "1m", "day", "bucket"
// (its labels, which the store keys hold, write a window as "1m0s").
func limitNames(p *catalog.CompiledPolicy) []string {
	names := make([]string, len(p.Labels))
	for i, label := range p.Labels {
		names[i] = label
		// A cost or count_if limit's label follows its window: "1m0s-cost".
		if w := p.Params[i].Window; w > 0 && strings.HasPrefix(label, w.String()) {
			names[i] = confutil.Duration(w).String() + strings.TrimPrefix(label, w.String())
		}
	}
	return names
}

// valueMsg says which key value is wrong when there are several.
func valueMsg(err error, n int) string {
	var ve *catalog.ValueError
	if n > 1 && errors.As(err, &ve) && ve.Index >= 0 {
		return "value " + strconv.Itoa(ve.Index+1) + " of " + strconv.Itoa(n) + ": " + ve.Msg
	}
	return err.Error()
}
