// Package parseerr deals with what the proxy cannot read as HTTP: request
// heads fasthttp fails to parse, and TLS clients on the plain-HTTP port.
//
// fasthttp describes a request it could not parse with the request's head
// quoted in the error (Authorization and API key values included), and logs
// that error once per connection. The proxy's ErrorHandler answers such
// requests (431/414 for a head over the read buffer, Answer) and counts
// them by kind in sentinel_proxy_parse_errors_total{kind}; Log, the
// server's Logger, logs them without the quoted part, at most
// server.parse_error_log_rate lines a second, and sums up the rest in one
// line. Sniff tells a TLS client from its first bytes rather than from
// whatever fasthttp makes of a ClientHello.
package parseerr
