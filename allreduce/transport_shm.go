//go:build linux

package allreduce

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Shared memory on same-host links of the tcp kind.
//
// A link to a peer on this host is a Unix-domain socket (transport_tcp.go). Right after its
// handshake the sending side creates a sealed memfd, maps it, and passes the descriptor over
// the socket (SCM_RIGHTS, so only the peer that presented the token gets it); the receiver maps
// it too and answers one byte, yes or no. From then on a frame of at most half the ring is
// encoded (the f16 cast) straight into the ring, and the socket carries only a 12-byte doorbell:
// the frame's length with the top bit set, and its position. The receiver's Recv returns a view
// of the ring, which it releases at its next Recv (the Transport contract: valid until then).
// No byte crosses the kernel: the sender's cast writes the pages the receiver's reduction reads.
// Larger frames, and every frame on a link whose ring could not be set up, travel on the socket
// as before (a plain length, then the bytes).
//
// Flow control: the ring's first page holds the receiver's released position (head) and a
// waiting flag. A sender short of space sets the flag, reads head again, and otherwise sleeps
// reading the socket; a receiver that releases space and finds the flag set clears it and writes
// one wake byte back. The sender consumes exactly one byte per flag the receiver cleared, so at
// most one is ever in flight. Everything that needs a wake-up or a failure still goes through
// the socket: a dead peer is EOF as before, a cancelled Send or Recv a read deadline as before.
//
// Positions are byte counts since the link opened; a frame never wraps: one that would cross
// the ring's end starts at the next multiple of the ring's size instead.
//
// Trust: the peer shares the pages, so a peer could scribble on a frame after sending it; peers
// are authenticated by the token before any descriptor is passed, and the seals stop the file
// from being shrunk under a mapping (which would turn reads into SIGBUS).

const (
	shmMagic     = "GDDPSHM1"
	shmHeader    = 4096    // the ring's control page: head at 0, waiting flag at 64, more below
	shmDoorbell  = 1 << 31 // top bit of a message's length: the frame is in the ring
	shmMaxBytes  = 1 << 30
	shmOfferSize = len(shmMagic) + 8
	shmSeals     = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	shmNonceSize = 16
)

// shmRing is one direction's ring, mapped in this process.
type shmRing struct {
	mem  []byte // the whole mapping: control page, then data
	data []byte // mem[shmHeader:]
	size uint64 // len(data)
}

func (r *shmRing) head() *atomic.Uint64    { return (*atomic.Uint64)(unsafe.Pointer(&r.mem[0])) }
func (r *shmRing) waiting() *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&r.mem[64])) }

// wakes counts the wake-ups of a sender waiting for space (gRPC links, whose senders sleep on
// it with futex; grpc_shm.go). The tcp kind wakes its sender with a byte on the socket instead.
func (r *shmRing) wakes() *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&r.mem[128])) }

// Words of the ring-ordered protocol of gRPC links (grpc_shm.go): the sender's published
// position (tail), and the receiver's own waiting flag and futex word.
func (r *shmRing) tail() *atomic.Uint64     { return (*atomic.Uint64)(unsafe.Pointer(&r.mem[192])) }
func (r *shmRing) rwaiting() *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&r.mem[320])) }
func (r *shmRing) rwakes() *atomic.Uint32   { return (*atomic.Uint32)(unsafe.Pointer(&r.mem[384])) }

// nonce is where the creator of a ring offered by path (gRPC links) writes a random value the
// peer checks after opening it, so that it cannot map some other process's file by mistake.
func (r *shmRing) nonce() []byte { return r.mem[256 : 256+shmNonceSize] }

// fits says whether a frame of n bytes goes through the ring (at most half of it, so a held
// frame never blocks the next one for good).
func (r *shmRing) fits(n int) bool { return uint64(n) <= r.size/2 }

// place is where a frame of n bytes goes after position tail: tail itself, or the start of the
// next lap when the frame would cross the ring's end.
func (r *shmRing) place(tail uint64, n int) uint64 {
	if tail%r.size+uint64(n) > r.size {
		return tail + r.size - tail%r.size
	}
	return tail
}

