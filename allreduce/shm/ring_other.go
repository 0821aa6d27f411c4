//go:build !linux

package shm

import (
	"errors"
	"os"
	"sync/atomic"
	"time"
)

// Shared-memory rings are Linux-only (memfd, futex, /proc); elsewhere no ring is ever made or
// mapped, so links stay on messages and the futex calls are never reached.

func futexWake(*atomic.Uint32)                        {}
func futexWait(*atomic.Uint32, uint32, time.Duration) { time.Sleep(time.Millisecond) }
func (r *shmRing) unmap()                             {}

func newOfferedRing(int) (*shmRing, *os.File, error) {
	return nil, nil, errors.New("no shared memory on this system")
}

func openPeerRing(int, int, uint64, []byte) (*shmRing, error) {
	return nil, errors.New("no shared memory on this system")
}
