package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/goddp/goddp/allreduce/link"
)

// Shared memory between ranks of one host, as a decorator of any data plane (in the way of
// memberlist's labelWrappedTransport): Transport wraps a Transport and, on each link to a
// peer on this host, moves the frames through a shared-memory ring (ring.go) instead of the
// link. The link stays what authenticates, fails and ends: the inner transport's handshake and
// TLS run on it before anything here, its end is the ring's end, and a frame too large for the
// ring still travels on it.
//
// Every link starts with a hello, the first message the sender sends on it:
//
//	"GDDPSHM2" | pid u64 | fd u64 | size u64 | nonce [16]   (size 0: no ring)
//
// A sender whose link is a Unix-domain socket (a peer on this host: link.Linker.LinkTo) and whose
// link.Config.SharedMemBytes is positive creates a sealed memfd ring, keeps its descriptor open, and
// offers it: its PID, the descriptor's number, the ring's size, and a random nonce the ring's
// control page also holds. The receiver's first Recv from that peer reads the hello; if its
// link from the peer is a Unix socket too and its own SharedMemBytes is not negative, it opens
// /proc/PID/fd/N (the same user in the same PID namespace), checks the seals, the size and the
// nonce, and maps it; either way it answers one byte back along the link (link.Linker.Answer: 1
// mapped, 0 not). The sender's first Send waits for that answer (bounded by its context, as any
// Send), and with a 0, or no offer, the link carries frames as messages, as between hosts.
//
// From then on the ring orders the link: every frame is a record in the ring, which the
// receiver's Recv reads directly (a view of the ring, released at the next Recv, as the
// Transport contract allows) and sleeps on with a futex when there is none; a frame over half
// the ring is a stream record and follows as a message on the link. A waiting side checks,
// between sleeps of a few milliseconds, whether the link has ended (link.Linker.LinkDown: a dead
// peer is noticed within them), its context, and Close; records published before the link
// ended are delivered first.
//
// Trust: the peer shares the pages, so a peer could scribble on a frame after sending it; a
// peer is authenticated by the inner transport before any hello is read. The group checks
// every frame's header as it does for frames that came as messages.

const (
	shmHelloMagic = "GDDPSHM2"
	shmHelloSize  = 8 + 8 + 8 + 8 + shmNonceSize // magic, pid, fd, size, nonce
)

var (
	errShmFrame = errors.New("bad shared-memory frame")
	errShmHello = errors.New("the link did not start with the shared-memory hello (another build?)")
)

// Transport is the decorator around one data plane (Wrap): a link.Transport, a link.Aborter
// (the plane's Abort under it) and a link.MemoryReleaser (ReleaseMemory unmaps the rings).
type Transport struct {
	inner link.Transport
	lk    link.Linker
	cfg   link.Config
	log   *slog.Logger
	rings *shmRings // every ring mapped here, unmapped by ReleaseMemory

	out []*shmOut
	in  []*shmIn

	closed chan struct{}
	once   sync.Once
}

var (
	_ link.Transport      = (*Transport)(nil)
	_ link.Aborter        = (*Transport)(nil)
	_ link.MemoryReleaser = (*Transport)(nil)
)

// shmOut is the sending side of a link; only Send uses it.
type shmOut struct {
	hello bool   // the hello went out
	tail  uint64 // ring position after the last record placed
	err   error  // sticky: the link cannot go on

	mu sync.Mutex // guards r for readers other than Send (tests)
	r  *shmRing   // this rank's ring toward the peer, or nil
}

// shmIn is the receiving side of a link; only Recv uses it.
type shmIn struct {
	hello   bool   // the hello came
	next    uint64 // ring position of the next record
	held    uint64 // the last Recv returned a view up to here, not yet released
	holding bool
	err     error // sticky

	mu sync.Mutex // guards r for readers other than Recv (tests)
	r  *shmRing   // the peer's ring, or nil
}

// Wrap wraps inner (a data plane implementing link.Linker; any other is returned as it
// is). Every rank of a group must wrap alike: the hello is on every link.
func Wrap(inner link.Transport, cfg link.Config) link.Transport {
	lk, ok := inner.(link.Linker)
	if !ok {
		return inner
	}
	s := &Transport{inner: inner, lk: lk, cfg: cfg, log: cfg.Logger.With("rank", cfg.Rank), rings: &shmRings{},
		out: make([]*shmOut, cfg.WorldSize), in: make([]*shmIn, cfg.WorldSize), closed: make(chan struct{})}
	for i := range s.out {
		s.out[i], s.in[i] = &shmOut{}, &shmIn{}
	}
	// The rings are unmapped by the Group once no collective can use them (ReleaseMemory); for
	// a transport dropped without that, when it is garbage.
	runtime.AddCleanup(s, func(r *shmRings) { r.release() }, s.rings)
	return s
}

