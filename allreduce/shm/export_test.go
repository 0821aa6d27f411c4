package shm

import "github.com/goddp/goddp/allreduce/link"

// Internals for shm's external tests (shm_test.go), which run whole groups over the decorator
// and so import the core, which imports this package.

var (
	ErrFrame = errShmFrame
	ErrHello = errShmHello
)

const (
	RecHeader = recHeader
	RecFrame  = recFrame
	RecSkip   = recSkip
)

// RingLinks counts the links of tr (a decorator) that carry a shared-memory ring, out and in.
// (A world that finished a collective has every ring it will have: the first Send of a link
// waits for the answer to its offer.)
func RingLinks(tr link.Transport) (out, in int) {
	s, ok := tr.(*Transport)
	if !ok {
		return 0, 0
	}
	for r := range s.out {
		o, i := s.out[r], s.in[r]
		o.mu.Lock()
		i.mu.Lock()
		if o.r != nil {
			out++
		}
		if i.r != nil {
			in++
		}
		i.mu.Unlock()
		o.mu.Unlock()
	}
	return out, in
}

// OutRing is the sending side of tr's ring toward peer to, for tests that write records by
// hand (only while no Send to that peer runs); nil when the link has no ring.
func OutRing(tr link.Transport, to int) *TestRing {
	o := tr.(*Transport).out[to]
	if o.r == nil {
		return nil
	}
	return &TestRing{o: o}
}

// TestRing is a sending side's ring as tests see it.
type TestRing struct{ o *shmOut }

func (t *TestRing) Size() uint64                             { return t.o.r.size }
func (t *TestRing) Tail() uint64                             { return t.o.tail }
func (t *TestRing) Room(end uint64) bool                     { return t.o.r.room(end) }
func (t *TestRing) PutRecord(pos uint64, kind uint32, n int) { t.o.r.putRecord(pos, kind, n) }

// Publish makes the records up to tail visible to the receiver, as the sender's next position.
func (t *TestRing) Publish(tail uint64) {
	t.o.tail = tail
	t.o.r.publish(tail)
}
