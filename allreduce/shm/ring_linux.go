//go:build linux

package shm

import (
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Rings on Linux: a sealed memfd, opened by the peer through /proc/PID/fd (shm.go), and futex
// sleeps on words of its control page.

const shmSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// Futex on a word of a ring's control page. Not FUTEX_PRIVATE: the word is shared with
// another process.
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

func futexWake(w *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp, 1, 0, 0, 0)
}

// futexWait sleeps while *w == old, at most d.
func futexWait(w *atomic.Uint32, old uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp, uintptr(old), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// newOfferedRing creates a ring of size data bytes (a multiple of the page size) with a random
// nonce in its control page, and returns it with its file, whose descriptor the peer opens; the
// caller closes the file once the peer has answered.
func newOfferedRing(size int) (*shmRing, *os.File, error) {
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
	r := &shmRing{mem: mem, data: mem[shmHeader:], size: uint64(size)}
	if _, err := rand.Read(r.nonce()); err != nil {
		r.unmap()
		return fail("nonce", err)
	}
	return r, f, nil
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

// openPeerRing maps the ring a peer on this host offered as its descriptor fd: it opens
// /proc/pid/fd/fd (the same user, the same PID namespace) and checks the seals, the size and the
// nonce. The seals stop the file from being shrunk under the mapping (which would turn reads
// into SIGBUS); the nonce, that it is some other file of the same number.
func openPeerRing(pid, fd int, size uint64, nonce []byte) (*shmRing, error) {
	path := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
	own, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
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
