//go:build !race

package rls

import (
	"context"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestShouldRateLimitFilesAllocatesItsAnswerOnly calls the service with
// descriptors of a file decided from local leases: a call of one
// descriptor makes its answer in one allocation, and one of several
// descriptors in three (the response, its list and the statuses), whatever
// their number. The decision itself allocates nothing.
func TestShouldRateLimitFilesAllocatesItsAnswerOnly(t *testing.T) {
	srv := hotFilesServer(t)
	ctx := context.Background()
	for _, tc := range []struct {
		descriptors int
		most        float64
	}{{1, 1}, {2, 3}, {6, 3}} {
		req := hotFilesRequest(tc.descriptors)
		call := func() {
			resp, err := srv.svc.ShouldRateLimit(ctx, req)
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatal(resp, err)
			}
		}
		for range 100 { // past the keys' first uses and first leases
			call()
		}
		if got := testing.AllocsPerRun(200, call); got > tc.most {
			t.Errorf("%d descriptors: %.1f allocations a call, want at most %.0f", tc.descriptors, got, tc.most)
		}
	}
}
