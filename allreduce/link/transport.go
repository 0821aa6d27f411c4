package link

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Transport moves framed messages between the ranks of one group. The core (package allreduce)
// is written against this interface only; grpcnet (gRPC streams), tcpnet (raw sockets) and the
// core's in-process transport (channels, for tests) implement it, and shm's decorator wraps the
// first two (shared memory between ranks of one host).
//
// Contract:
//   - Messages from one rank to another arrive complete, unmodified and in the order sent.
//   - Send and Recv may run concurrently with each other; Sends to one peer must not overlap,
//     nor Recvs from one peer.
//   - Send calls p.Encode exactly once, before returning, with a buffer of exactly p.Size()
//     bytes, and keeps neither p nor the buffer's contents' source. It may return before the
//     peer has read the message; it blocks while the transport's buffering toward that peer is
//     full, and then returns ctx's error when ctx is done (the link may then be unusable).
//   - Recv returns the next message from a peer. The slice belongs to the transport and stays
//     valid until the next Recv from the same peer or Close; the caller may modify it.
//   - A link that breaks (peer closed or died, connection lost) makes Send and Recv for that
//     peer return a *PeerError naming it; messages already received are delivered first.
//   - Close releases every connection and goroutine of the transport, unblocks pending calls,
//     and may be called more than once.
type Transport interface {
	Send(ctx context.Context, to int, p Payload) error
	Recv(ctx context.Context, from int) ([]byte, error)
	Close() error
}

// A Payload is a message not yet serialised: Size bytes, written by Encode into a buffer the
// transport provides (so the f16 cast writes straight into the buffer that goes on the wire).
type Payload interface {
	Size() int
	Encode(b []byte)
}

// Bytes is a Payload of ready bytes (small control frames, the shared-memory hello).
type Bytes []byte

// Size is len(p).
func (p Bytes) Size() int { return len(p) }

// Encode copies p into b.
func (p Bytes) Encode(b []byte) { copy(b, p) }

// Aborter is a Transport that can also end at once, like a process dying: no graceful flush of
// what is still queued toward peers. Abort is otherwise Close (the transport is closed after
// it, and Close after Abort does nothing). The Group aborts its transport when it is closed
// while a collective runs; tests use it to kill a rank.
type Aborter interface {
	Abort() error
}

// MemoryReleaser is a Transport holding memory that a Recv's returned slice may alias beyond
// Close (shared-memory rings). ReleaseMemory frees it; the Group calls it from Close once no
// collective can run, and no slice a Recv returned may be used after it. Idempotent.
type MemoryReleaser interface {
	ReleaseMemory()
}

// Linker is what a data plane offers the shared-memory decorator (package shm): whether a link
// is a same-host one, a few bytes back along a link, and whether a link has ended. A Transport
// without it is not wrapped. The methods follow the Transport's contract on concurrency: the
// ones about the link to a peer (LinkTo, ReadAnswer) are called by that link's sender, the
// ones about the link from a peer (LinkFromLocal, Answer) by its receiver; LinkDown from
// either.
type Linker interface {
	// LinkTo sets up the link to peer to, as a first Send would, and says whether it is a
	// Unix-domain socket (a peer on this host).
	LinkTo(ctx context.Context, to int) (local bool, err error)
	// LinkFromLocal says whether the link from peer from is a Unix-domain socket. It is known
	// once a Recv from that peer has returned a message.
	LinkFromLocal(from int) bool
	// Answer sends b back along the link from peer from, to its sender (not concurrently
	// with another answer on that link).
	Answer(from int, b []byte) error
	// ReadAnswer reads len(b) bytes sent back along the link to peer to. When ctx ends it gets
	// SendGrace more, as a Send does, and then the link is unusable.
	ReadAnswer(ctx context.Context, to int, b []byte) error
	// LinkDown says, without blocking, whether the link to (out) or from peer has ended: the
	// peer closed it or died, or it was cut.
	LinkDown(peer int, out bool) bool
}

// PeerError reports a broken link to one peer.
type PeerError struct {
	Rank int   // the peer
	Err  error // what happened
}

func (e *PeerError) Error() string { return fmt.Sprintf("rank %d: %v", e.Rank, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }

// ErrClosed is returned by calls on a closed Group or Transport.
var ErrClosed = errors.New("allreduce: closed")

// ErrPeerGone is the cause inside a PeerError when the peer closed the link or died.
var ErrPeerGone = errors.New("connection closed by peer")

// ErrMasterLost is what a rank above 0 whose call to rank 0's rendezvous failed matches
// (errors.Is): the master is gone, never came, or refused it. The error's text is the call's.
var ErrMasterLost = errors.New("allreduce: the rendezvous lost its master")

// SendGrace is how long a Send (or ReadAnswer) whose context ended may still finish before
// its link is cut: a send merely in progress when a collective fails completes, and the abort
// frame can follow on the same link.
const SendGrace = time.Second

// The sizes every data plane must carry. The frame's layout is the core's (allreduce's
// frame.go); a plane moves frames as opaque messages and needs only their bound.
const (
	// FrameHeaderSize is the bytes of a frame's header.
	FrameHeaderSize = 40
	// MaxFramePayload bounds one frame's payload; chunks are far smaller (Config.ChunkBytes).
	MaxFramePayload = 1 << 30
	// MaxMessage is the largest message a Transport is asked to carry: a frame with the
	// largest payload.
	MaxMessage = FrameHeaderSize + MaxFramePayload
)
