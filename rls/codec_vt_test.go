//go:build vtprotobuf

package rls

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestCodecUsesTheGeneratedCode: built with the tag the Makefile and the
// Dockerfile set, the answers have go-control-plane's generated marshalling
// code, which the codec uses (a renamed tag or method would leave the
// answers to reflection without a word).
func TestCodecUsesTheGeneratedCode(t *testing.T) {
	if _, ok := any(new(rlsv3.RateLimitResponse)).(vtMessage); !ok {
		t.Fatal("the answers have no generated marshalling code under the vtprotobuf tag")
	}
}
