package allreduce

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/peer"
)

// Shared memory under the gRPC data plane, for peers on this host.
//
// The Push stream to a peer reached over the Unix-domain twin of its listener (grpc_conn.go)
// starts with an offer: this rank creates a sealed memfd ring (transport_shm.go), keeps its
// descriptor open, and sends its PID, the descriptor's number, the ring's size and a random
// nonce the ring's control page also holds. The peer opens /proc/PID/fd/N, which works for a
// process of the same user in the same PID namespace, checks the seals, the size and the nonce,
// maps it, and answers one message on the stream (1: mapped, 0: not; the stream is
// bidirectional for this answer only).
//
// From then on the ring, not the stream, orders the link. Every frame is a record in the ring:
// an 8-byte header (length, kind) and, when the frame fits in half the ring, the frame itself,
// cast straight into the ring by the sender. A frame too large for the ring is a stream record
// in the ring, and the frame follows as a gRPC message. A record that would cross the ring's
// end leaves a skip record and starts the next lap. The sender publishes its position (tail) in
// the control page; the receiver's Recv reads records up to it and returns views of the ring,
// which it releases at its next Recv (the Transport contract: valid until then). So a frame
// costs no gRPC message, no socket write and no goroutine hand-off: the Recv that waits for it
// is woken by the sender's futex wake, or finds it without sleeping.
//
// Flow control both ways is the control page's: a sender short of space sets a flag and sleeps
// on a futex word the receiver bumps when it releases space; a receiver short of records does
// the same with its own flag and word. Sleeps last a few milliseconds at most; in between, a
// sender checks that its stream is alive and its connection READY (a dead peer), a receiver
// that the stream has not ended (records published before it ended are delivered first), its
// context and Close. The stream stays the link: the token and TLS checks happen on it before
// any offer, its end is the link's end, and a cancelled Send is cut as before.

const (
	grpcShmOfferMagic = "GDDPSHMO"
	grpcShmOfferSize  = 8 + 8 + 8 + 8 + shmNonceSize // magic, pid, fd, size, nonce

	recHeader = 8 // a ring record: uint32 length, uint32 kind
	recFrame  = 1 // the frame follows in the ring
	recStream = 2 // the frame is the next message on the stream
	recSkip   = 3 // the rest of this lap is empty: the next record starts the next lap

	recvPoll = 5 * time.Millisecond // longest futex sleep of a waiting Recv
)

// shmCausality carries, for the race detector, an order that runs through a peer process: this
// rank's sender casts a chunk into a ring and publishes it; the peer reduces it and publishes
// the result into its ring to us; our receiver reads that and then overwrites the chunk's source
// in the caller's buffer. The hardware orders this through the rings' atomic words, but the
// detector sees only this process, where nothing links the publish to the later read; so every
// publish also adds to this word and every Recv that finds a record loads it, as the standard
// library's ioSync does for reads and writes of file descriptors. One atomic per frame.
var shmCausality atomic.Uint64

func isShmOffer(m []byte) bool {
	return len(m) == grpcShmOfferSize && string(m[:8]) == grpcShmOfferMagic
}

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

// offerShm runs on a link's first Send: if the peer is on this host (the link is a Unix socket)
// and this rank's config allows, it offers a ring and waits for the answer. A declined or
// impossible offer leaves the link on gRPC messages; only a failed exchange is an error.
func (t *grpcTransport) offerShm(l *outLink, to int) error {
	if t.cfg.SharedMemBytes <= 0 || !l.unix.Load() {
		return nil
	}
	r, f, err := newOfferedRing(t.cfg.SharedMemBytes)
	if err != nil {
		t.log.Info("allreduce: no shared-memory ring toward a peer on this host", "peer", to, "why", err)
		return nil
	}
	defer f.Close() // the peer has opened its own by the time the answer comes
	var offer [grpcShmOfferSize]byte
	copy(offer[:], grpcShmOfferMagic)
	binary.LittleEndian.PutUint64(offer[8:], uint64(os.Getpid()))
	binary.LittleEndian.PutUint64(offer[16:], uint64(f.Fd()))
	binary.LittleEndian.PutUint64(offer[24:], uint64(t.cfg.SharedMemBytes))
	copy(offer[32:], r.nonce())
	l.msg.p = bytesPayload(offer[:])
	err = l.stream.SendMsg(&l.msg)
	l.msg.p = nil
	var ack []byte
	if err == nil {
		err = l.stream.RecvMsg(&ack)
	}
	if err != nil || len(ack) != 1 || ack[0] != 1 {
		r.unmap()
		if err == nil && len(ack) != 1 {
			err = fmt.Errorf("bad answer to the shared-memory offer (%d bytes)", len(ack))
		}
		return err
	}
	if !t.rings.add(r) {
		return ErrClosed
	}
	l.shm = r
	return nil
}

