package upstream

import (
	"errors"
	"fmt"

	"github.com/valyala/fasthttp"
)

var (
	// ErrNoHealthy is returned by Pool.Do when no target may take the request:
	// every target is unhealthy, ejected or behind an open breaker. The proxy
	// answers 503.
	ErrNoHealthy = errors.New("upstream: no healthy target")

	// ErrTimeout is returned by Pool.Do when the pool timeout passed before the
	// response arrived. It wraps fasthttp.ErrTimeout. The proxy answers 504.
	ErrTimeout = fmt.Errorf("upstream: timeout: %w", fasthttp.ErrTimeout)
)

// Every other error from Pool.Do is a connection failure (the proxy answers
// 502); it is a *TargetError.

// TargetError is a failed attempt on one target. Kind is ErrTimeout for a
// timeout and nil for a connection failure; Err is fasthttp's error.
type TargetError struct {
	Upstream string
	Target   string
	Kind     error
	Err      error
}

func (e *TargetError) Error() string {
	if e.Kind != nil {
		return fmt.Sprintf("upstream %s: target %s: %v: %v", e.Upstream, e.Target, e.Kind, e.Err)
	}
	return fmt.Sprintf("upstream %s: target %s: %v", e.Upstream, e.Target, e.Err)
}

// Unwrap lets errors.Is find both the kind (ErrTimeout) and fasthttp's error.
func (e *TargetError) Unwrap() []error {
	if e.Kind == nil {
		return []error{e.Err}
	}
	return []error{e.Kind, e.Err}
}

// dialError marks a failure to connect: nothing of the request was sent, so
// another target may take it whatever its method.
type dialError struct{ err error }

func (e *dialError) Error() string { return "cannot connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// errorKind sorts a fasthttp error: dialed reports a connection that was never
// established, timeout a deadline that passed.
func errorKind(err error) (dialed, timeout bool) {
	var de *dialError
	if errors.As(err, &de) {
		return true, false
	}
	if errors.Is(err, fasthttp.ErrTimeout) {
		return false, true
	}
	var te interface{ Timeout() bool }
	return false, errors.As(err, &te) && te.Timeout()
}