// room says whether the ring has space up to position end (the receiver's releases so far).
func (r *shmRing) room(end uint64) bool { return end-r.head().Load() <= r.size }

// at is the frame of n bytes at position pos.
func (r *shmRing) at(pos uint64, n int) []byte {
	off := pos % r.size
	return r.data[off : off+uint64(n) : off+uint64(n)]
}

// release (receiver) frees the ring up to end; it says whether the sender is waiting for that
// and must be woken (one byte on the socket).
func (r *shmRing) release(end uint64) bool {
	r.head().Store(end)
	return r.waiting().Swap(0) == 1
}

// wait (sender) announces it is about to sleep for space up to end; false means the space is
// there after all, and then consumed says whether a wake byte is on its way and must be read.
func (r *shmRing) wait(end uint64) (sleep, consume bool) {
	r.waiting().Store(1)
	if !r.room(end) {
		return true, false
	}
	return false, r.waiting().Swap(0) == 0
}

// newShmRing creates a ring of size data bytes (a multiple of the page size) and returns it with
// the file to pass to the peer; the caller closes the file once passed.
func newShmRing(size int) (*shmRing, *os.File, error) {
	fd, err := unix.MemfdCreate("goddp-allreduce", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "goddp-allreduce-shm")
	total := int64(shmHeader + size)
	fail := func(what string, err error) (*shmRing, *os.File, error) {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.Ftruncate(fd, total); err != nil {
		return fail("ftruncate", err)
	}
	// Reserve the pages now: a full tmpfs or memory limit is an error here, not a SIGBUS later.
	if err := unix.Fallocate(fd, 0, 0, total); err != nil {
		return fail("fallocate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, shmSeals); err != nil {
		return fail("seal", err)
	}
	mem, err := unix.Mmap(fd, 0, int(total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	return &shmRing{mem: mem, data: mem[shmHeader:], size: uint64(size)}, f, nil
}

// mapShmRing maps a peer's ring of size data bytes after checking the file is what it claims.
func mapShmRing(fd int, size uint64) (*shmRing, error) {
	if size == 0 || size > shmMaxBytes || size%shmHeader != 0 {
		return nil, fmt.Errorf("ring of %d bytes", size)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("seals: %w", err)
	}
	if seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL) != unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL {
		return nil, errors.New("the ring's file is not sealed against shrinking")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	total := shmHeader + size
	if uint64(st.Size) != total {
		return nil, fmt.Errorf("the ring's file has %d bytes, the offer says %d", st.Size, total)
	}
	mem, err := unix.Mmap(fd, 0, int(total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return &shmRing{mem: mem, data: mem[shmHeader:], size: size}, nil
}

func (r *shmRing) unmap() {
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem, r.data = nil, nil
	}
}

// shmOffer is the dialling (sending) side of the setup, right after a successful handshake on a
// Unix-domain link: it offers a ring of size bytes (none when size <= 0 or the ring cannot be
// made) and returns the ring if the peer mapped it.
func shmOffer(c *net.UnixConn, size int) (*shmRing, error) {
	var r *shmRing
	var f *os.File
	if size > 0 {
		var err error
		if r, f, err = newShmRing(size); err != nil {
			r, size = nil, 0 // offer none: frames take the socket
		}
	} else {
		size = 0
	}
	offer := make([]byte, shmOfferSize)
	copy(offer, shmMagic)
	binary.LittleEndian.PutUint64(offer[len(shmMagic):], uint64(size))
	var oob []byte
	if f != nil {
		oob = unix.UnixRights(int(f.Fd()))
	}
	_, _, err := c.WriteMsgUnix(offer, oob, nil)
	if f != nil {
		f.Close() // the peer has its own descriptor now; the mapping keeps the memory
	}
	var ack [1]byte
	if err == nil {
		_, err = io.ReadFull(c, ack[:])
	}
	if err != nil || ack[0] != 1 {
		if r != nil {
			r.unmap()
		}
		return nil, err
	}
	return r, nil
}

// shmAccept is the accepting (receiving) side: it reads the offer, maps the ring if there is
// one and accept allows, and answers. A nil ring means frames take the socket; why then says
// why an offered ring was not mapped. err is a failed exchange: the link is unusable.
func shmAccept(c *net.UnixConn, accept bool) (r *shmRing, why, err error) {
	buf := make([]byte, shmOfferSize)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, err
	}
	var fds []int
	if oobn > 0 {
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if got, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if n < len(buf) {
		if _, err := io.ReadFull(c, buf[n:]); err != nil {
			return nil, nil, err
		}
	}
	if string(buf[:len(shmMagic)]) != shmMagic {
		return nil, nil, errors.New("no shared-memory offer after the handshake")
	}
	size := binary.LittleEndian.Uint64(buf[len(shmMagic):])
	if size > 0 && accept {
		if len(fds) != 1 {
			why = fmt.Errorf("offer carried %d descriptors", len(fds))
		} else {
			r, why = mapShmRing(fds[0], size)
		}
	}
	ack := []byte{0}
	if r != nil {
		ack[0] = 1
	}
	if _, err := c.Write(ack); err != nil {
		if r != nil {
			r.unmap()
		}
		return nil, nil, err
	}
	return r, why, nil
}

// Futex on the ring's wakes word: the receiver of a gRPC link wakes a sender sleeping for space
// without a socket of its own to write to. Not FUTEX_PRIVATE: the word is in another process.
const (
	futexWait = 0
	futexWake = 1
)

// releaseWake (receiver, gRPC links) frees the ring up to end and wakes a sender waiting for it.
func (r *shmRing) releaseWake(end uint64) {
	if r.release(end) {
		r.wakes().Add(1)
		unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(r.wakes())), futexWake, 1, 0, 0, 0)
	}
}

// waitRoom (sender, gRPC links) waits until the ring has room up to end. It sleeps on the wakes
// word a few milliseconds at a time and asks gone between sleeps; it returns false as soon as
// gone says the link is over.
func (r *shmRing) waitRoom(end uint64, gone func() bool) bool {
	ts := unix.NsecToTimespec(int64(2 * time.Millisecond))
	for !r.room(end) {
		r.waiting().Store(1)
		w := r.wakes().Load()
		if r.room(end) {
			return true
		}
		if gone() {
			return false
		}
		// The receiver stores head before it clears the flag and bumps wakes: if it released
		// after the check above, wakes has moved and the wait returns at once.
		unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(r.wakes())), futexWait, uintptr(w), uintptr(unsafe.Pointer(&ts)), 0, 0)
	}
	return true
}

// publish (sender, gRPC links) makes the records up to end visible and wakes a receiver
// sleeping for them.
func (r *shmRing) publish(end uint64) {
	shmCausality.Add(1)
	r.tail().Store(end)
	if r.rwaiting().Swap(0) == 1 {
		r.rwakes().Add(1)
		unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(r.rwakes())), futexWake, 1, 0, 0, 0)
	}
}