// sendShm sends p through the link's ring: a frame record with the frame cast into the ring,
// or, for a frame too large for it, a stream record, and then p is returned for the caller to
// send on the stream. Without a ring it returns p.
func (t *grpcTransport) sendShm(l *outLink, p Payload) (Payload, error) {
	r := l.shm
	if r == nil {
		return p, nil
	}
	gone := func() bool {
		return l.stream.Context().Err() != nil || l.conn.GetState() != connectivity.Ready
	}
	if gone() {
		return nil, errShmGone
	}
	n := p.Size()
	kind, need := uint32(recFrame), recHeader+align8(n)
	if need > r.size/2 {
		kind, need = recStream, recHeader
	}
	pos := l.tail
	if pos%r.size+need > r.size {
		// Not before the lap's end (a header always fits there: records are 8-aligned).
		if !r.waitRoom(pos+recHeader, gone) {
			return nil, errShmGone
		}
		r.putRecord(pos, recSkip, 0)
		pos += r.size - pos%r.size
	}
	end := pos + need
	if !r.waitRoom(end, gone) {
		return nil, errShmGone
	}
	if kind == recFrame {
		p.Encode(r.at(pos+recHeader, n))
	}
	r.putRecord(pos, kind, n)
	l.tail = end
	r.publish(end)
	if kind == recStream {
		return p, nil
	}
	return nil, nil
}

// recvRing is Recv on a link whose ring orders it: the next record, a view of the ring or the
// stream's next message.
func (t *grpcTransport) recvRing(ctx context.Context, from int, in *inbox) ([]byte, error) {
	r := in.shm
	for {
		if tail := r.tail().Load(); tail > in.rnext {
			shmCausality.Load() // see its comment (transport_shm.go)
			kind, n, err := r.record(in.rnext, tail)
			if err != nil {
				err = fmt.Errorf("malformed frame: %w", err)
				in.fail(err)
				return nil, &PeerError{Rank: from, Err: err}
			}
			switch kind {
			case recSkip:
				in.rnext += r.size - in.rnext%r.size
				continue
			case recFrame:
				pos := in.rnext
				in.rnext = pos + recHeader + align8(n)
				in.last = inItem{b: r.at(pos+recHeader, n), end: in.rnext, ring: true}
				return in.last.b, nil
			}
			// recStream: the frame is the stream's next message.
			in.rnext += recHeader
			r.releaseWake(in.rnext)
			it, err := t.recvQueue(ctx, from, in)
			if err == nil && (it.start || len(it.b) != n) {
				err = fmt.Errorf("malformed frame: %w: stream record of %d bytes, message of %d", errShmFrame, n, len(it.b))
				in.fail(err)
				err = &PeerError{Rank: from, Err: err}
			}
			if err != nil {
				// Past the record but without its message: this link cannot go on.
				in.fail(fmt.Errorf("receive abandoned mid-frame: %w", err))
				return nil, err
			}
			in.last = it
			return it.b, nil
		}
		select {
		case <-in.broken:
			if r.tail().Load() > in.rnext {
				continue // published before the link ended: delivered first
			}
			return nil, &PeerError{Rank: from, Err: in.err}
		case <-t.closed:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		default:
		}
		r.waitData(in.rnext, recvPoll)
	}
}

var errShmGone = errors.New("link ended while waiting for shared-memory space")

// shmOfferFrom maps an offered ring (receiver side); the caller answers the peer.
func (t *grpcTransport) shmOfferFrom(unixLink bool, offer []byte) (*shmRing, error) {
	switch {
	case t.cfg.SharedMemBytes < 0:
		return nil, errors.New("shared memory is off here")
	case !unixLink:
		return nil, errors.New("the peer is not on this host")
	}
	pid := binary.LittleEndian.Uint64(offer[8:])
	fd := binary.LittleEndian.Uint64(offer[16:])
	size := binary.LittleEndian.Uint64(offer[24:])
	if pid == 0 || pid > 1<<31 || fd > 1<<31 {
		return nil, fmt.Errorf("offer names pid %d, descriptor %d", pid, fd)
	}
	r, err := openPeerRing(int(pid), int(fd), size, offer[32:])
	if err != nil {
		return nil, err
	}
	if !t.rings.add(r) {
		return nil, ErrClosed
	}
	return r, nil
}

// unixPeer says whether a server stream came over a Unix-domain socket (a peer on this host).
func unixPeer(p *peer.Peer, ok bool) bool {
	return ok && p.Addr != nil && p.Addr.Network() == "unix"
}