func (s *Transport) peer(r int) bool { return r >= 0 && r < len(s.out) && r != s.cfg.Rank }

func (s *Transport) Send(ctx context.Context, to int, p link.Payload) error {
	if !s.peer(to) {
		return s.inner.Send(ctx, to, p) // the inner transport names the error
	}
	o := s.out[to]
	if o.err != nil {
		return o.err
	}
	if !o.hello {
		if err := s.sendHello(ctx, to, o); err != nil {
			return err
		}
	}
	if o.r == nil {
		return s.inner.Send(ctx, to, p)
	}
	return s.sendRing(ctx, to, o, p)
}

// sendHello makes the link's first message: an offer when the peer is on this host and this
// rank uses shared memory (then it waits for the answer), an empty hello otherwise.
func (s *Transport) sendHello(ctx context.Context, to int, o *shmOut) error {
	hello := make([]byte, shmHelloSize)
	copy(hello, shmHelloMagic)
	var r *shmRing
	var f *os.File
	if s.cfg.SharedMemBytes > 0 {
		local, err := s.lk.LinkTo(ctx, to)
		if err != nil {
			return err
		}
		if local {
			if r, f, err = newOfferedRing(s.cfg.SharedMemBytes); err != nil {
				s.log.Info("allreduce: no shared-memory ring toward a peer on this host", "peer", to, "why", err)
			} else {
				defer f.Close() // the peer has opened its own by the time the answer comes
				binary.LittleEndian.PutUint64(hello[8:], uint64(os.Getpid()))
				binary.LittleEndian.PutUint64(hello[16:], uint64(f.Fd()))
				binary.LittleEndian.PutUint64(hello[24:], r.size)
				copy(hello[32:], r.nonce())
			}
		}
	}
	if err := s.inner.Send(ctx, to, link.Bytes(hello)); err != nil {
		if r != nil {
			r.unmap()
		}
		return err
	}
	o.hello = true
	if r == nil {
		return nil
	}
	var ack [1]byte
	if err := s.lk.ReadAnswer(ctx, to, ack[:]); err != nil {
		r.unmap()
		o.err = err // the peer may have mapped it: the link cannot fall back to messages
		return err
	}
	if ack[0] != 1 {
		r.unmap()
		return nil // declined: the frames are messages
	}
	if !s.rings.add(r) {
		o.err = link.ErrClosed
		return link.ErrClosed
	}
	o.mu.Lock()
	o.r = r
	o.mu.Unlock()
	return nil
}

// sendRing sends p through the link's ring: a frame record with the frame cast into the ring,
// or, for a frame too large for it, a stream record and then p as a message on the link.
func (s *Transport) sendRing(ctx context.Context, to int, o *shmOut, p link.Payload) error {
	r := o.r
	var why error
	var cut time.Time
	gone := func() bool {
		select {
		case <-s.closed:
			why = link.ErrClosed
			return true
		default:
		}
		if s.lk.LinkDown(to, true) {
			why = &link.PeerError{Rank: to, Err: link.ErrPeerGone}
			o.err = why
			return true
		}
		if ctx.Err() != nil {
			// A Send whose ctx ends waits for sendGrace more (a send merely in progress when a
			// collective fails completes, and the abort frame can follow), then gives up.
			if cut.IsZero() {
				cut = time.Now().Add(link.SendGrace)
			} else if time.Now().After(cut) {
				why = context.Cause(ctx)
				o.err = &link.PeerError{Rank: to, Err: fmt.Errorf("send abandoned: %w", why)}
				return true
			}
		}
		return false
	}
	n := p.Size()
	kind, need := uint32(recFrame), recHeader+align8(n)
	if need > r.size/2 {
		kind, need = recStream, recHeader
	}
	pos := o.tail
	if pos%r.size+need > r.size {
		// Not before the lap's end (a header always fits there: records are 8-aligned).
		if !r.waitRoom(pos+recHeader, gone) {
			return why
		}
		r.putRecord(pos, recSkip, 0)
		pos += r.size - pos%r.size
	}
	end := pos + need
	if !r.waitRoom(end, gone) {
		return why
	}
	if kind == recFrame {
		p.Encode(r.at(pos+recHeader, n))
	}
	r.putRecord(pos, kind, n)
	o.tail = end
	r.publish(end)
	if kind == recStream {
		return s.inner.Send(ctx, to, p)
	}
	return nil
}

func (s *Transport) Recv(ctx context.Context, from int) ([]byte, error) {
	if !s.peer(from) {
		return s.inner.Recv(ctx, from)
	}
	in := s.in[from]
	if in.err != nil {
		return nil, in.err
	}
	if in.holding {
		in.holding = false
		in.r.releaseWake(in.held) // the peer may place records over the last view now
	}
	if !in.hello {
		b, err := s.inner.Recv(ctx, from)
		if err != nil {
			return nil, err
		}
		in.hello = true
		if err := s.takeHello(from, in, b); err != nil {
			in.err = err
			return nil, err
		}
	}
	if in.r == nil {
		return s.inner.Recv(ctx, from)
	}
	return s.recvRing(ctx, from, in)
}

