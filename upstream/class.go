package upstream

import (
	"errors"

	"github.com/valyala/fasthttp"
)

// Class says who an answer on the request path speaks for. Every answer
// belongs to exactly one class, decided by Classify; only the upstream
// classes (Success, Backpressure, Failure) may feed breakers, passive
// ejection, the adaptive signals and the concurrency limit. The others are
// counted in their own metrics and nowhere else, so that neither a client
// nor the gateway itself can make a healthy upstream look broken.
type Class uint8

const (
	// Success is any answer of the upstream not listed below.
	Success Class = iota
	// ClientFault is a request the client broke: its body stream failed
	// (malformed framing, over the size limit, too slow, disconnected).
	// The request never reached the upstream whole.
	ClientFault
	// Gateway is an answer the gateway gave without the upstream: no target
	// could take the request.
	Gateway
	// Backpressure is an upstream saying it is overloaded: 503 or 429. It
	// shrinks the concurrency limit and raises the pressure, but ejects
	// nothing and trips no breaker: a backend that sheds is working.
	Backpressure
	// Failure is a target failing: connection refused or reset, a timeout,
	// or a 5xx other than 503.
	Failure
)

var classNames = [...]string{Success: "success", ClientFault: "client_fault", Gateway: "gateway",
	Backpressure: "backpressure", Failure: "failure"}

// String returns the class's name, as in metric labels.
func (c Class) String() string { return classNames[c] }

// Upstream reports whether the class is an answer of the upstream (Success,
// Backpressure or Failure).
func (c Class) Upstream() bool { return c == Success || c == Backpressure || c == Failure }

// ClientBodyError is the error a request body stream returns when the
// client fails to deliver its body. A body stream given to Pool.Do must wrap
// its client-side read errors in it: Pool.Do then counts nothing against
// the target and returns the error, which Classify sorts as ClientFault.
type ClientBodyError struct{ Err error }

func (e *ClientBodyError) Error() string { return "client request body: " + e.Err.Error() }
func (e *ClientBodyError) Unwrap() error { return e.Err }

// Classify sorts the result of Pool.Do: its error and, when the error is
// nil, the response status.
func Classify(err error, status int) Class {
	if err == nil {
		return classifyStatus(status)
	}
	var cb *ClientBodyError
	switch {
	case errors.As(err, &cb):
		return ClientFault
	case errors.Is(err, ErrNoHealthy):
		return Gateway
	}
	return Failure
}

func classifyStatus(status int) Class {
	switch {
	case status == fasthttp.StatusServiceUnavailable || status == fasthttp.StatusTooManyRequests:
		return Backpressure
	case status >= 500:
		return Failure
	}
	return Success
}
