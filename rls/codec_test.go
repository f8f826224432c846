package rls

import (
	"context"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	gproto "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestCodecWritesWhatTheProtoCodecWrites marshals the service's answers (of
// one descriptor, and of 64: past the size gRPC pools buffers from), an
// answer with every field set, and a message without generated code (the
// health check's) with the service's codec and with gRPC's proto codec: the
// bytes are the same (but for the order of a map's entries, which neither
// fixes), and an answer reads back to the same message.
func TestCodecWritesWhatTheProtoCodecWrites(t *testing.T) {
	srv := hotFilesServer(t)
	var msgs []any
	for _, n := range []int{1, 64} {
		resp, err := srv.svc.ShouldRateLimit(context.Background(), hotFilesRequest(n))
		require.NoError(t, err)
		msgs = append(msgs, resp)
	}
	require.False(t, mem.IsBelowBufferPoolingThreshold(gproto.Size(msgs[1].(*rlsv3.RateLimitResponse))), "the answer of 64 is written in a pooled buffer")
	meta, err := structpb.NewStruct(map[string]any{"tenant": "acme", "used": 3.0})
	require.NoError(t, err)
	msgs = append(msgs, &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code:               rlsv3.RateLimitResponse_OVER_LIMIT,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: "per-user", RequestsPerUnit: 5, Unit: rlsv3.RateLimitResponse_RateLimit_HOUR},
			LimitRemaining:     0,
			DurationUntilReset: durationpb.New(3679e9),
		}},
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "Retry-After", Value: "3679"}},
		RequestHeadersToAdd:  []*corev3.HeaderValue{{Key: "X-Tenant", Value: "acme"}},
		RawBody:              []byte(`{"error":"rate limited"}`),
		DynamicMetadata:      meta,
	}, &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})

	ours, theirs := newCodec(), encoding.GetCodecV2(proto.Name)
	for _, m := range msgs {
		got, err := ours.Marshal(m)
		require.NoError(t, err)
		want, err := theirs.Marshal(m)
		require.NoError(t, err)
		resp, ok := m.(*rlsv3.RateLimitResponse)
		if !ok || resp.DynamicMetadata == nil { // a map's entries come in any order
			assert.Equal(t, want.Materialize(), got.Materialize(), "%T", m)
		}
		if ok {
			back := new(rlsv3.RateLimitResponse)
			require.NoError(t, ours.Unmarshal(got, back))
			assert.True(t, gproto.Equal(resp, back), "%v read back as %v", resp, back)
		}
		got.Free()
		want.Free()
	}
}
