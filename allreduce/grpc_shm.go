package allreduce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

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
// bidirectional for this answer only). From then on a frame of at most half the ring is cast
// straight into the ring, and the gRPC message is a 24-byte doorbell: a magic, the frame's
// position and its length. The receiver hands the group a view of the ring and releases it at
// the next Recv; larger frames, and every frame of a link whose offer was declined, are gRPC
// messages as before. The stream stays the link: its order orders the doorbells, its end and
// its errors are the link's, and the token and TLS checks happen before any offer.
//
// Flow control is the ring's: a sender short of space sets the waiting flag and sleeps on a
// futex in the control page; the receiver that releases space and finds the flag bumps the
// futex word and wakes it. A sleeping sender checks every few milliseconds whether its stream
// ended or its connection left the READY state (a dead peer), and the Send's grace-then-cut on
// a cancelled context cuts the stream as before.
//
// What this buys: the bytes no longer cross the kernel or gRPC's framer (no 16 KiB DATA frames,
// no socket copies); docs/perf-allreduce.md has the measurements.

const (
	grpcShmOfferMagic = "GDDPSHMO"
	grpcShmBellMagic  = "GDDPRING"
	grpcShmOfferSize  = 8 + 8 + 8 + 8 + shmNonceSize // magic, pid, fd, size, nonce
	grpcShmBellSize   = 8 + 8 + 8                    // magic, position, length
)

// shmBell is a doorbell message: the Payload a Send sends instead of a frame placed in the ring.
type shmBell [grpcShmBellSize]byte

func (b *shmBell) Size() int       { return grpcShmBellSize }
func (b *shmBell) Encode(d []byte) { copy(d, b[:]) }

func (b *shmBell) set(pos uint64, n int) {
	copy(b[:], grpcShmBellMagic)
	binary.LittleEndian.PutUint64(b[8:], pos)
	binary.LittleEndian.PutUint64(b[16:], uint64(n))
}

// isShmBell says whether a received message is a doorbell (frames start with frameMagic, never
// with this magic).
func isShmBell(m []byte) bool {
	return len(m) == grpcShmBellSize && string(m[:8]) == grpcShmBellMagic
}

func isShmOffer(m []byte) bool {
	return len(m) == grpcShmOfferSize && string(m[:8]) == grpcShmOfferMagic
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

// sendShm places a frame that fits in the link's ring and returns the doorbell to send in its
// place; p itself when the link has no ring or the frame is too large for it.
func (t *grpcTransport) sendShm(l *outLink, p Payload) (Payload, error) {
	r := l.shm
	n := p.Size()
	if r == nil || !r.fits(n) {
		return p, nil
	}
	pos := r.place(l.tail, n)
	end := pos + uint64(n)
	gone := func() bool {
		return l.stream.Context().Err() != nil || l.conn.GetState() != connectivity.Ready
	}
	if !r.waitRoom(end, gone) {
		return nil, errShmGone
	}
	p.Encode(r.at(pos, n))
	l.tail = end
	l.bell.set(pos, n)
	return &l.bell, nil
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
	r, err := openPeerRing(int(pid), int(fd), size, bytes.Clone(offer[32:]))
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

// shmView is the receiver's side of a doorbell: it checks it against the ring and returns the
// frame's view and the ring position after it.
func (in *inbox) shmView(bell []byte) ([]byte, uint64, error) {
	if in.shm == nil {
		return nil, 0, fmt.Errorf("%w: doorbell on a link without a ring", errShmFrame)
	}
	pos := binary.LittleEndian.Uint64(bell[8:])
	n64 := binary.LittleEndian.Uint64(bell[16:])
	if n64 == 0 || n64 > in.shm.size/2 || pos != in.shm.place(in.next, int(n64)) || pos%in.shm.size+n64 > in.shm.size {
		return nil, 0, fmt.Errorf("%w: %d bytes at %d, expected at %d", errShmFrame, n64, pos, in.shm.place(in.next, int(min(n64, in.shm.size/2))))
	}
	n := int(n64)
	in.next = pos + n64
	return in.shm.at(pos, n), in.next, nil
}
