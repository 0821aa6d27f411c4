package allreduce

import (
	"context"
	"errors"
	"fmt"
)

// Transport moves framed messages between the ranks of one group. The Group is written against
// this interface only; transport_grpc.go (gRPC streams), transport_tcp.go (raw sockets) and
// transport_inproc.go (channels, for tests) implement it, and shm.go's decorator wraps the
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

// bytesPayload is a Payload of ready bytes (small control frames).
type bytesPayload []byte

func (p bytesPayload) Size() int       { return len(p) }
func (p bytesPayload) Encode(b []byte) { copy(b, p) }

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
