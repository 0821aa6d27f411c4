package shm

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// The shared-memory ring of one direction of a same-host link (shm.go says how links use it).
//
// A ring is a sealed memfd the sending rank creates and the receiving rank maps too: a control
// page, then size bytes of data. Positions are byte counts since the link opened; the data at
// position p lies at p % size. Every frame is a record: an 8-byte header (length, kind) and,
// when the frame fits in half the ring, the frame itself, cast straight into the ring by the
// sender. A frame too large for the ring is a stream record, and the frame follows as a
// message on the link. A record that would cross the ring's end leaves a skip record and starts
// the next lap. Records start at multiples of 8.
//
// The control page (offsets in bytes; each word on its own cache line):
//
//	  0 head      uint64  receiver: released up to here (the sender may overwrite below it)
//	 64 waiting   uint32  sender: about to sleep for space; the receiver clears it and wakes
//	128 wakes     uint32  the sender's futex word, bumped by the receiver
//	192 tail      uint64  sender: records published up to here
//	256 nonce     [16]    the creator's random value, checked by the peer after opening the file
//	320 rwaiting  uint32  receiver: about to sleep for records; the sender clears it and wakes
//	384 rwakes    uint32  the receiver's futex word, bumped by the sender
//
// Each side that waits sets its flag, reads the other's word again, and sleeps on its own futex
// word a few milliseconds at a time, checking the link, its context and Close in between; the
// other side, after storing its position, swaps the flag and, if it was set, bumps the word and
// wakes it. So a frame costs no message, no socket write and no goroutine hand-off, and a side
// that is not waiting is not woken.

const (
	shmHeader    = 4096 // the control page
	shmMaxBytes  = 1 << 30
	shmNonceSize = 16

	recHeader = 8 // a ring record: uint32 length, uint32 kind
	recFrame  = 1 // the frame follows in the ring
	recStream = 2 // the frame is the next message on the link
	recSkip   = 3 // the rest of this lap is empty: the next record starts the next lap

	recvPoll  = 5 * time.Millisecond // longest futex sleep of a waiting receiver
	spacePoll = 2 * time.Millisecond // longest futex sleep of a sender waiting for space
)

// shmRing is one direction's ring, mapped in this process.
type shmRing struct {
	mem  []byte // the whole mapping: control page, then data
	data []byte // mem[shmHeader:]
	size uint64 // len(data)
}

func (r *shmRing) word64(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&r.mem[off]))
}
func (r *shmRing) word32(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.mem[off]))
}

func (r *shmRing) head() *atomic.Uint64     { return r.word64(0) }
func (r *shmRing) waiting() *atomic.Uint32  { return r.word32(64) }
func (r *shmRing) wakes() *atomic.Uint32    { return r.word32(128) }
func (r *shmRing) tail() *atomic.Uint64     { return r.word64(192) }
func (r *shmRing) nonce() []byte            { return r.mem[256 : 256+shmNonceSize] }
func (r *shmRing) rwaiting() *atomic.Uint32 { return r.word32(320) }
func (r *shmRing) rwakes() *atomic.Uint32   { return r.word32(384) }

// room says whether the ring has space up to position end (the receiver's releases so far).
func (r *shmRing) room(end uint64) bool { return end-r.head().Load() <= r.size }

// at is the n bytes at position pos (which do not cross the ring's end).
func (r *shmRing) at(pos uint64, n int) []byte {
	off := pos % r.size
	return r.data[off : off+uint64(n) : off+uint64(n)]
}

// releaseWake (receiver) frees the ring up to end and wakes a sender waiting for space.
func (r *shmRing) releaseWake(end uint64) {
	r.head().Store(end)
	if r.waiting().Swap(0) == 1 {
		r.wakes().Add(1)
		futexWake(r.wakes())
	}
}