// waitData (receiver, gRPC links) sleeps at most d until the sender publishes past pos; the
// caller checks again and looks at its context and link in between.
func (r *shmRing) waitData(pos uint64, d time.Duration) {
	r.rwaiting().Store(1)
	w := r.rwakes().Load()
	if r.tail().Load() > pos {
		return
	}
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(r.rwakes())), futexWait, uintptr(w), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// newOfferedRing is newShmRing for a ring the peer opens by path (gRPC links): it also writes a
// random nonce into the control page.
func newOfferedRing(size int) (*shmRing, *os.File, error) {
	r, f, err := newShmRing(size)
	if err != nil {
		return nil, nil, err
	}
	if _, err := rand.Read(r.nonce()); err != nil {
		r.unmap()
		f.Close()
		return nil, nil, err
	}
	return r, f, nil
}

// openPeerRing maps the ring a peer on this host offered as its descriptor fd: it opens
// /proc/pid/fd/fd (the same user, the same PID namespace) and checks the seals, the size and the
// nonce.
func openPeerRing(pid, fd int, size uint64, nonce []byte) (*shmRing, error) {
	path := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
	own, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(own)
	r, err := mapShmRing(own, size)
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare(r.nonce(), nonce) != 1 {
		r.unmap()
		return nil, fmt.Errorf("%s is not the offered ring (nonce differs)", path)
	}
	return r, nil
}
