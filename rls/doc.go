// Package rls serves Envoy's rate limit service (envoy.service.ratelimit.v3
// RateLimitService/ShouldRateLimit) over gRPC on its own listener, deciding
// with the same limiter, store and budgets as the proxy and the check API:
// a mesh (Envoy, Istio, Envoy Gateway) points its rate_limit_service cluster
// at Sentinel instead of envoyproxy/ratelimit.
//
// Each descriptor of a request is one limit.Request: its entries name the
// tenant, the resource, the API key and the client address (entry keys
// tenant, resource, key and remote_address by default; grpc.domains renames
// them per domain), and hits_addend is the tokens it takes. The answer for a
// descriptor is OVER_LIMIT when the limiter refuses it, OK otherwise, with
// the limit that decided it; the overall code is the worst. A domain that is
// not served, or a descriptor whose entries name no limit, is OK with no
// limit (Envoy's convention). The listener also serves the gRPC health
// service and server reflection.
//
// A domain of an envoyproxy/ratelimit configuration file (grpc.config_files,
// LoadFiles) is answered by the file instead, as envoyproxy/ratelimit
// answers it: each descriptor finds its rule in the file's descriptor tree
// (match.go), the matched rules' replaces apply in one pass, and each
// descriptor that keeps a rule is a limit.Request naming one limit.Limit,
// keyed by the domain, the unit and the descriptor's entries
// (decide_files.go). A descriptor's own limit replaces its rule
// (Config.DescriptorOverride, on by default) and counts in a budget per
// limit. A refused descriptor spends what is left of its budget, since
// envoyproxy/ratelimit counts refused hits, and takes its budget's
// over-limit marker, so that a look tells a spent budget (OK) from one a
// hit went over (OVER_LIMIT).
package rls
