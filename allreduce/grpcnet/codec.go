package grpcnet

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/goddp/goddp/allreduce/link"
)

// rawCodec is the gRPC codec of the data plane: messages are bytes, no protobuf. Sending, the
// Payload encodes (casts, copies) straight into a buffer from gRPC's pool that gRPC frees after
// writing it; receiving, the pieces gRPC read off the connection are copied once into a buffer
// the transport reuses. Registered by name so both ends agree on the content subtype.
type rawCodec struct{}

const rawCodecName = "goddp-raw"

func init() { encoding.RegisterCodecV2(rawCodec{}) }

// outMsg is what the data plane sends: a Payload, encoded by Marshal.
type outMsg struct{ p link.Payload }

// inMsg is what it receives into: buf is reused message after message.
type inMsg struct{ buf []byte }

func (rawCodec) Name() string { return rawCodecName }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *outMsg:
		pool := grpcSendPool
		n := m.p.Size()
		b := pool.Get(n)
		*b = (*b)[:n]
		m.p.Encode(*b)
		return mem.BufferSlice{mem.NewBuffer(b, pool)}, nil
	case *[]byte: // rendezvous messages
		return mem.BufferSlice{mem.SliceBuffer(*m)}, nil
	}
	return nil, fmt.Errorf("allreduce: raw codec cannot marshal %T", v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	n := data.Len()
	switch m := v.(type) {
	case *inMsg:
		if cap(m.buf) < n {
			m.buf = make([]byte, n)
		}
		m.buf = m.buf[:n]
		data.CopyTo(m.buf)
		return nil
	case *[]byte:
		*m = data.Materialize()
		return nil
	}
	return fmt.Errorf("allreduce: raw codec cannot unmarshal into %T", v)
}
