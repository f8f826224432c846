package confutil

import (
	"fmt"
	"net"
	"net/netip"
	"time"
)

// SetDefault sets *p to def when *p is the zero value.
func SetDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// Positive returns an error naming key when d is not a positive duration.
func Positive(key string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%s: %s is not a positive duration", key, d)
	}
	return nil
}

// AtLeastOne returns an error naming key when n is below 1.
func AtLeastOne(key string, n int) error {
	if n < 1 {
		return fmt.Errorf("%s: %d must be at least 1", key, n)
	}
	return nil
}

// Loopback reports whether hostPort's host is a loopback address or
// "localhost": a listener there is reachable from this machine only.
func Loopback(hostPort string) bool {
	host, _, _ := net.SplitHostPort(hostPort)
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
