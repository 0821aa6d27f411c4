//go:build linux

package shm

import (
	"errors"
	"testing"
	"unsafe"
)

// FuzzShmRecord feeds arbitrary record headers at arbitrary positions and published tails to
// the receiver's check: a record is accepted only if its frame lies inside the ring and below
// the tail, and anything else is an error, never a panic or a view out of bounds.
// (go test -fuzz FuzzShmRecord ./allreduce/shm/)
func FuzzShmRecord(f *testing.F) {
	r, file, err := newOfferedRing(3 * 4096) // not a power of two: positions near 2^64 do not wrap evenly
	if err != nil {
		f.Skipf("no shared memory here: %v", err)
	}
	file.Close()
	defer r.unmap()
	for _, c := range []struct {
		pos, tail uint64
		n, kind   uint32
	}{
		{0, 72, 64, recFrame}, {8, 16, 0, recSkip}, {12280, 12288, 0, recSkip}, {0, 8, 4096, recStream},
		{16, 24, 0, recFrame}, {0, 1 << 40, 1 << 31, recFrame}, {^uint64(0) - 15, ^uint64(0), 8, recFrame},
		{4096, 4200, 100, 7}, {12288, 12296, 0, recSkip},
	} {
		f.Add(c.pos, c.tail, c.n, c.kind)
	}
	f.Fuzz(func(t *testing.T, pos, tail uint64, n, kind uint32) {
		pos &^= 7 // the receiver only ever reads at multiples of 8
		if tail <= pos {
			return // nothing published: not read
		}
		r.putRecord(pos, kind, int(n))
		k, got, err := r.record(pos, tail)
		if err != nil {
			if !errors.Is(err, errShmFrame) {
				t.Fatalf("error %v is not errShmFrame", err)
			}
			return
		}
		if k != kind || (k != recSkip && uint32(got) != n) {
			t.Fatalf("record (%d, %d) read as (%d, %d)", kind, n, k, got)
		}
		if k == recFrame {
			if pos%r.size+recHeader+uint64(got) > r.size || recHeader+align8(got) > tail-pos {
				t.Fatalf("accepted a frame of %d bytes at %d, tail %d, ring %d", got, pos, tail, r.size)
			}
			v := r.at(pos+recHeader, got)
			off := uintptr(unsafe.Pointer(&v[0])) - uintptr(unsafe.Pointer(&r.data[0]))
			if off+uintptr(got) > uintptr(len(r.data)) {
				t.Fatalf("view [%d,+%d) outside the ring of %d", off, got, len(r.data))
			}
		}
	})
}
