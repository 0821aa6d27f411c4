package allreduce

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/goddp/goddp/allreduce/link"
)

// Every message between ranks is one frame: a fixed 40-byte little-endian header, then the
// payload. The header repeats, in every chunk of every collective, what both sides must agree on
// (kind, wire, op, sequence number, element count) so that ranks that call different collectives,
// or the same one with different sizes or wire formats, get an error instead of garbage.
//
//	off size field
//	  0    2 magic     frameMagic
//	  2    1 version   frameVersion
//	  3    1 kind      frameKind
//	  4    1 wire      Wire (payload element encoding)
//	  5    1 op        Op (all-reduce) or 0
//	  6    2 origin    rank the data (or abort) originates from
//	  8    8 seq       collective sequence number, the same on every rank
//	 16    8 count     elements of the collective's buffer (bytes for byte collectives)
//	 24    8 offset    first element of this chunk within the buffer
//	 32    4 n         elements in this chunk's payload
//	 36    4 aux       kind specific (ring step for all-reduce, culprit rank+1 for abort)

const (
	frameMagic      = 0xDD9E
	frameVersion    = 1
	frameHeaderSize = link.FrameHeaderSize // 40; the planes know it from link
	maxFramePayload = link.MaxFramePayload // chunks are far smaller (Config.ChunkBytes)
)

// frameKind says which collective a frame belongs to.
// WARNING: ONLY APPEND TO THIS LIST! The numbers are on the wire.
type frameKind uint8

const (
	kindInvalid frameKind = iota
	kindAllReduce
	kindBroadcast
	kindAllGather
	kindBarrier
	kindAbort     // a rank failed; payload is the reason text, aux-1 the rank blamed
	kindKeepalive // "still here": sent by an idle sender so its neighbour does not time out
	kindReduceScatter
	kindAllGatherSegments
	kindGatherTo // an all-gather whose blocks only some ranks keep (Group.GatherTo)
	kindCount    // not a kind: the number of kinds
)

func (k frameKind) String() string {
	switch k {
	case kindAllReduce:
		return "all-reduce"
	case kindBroadcast:
		return "broadcast"
	case kindAllGather:
		return "all-gather"
	case kindBarrier:
		return "barrier"
	case kindAbort:
		return "abort"
	case kindKeepalive:
		return "keepalive"
	case kindReduceScatter:
		return "reduce-scatter"
	case kindAllGatherSegments:
		return "all-gather-segments"
	case kindGatherTo:
		return "gather-to"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// frameHeader is the decoded header.
type frameHeader struct {
	kind   frameKind
	wire   Wire
	op     Op
	origin int
	seq    uint64
	count  uint64
	offset uint64
	n      uint32
	aux    uint32
}

// payloadBytes is the payload length the header announces.
func (h *frameHeader) payloadBytes() int { return int(h.n) * h.wire.elemSize() }

// putFrameHeader writes h into b[:frameHeaderSize].
func putFrameHeader(b []byte, h *frameHeader) {
	_ = b[frameHeaderSize-1]
	binary.LittleEndian.PutUint16(b[0:], frameMagic)
	b[2] = frameVersion
	b[3] = byte(h.kind)
	b[4] = byte(h.wire)
	b[5] = byte(h.op)
	binary.LittleEndian.PutUint16(b[6:], uint16(h.origin))
	binary.LittleEndian.PutUint64(b[8:], h.seq)
	binary.LittleEndian.PutUint64(b[16:], h.count)
	binary.LittleEndian.PutUint64(b[24:], h.offset)
	binary.LittleEndian.PutUint32(b[32:], h.n)
	binary.LittleEndian.PutUint32(b[36:], h.aux)
}

var errShortFrame = errors.New("frame shorter than its header")

// decodeFrame parses a frame and returns its header and payload (aliasing b). It checks
// everything that can be checked without knowing what the receiver expects: magic, version,
// kind, wire, and that the payload length matches the header. It never panics.
func decodeFrame(b []byte) (frameHeader, []byte, error) {
	var h frameHeader
	if len(b) < frameHeaderSize {
		return h, nil, fmt.Errorf("%w (%d bytes)", errShortFrame, len(b))
	}
	if m := binary.LittleEndian.Uint16(b[0:]); m != frameMagic {
		return h, nil, fmt.Errorf("bad frame magic %#04x", m)
	}
	if v := b[2]; v != frameVersion {
		return h, nil, fmt.Errorf("unsupported frame version %d", v)
	}
	h.kind = frameKind(b[3])
	h.wire = Wire(b[4])
	h.op = Op(b[5])
	h.origin = int(binary.LittleEndian.Uint16(b[6:]))
	h.seq = binary.LittleEndian.Uint64(b[8:])
	h.count = binary.LittleEndian.Uint64(b[16:])
	h.offset = binary.LittleEndian.Uint64(b[24:])
	h.n = binary.LittleEndian.Uint32(b[32:])
	h.aux = binary.LittleEndian.Uint32(b[36:])
	if h.kind == kindInvalid || h.kind >= kindCount {
		return h, nil, fmt.Errorf("unknown frame kind %d", uint8(h.kind))
	}
	if h.wire.elemSize() == 0 {
		return h, nil, fmt.Errorf("unknown wire format %d", uint8(h.wire))
	}
	if h.op > Avg {
		return h, nil, fmt.Errorf("unknown op %d", uint8(h.op))
	}
	if uint64(h.n)*uint64(h.wire.elemSize()) > maxFramePayload {
		return h, nil, fmt.Errorf("frame payload of %d elements is too large", h.n)
	}
	if h.offset > h.count || uint64(h.n) > h.count-h.offset {
		return h, nil, fmt.Errorf("frame chunk [%d,+%d) outside a buffer of %d", h.offset, h.n, h.count)
	}
	payload := b[frameHeaderSize:]
	if want := h.payloadBytes(); len(payload) != want {
		return h, nil, fmt.Errorf("frame payload is %d bytes, header says %d", len(payload), want)
	}
	return h, payload, nil
}
