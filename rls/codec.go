package rls

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// codec writes the service's answers with the code generated for their
// messages (go-control-plane's MarshalToSizedBufferVTStrict, which walks no
// descriptors), and reads every request and writes every other message as
// gRPC's own proto codec does. The bytes are the same either way.
type codec struct{ proto encoding.CodecV2 }

// vtMessage is a message with generated marshalling code.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict(b []byte) (int, error)
}

func newCodec() codec { return codec{proto: encoding.GetCodecV2(proto.Name)} }

// Marshal writes v in one buffer, from gRPC's pool past the size it pools
// from, as its proto codec does. The generated code writes from the end of
// the buffer back: a message whose size it did not foresee (none) is
// written by the proto codec instead.
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return c.proto.Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		b := make([]byte, size)
		if n, err := m.MarshalToSizedBufferVTStrict(b); err != nil || n != size {
			return c.proto.Marshal(v)
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if n, err := m.MarshalToSizedBufferVTStrict((*buf)[:size]); err != nil || n != size {
		pool.Put(buf)
		return c.proto.Marshal(v)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c codec) Name() string { return proto.Name }
