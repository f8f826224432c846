// Package reply writes what the proxy and the admin listener both put on
// their answers: the rate-limit headers of a decision, Retry-After, and the
// JSON error body (Problem). Everything here allocates nothing on a reused
// buffer, so the proxy's request path may call it.
package reply