// waitRoom (sender) waits until the ring has room up to end. It sleeps on the wakes word a few
// milliseconds at a time and asks gone after each sleep; it returns false as soon as gone says
// the link is over.
func (r *shmRing) waitRoom(end uint64, gone func() bool) bool {
	for slept := false; !r.room(end); slept = true {
		r.waiting().Store(1)
		w := r.wakes().Load()
		if r.room(end) {
			return true
		}
		if slept && gone() {
			return false
		}
		// The receiver stores head before it clears the flag and bumps wakes: if it released
		// after the check above, wakes has moved and the wait returns at once.
		futexWait(r.wakes(), w, spacePoll)
	}
	return true
}

// publish (sender) makes the records up to end visible and wakes a receiver sleeping for them.
func (r *shmRing) publish(end uint64) {
	shmCausality.Add(1)
	r.tail().Store(end)
	if r.rwaiting().Swap(0) == 1 {
		r.rwakes().Add(1)
		futexWake(r.rwakes())
	}
}

// waitData (receiver) sleeps at most d until the sender publishes past pos; the caller checks
// again and looks at its context and link in between.
func (r *shmRing) waitData(pos uint64, d time.Duration) {
	r.rwaiting().Store(1)
	w := r.rwakes().Load()
	if r.tail().Load() > pos {
		return
	}
	futexWait(r.rwakes(), w, d)
}

// shmCausality carries, for the race detector, an order that runs through a peer process: this
// rank's sender casts a chunk into a ring and publishes it; the peer reduces it and publishes
// the result into its ring to us; our receiver reads that and then overwrites the chunk's source
// in the caller's buffer. The hardware orders this through the rings' atomic words, but the
// detector sees only this process, where nothing links the publish to the later read; so every
// publish also adds to this word and every Recv that finds a record loads it, as the standard
// library's ioSync does for reads and writes of file descriptors. One atomic per frame.
var shmCausality atomic.Uint64

func align8(n int) uint64 { return (uint64(n) + 7) &^ 7 }

// putRecord writes a record's header at pos (the frame, if any, is already behind it).
func (r *shmRing) putRecord(pos uint64, kind uint32, n int) {
	h := r.at(pos, recHeader)
	binary.LittleEndian.PutUint32(h, uint32(n))
	binary.LittleEndian.PutUint32(h[4:], kind)
}

// record reads and checks the record at pos, below the published tail (receiver side): a frame
// lies inside the ring and below tail, a skip is not at a lap's start.
func (r *shmRing) record(pos, tail uint64) (kind uint32, n int, err error) {
	if pos%8 != 0 || pos >= 1<<62 || tail-pos < recHeader { // 2^62 bytes: never reached
		return 0, 0, fmt.Errorf("%w: record at %d, published up to %d", errShmFrame, pos, tail)
	}
	h := r.at(pos, recHeader)
	n64 := uint64(binary.LittleEndian.Uint32(h))
	kind = binary.LittleEndian.Uint32(h[4:])
	switch kind {
	case recSkip:
		if pos%r.size == 0 {
			return 0, 0, fmt.Errorf("%w: skip record at the start of a lap (%d)", errShmFrame, pos)
		}
		return kind, 0, nil
	case recFrame:
		if n64 == 0 || pos%r.size+recHeader+n64 > r.size || recHeader+align8(int(n64)) > tail-pos {
			return 0, 0, fmt.Errorf("%w: frame of %d bytes at %d (ring %d, published up to %d)", errShmFrame, n64, pos, r.size, tail)
		}
		return kind, int(n64), nil
	case recStream:
		if n64 == 0 {
			return 0, 0, fmt.Errorf("%w: empty stream record at %d", errShmFrame, pos)
		}
		return kind, int(n64), nil
	}
	return 0, 0, fmt.Errorf("%w: record of kind %d at %d", errShmFrame, kind, pos)
}

// shmRings are the rings a transport mapped; they outlive Close (a collective may still be
// reading a view when the transport is aborted) until ReleaseMemory or the transport's cleanup.
type shmRings struct {
	mu    sync.Mutex
	rings []*shmRing
	done  bool
}

func (s *shmRings) add(r *shmRing) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		r.unmap()
		return false
	}
	s.rings = append(s.rings, r)
	return true
}

func (s *shmRings) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	for _, r := range s.rings {
		r.unmap()
	}
	s.rings = nil
}