// takeHello reads a link's hello and answers an offer.
func (s *Transport) takeHello(from int, in *shmIn, b []byte) error {
	if len(b) != shmHelloSize || string(b[:8]) != shmHelloMagic {
		return &link.PeerError{Rank: from, Err: fmt.Errorf("malformed frame: %w", errShmHello)}
	}
	pid := binary.LittleEndian.Uint64(b[8:])
	fd := binary.LittleEndian.Uint64(b[16:])
	size := binary.LittleEndian.Uint64(b[24:])
	if size == 0 {
		return nil // no offer
	}
	var r *shmRing
	var why error
	switch {
	case s.cfg.SharedMemBytes < 0:
		why = errors.New("shared memory is off here")
	case !s.lk.LinkFromLocal(from):
		why = errors.New("the peer is not on this host")
	case pid == 0 || pid > 1<<31 || fd > 1<<31:
		why = fmt.Errorf("offer names pid %d, descriptor %d", pid, fd)
	default:
		r, why = openPeerRing(int(pid), int(fd), size, b[32:32+shmNonceSize])
	}
	if r != nil && !s.rings.add(r) {
		return link.ErrClosed
	}
	ack := []byte{0}
	if r != nil {
		ack[0] = 1
	} else {
		s.log.Info("allreduce: declined a shared-memory ring from a peer", "peer", from, "why", why)
	}
	if err := s.lk.Answer(from, ack); err != nil {
		return &link.PeerError{Rank: from, Err: fmt.Errorf("%w: answering its shared-memory offer: %v", link.ErrPeerGone, err)}
	}
	in.mu.Lock()
	in.r = r
	in.mu.Unlock()
	return nil
}

// recvRing is Recv on a link whose ring orders it: the next record, a view of the ring or the
// link's next message.
func (s *Transport) recvRing(ctx context.Context, from int, in *shmIn) ([]byte, error) {
	r := in.r
	for slept := false; ; slept = true {
		if tail := r.tail().Load(); tail > in.next {
			shmCausality.Load() // see its comment (ring.go)
			kind, n, err := r.record(in.next, tail)
			if err != nil {
				in.err = &link.PeerError{Rank: from, Err: fmt.Errorf("malformed frame: %w", err)}
				return nil, in.err
			}
			switch kind {
			case recSkip:
				in.next += r.size - in.next%r.size
				continue
			case recFrame:
				pos := in.next
				in.next = pos + recHeader + align8(n)
				in.held, in.holding = in.next, true
				return r.at(pos+recHeader, n), nil
			}
			// recStream: the frame is the link's next message.
			in.next += recHeader
			r.releaseWake(in.next)
			b, err := s.inner.Recv(ctx, from)
			if err == nil && len(b) != n {
				err = &link.PeerError{Rank: from, Err: fmt.Errorf("malformed frame: %w: stream record of %d bytes, message of %d", errShmFrame, n, len(b))}
			}
			if err != nil {
				// Past the record but without its message: this link cannot go on.
				in.err = err
				return nil, err
			}
			return b, nil
		}
		select {
		case <-s.closed:
			return nil, link.ErrClosed
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		default:
		}
		if slept && s.lk.LinkDown(from, false) {
			if r.tail().Load() > in.next {
				continue // published before the link ended: delivered first
			}
			// The link ended; the inner transport says why.
			_, err := s.inner.Recv(ctx, from)
			if err == nil {
				err = &link.PeerError{Rank: from, Err: fmt.Errorf("malformed frame: %w: a message without a stream record", errShmFrame)}
			}
			in.err = err
			return nil, err
		}
		r.waitData(in.next, recvPoll)
	}
}

func (s *Transport) markClosed() { s.once.Do(func() { close(s.closed) }) }

// Close ends the waits of this layer and closes the inner transport (which flushes).
func (s *Transport) Close() error {
	s.markClosed()
	return s.inner.Close()
}

// Abort is Close without the inner transport's flush (a dying process; tests use it as a kill).
func (s *Transport) Abort() error {
	s.markClosed()
	if a, ok := s.inner.(link.Aborter); ok {
		return a.Abort()
	}
	return s.inner.Close()
}

// ReleaseMemory unmaps the rings. The Group calls it from Close once no collective can run (a
// view of a ring may be in use until then); the transport is closed by then.
func (s *Transport) ReleaseMemory() {
	s.rings.release()
	if m, ok := s.inner.(link.MemoryReleaser); ok {
		m.ReleaseMemory()
	}
}

// Unwrap is the data plane the decorator wraps.
func (s *Transport) Unwrap() link.Transport { return s.inner }
