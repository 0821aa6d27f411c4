package allreduce

import (
	"bytes"
	"testing"
)

// The wire ids travel in every frame: ranks of different builds must agree on them, so they are
// only ever appended to.
func TestWire_idsNeverRenumbered(t *testing.T) {
	for w, id := range map[Wire]uint8{WireF32: 0, WireF16: 1, wireBytes: 2, WireBF16: 3} {
		if uint8(w) != id {
			t.Errorf("wire %s is %d on the wire, was %d", w, uint8(w), id)
		}
	}
	for _, w := range []Wire{WireF32, WireF16, WireBF16} {
		if got, err := ParseWire(w.String()); err != nil || got != w {
			t.Errorf("ParseWire(%q) = %v, %v", w, got, err)
		}
	}
	if WireBF16.ElemBytes() != 2 || WireF16.ElemBytes() != 2 || WireF32.ElemBytes() != 4 {
		t.Error("ElemBytes")
	}
}

func TestFrame_roundTrip(t *testing.T) {
	h := frameHeader{kind: kindAllReduce, wire: WireF16, op: Avg, origin: 3, seq: 77, count: 100, offset: 10, n: 5, aux: 2}
	b := make([]byte, frameHeaderSize+10)
	putFrameHeader(b, &h)
	copy(b[frameHeaderSize:], "0123456789")
	got, p, err := decodeFrame(b)
	if err != nil || got != h || string(p) != "0123456789" {
		t.Fatalf("decodeFrame = %+v %q %v, want %+v", got, p, err, h)
	}
	for _, bad := range [][]byte{nil, b[:10], b[:len(b)-1], append(bytes.Clone(b), 0)} {
		if _, _, err := decodeFrame(bad); err == nil {
			t.Errorf("decodeFrame(%d bytes) accepted a bad frame", len(bad))
		}
	}
}

// FuzzDecodeFrame: decoding arbitrary bytes never panics, and what it accepts re-encodes to
// the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	add := func(h frameHeader, payload string) {
		b := make([]byte, frameHeaderSize+len(payload))
		putFrameHeader(b, &h)
		copy(b[frameHeaderSize:], payload)
		f.Add(b)
	}
	add(frameHeader{kind: kindAllReduce, wire: WireF32, count: 4, n: 1}, "abcd")
	add(frameHeader{kind: kindAllReduce, wire: WireF16, op: Avg, seq: 9, count: 10, offset: 8, n: 2}, "abcd")
	add(frameHeader{kind: kindAllReduce, wire: WireBF16, op: Avg, seq: 9, count: 10, offset: 8, n: 2}, "abcd")
	add(frameHeader{kind: kindBroadcast, wire: wireBytes, count: 3, n: 3}, "xyz")
	add(frameHeader{kind: kindAbort, wire: wireBytes, count: 4, n: 4, aux: 3}, "dead")
	add(frameHeader{kind: kindKeepalive, wire: wireBytes}, "")
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, frameHeaderSize+8))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, p, err := decodeFrame(b)
		if err != nil {
			return
		}
		if len(p) != h.payloadBytes() {
			t.Fatalf("payload %d bytes, header says %d", len(p), h.payloadBytes())
		}
		re := make([]byte, frameHeaderSize)
		putFrameHeader(re, &h)
		if !bytes.Equal(re, b[:frameHeaderSize]) {
			t.Fatalf("re-encoded header differs:\n%x\n%x", re, b[:frameHeaderSize])
		}
	})
}
