package allreduce

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// rawCodec is the gRPC codec of the data plane: messages are bytes, no protobuf. Sending, the
// Payload encodes (casts, copies) straight into a buffer from grpcSendPool that gRPC frees
// after writing it. Receiving, when the pieces gRPC read the message into lie back to back in
// one slab of the transport's receive pool (grpc_rx.go), the message is a view of them, and
// the pieces are held (mem.Buffer refs) until the transport releases the message; otherwise
// they are copied once into a buffer the transport reuses. Registered by name so both ends
// agree on the content subtype.
//
// A data-plane message is a 3-byte codec header — rawMagic and the padding's length (uint16
// little-endian) — the frame, and padding: gRPC reads a DATA frame of at most 1 KiB into a
// fresh allocation instead of a pooled buffer, so a message whose last HTTP/2 frame would be
// that small is padded until it is not (at most 1 KiB per message), and can stay one view.
// Rendezvous messages (*[]byte) are plain bytes.
type rawCodec struct{}

const (
	rawCodecName = "goddp-raw"
	rawMagic     = 0xD2
	rawHdr       = 3
	grpcPrefix   = 5    // gRPC's message prefix: compression flag and length
	grpcPoolMin  = 1025 // gRPC pools a DATA frame's buffer from this size on
)

// rawPad is how much padding a message of n frame bytes gets (see rawCodec).
func rawPad(n int) int {
	t := grpcPrefix + rawHdr + n
	if t < grpcPoolMin {
		return 0 // one small frame: copied on receipt, cheaply
	}
	if tail := t % rxFrameMax; tail != 0 && tail < grpcPoolMin {
		return grpcPoolMin - tail
	}
	return 0
}

func init() { encoding.RegisterCodecV2(rawCodec{}) }

// outMsg is what the data plane sends: a Payload, encoded by Marshal.
type outMsg struct{ p Payload }

// inMsg is what it receives into. rx is the transport's receive pool (nil with TLS); Unmarshal
// sets buf to the message: a view of held (pieces kept referenced until release) or a prefix
// of own (a buffer reused message after message).
type inMsg struct {
	rx   *rxPool
	buf  []byte
	own  []byte
	held mem.BufferSlice
}

func (rawCodec) Name() string { return rawCodecName }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *outMsg:
		n := m.p.Size()
		pad := rawPad(n)
		b := grpcSendPool.Get(rawHdr + n + pad)
		buf := *b
		buf[0] = rawMagic
		binary.LittleEndian.PutUint16(buf[1:], uint16(pad))
		m.p.Encode(buf[rawHdr : rawHdr+n])
		clear(buf[rawHdr+n:])
		return mem.BufferSlice{mem.NewBuffer(b, grpcSendPool)}, nil
	case *[]byte: // rendezvous messages
		return mem.BufferSlice{mem.SliceBuffer(*m)}, nil
	}
	return nil, fmt.Errorf("allreduce: raw codec cannot marshal %T", v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *inMsg:
		total := data.Len()
		var hdr [rawHdr]byte
		if total < rawHdr || readPrefix(data, hdr[:]) != rawHdr || hdr[0] != rawMagic {
			return fmt.Errorf("allreduce: data-plane message without its codec header (%d bytes)", total)
		}
		n := total - rawHdr - int(binary.LittleEndian.Uint16(hdr[1:]))
		if n < 0 {
			return fmt.Errorf("allreduce: data-plane message of %d bytes with more padding than that", total)
		}
		if m.rx != nil {
			if p := contiguous(data); p != nil && m.rx.holds(uintptr(p), uintptr(p)+uintptr(total)) {
				for _, b := range data {
					b.Ref() // dropped by release
				}
				m.held = data
				m.buf = unsafe.Slice((*byte)(unsafe.Add(p, rawHdr)), n)
				m.rx.views.Add(1)
				return nil
			}
			if n >= rxFrameMax {
				m.rx.copies.Add(1)
			}
		}
		if cap(m.own) < n {
			m.own = make([]byte, n)
		}
		m.buf = m.own[:n]
		skip, out := rawHdr, m.buf
		for _, b := range data {
			d := b.ReadOnlyData()
			if skip >= len(d) {
				skip -= len(d)
				continue
			}
			d, skip = d[skip:], 0
			out = out[copy(out, d):]
			if len(out) == 0 {
				break
			}
		}
		return nil
	case *[]byte:
		*m = data.Materialize()
		return nil
	}
	return fmt.Errorf("allreduce: raw codec cannot unmarshal into %T", v)
}

// readPrefix copies the first len(dst) bytes of data into dst.
func readPrefix(data mem.BufferSlice, dst []byte) int {
	k := 0
	for _, b := range data {
		k += copy(dst[k:], b.ReadOnlyData())
		if k == len(dst) {
			break
		}
	}
	return k
}

// release drops the pieces a view held.
func (m *inMsg) release() {
	if m.held != nil {
		m.held.Free()
		m.held = nil
	}
	m.buf = nil
}

// contiguous returns where data starts if its pieces lie back to back in memory, else nil.
func contiguous(data mem.BufferSlice) unsafe.Pointer {
	var start unsafe.Pointer
	var next uintptr
	for _, b := range data {
		d := b.ReadOnlyData()
		if len(d) == 0 {
			continue
		}
		p := unsafe.Pointer(unsafe.SliceData(d))
		if start == nil {
			start = p
		} else if uintptr(p) != next {
			return nil
		}
		next = uintptr(p) + uintptr(len(d))
	}
	return start
}
