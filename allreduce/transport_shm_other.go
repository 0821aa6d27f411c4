//go:build !linux

package allreduce

import (
	"errors"
	"net"
	"os"
	"time"
)

const shmNonceSize = 16

// Shared-memory rings are Linux-only (memfd, SCM_RIGHTS); elsewhere no link has one (Unix-domain
// links are Linux-only too), so none of these methods is reached.

const shmDoorbell = 1 << 31

type shmRing struct{ size uint64 }

func (r *shmRing) fits(int) bool                     { return false }
func (r *shmRing) place(uint64, int) uint64          { panic("allreduce: no shared memory") }
func (r *shmRing) room(uint64) bool                  { panic("allreduce: no shared memory") }
func (r *shmRing) at(uint64, int) []byte             { panic("allreduce: no shared memory") }
func (r *shmRing) release(uint64) bool               { panic("allreduce: no shared memory") }
func (r *shmRing) wait(uint64) (sleep, consume bool) { panic("allreduce: no shared memory") }
func (r *shmRing) unmap()                            {}
func (r *shmRing) releaseWake(uint64)                {}
func (r *shmRing) waitRoom(uint64, func() bool) bool { panic("allreduce: no shared memory") }
func (r *shmRing) nonce() []byte                     { panic("allreduce: no shared memory") }
func (r *shmRing) publish(uint64)                    { panic("allreduce: no shared memory") }
func (r *shmRing) waitData(uint64, time.Duration)    { panic("allreduce: no shared memory") }
func (r *shmRing) tail() interface{ Load() uint64 }  { panic("allreduce: no shared memory") }

func newOfferedRing(int) (*shmRing, *os.File, error) {
	return nil, nil, errors.New("no shared memory on this system")
}

func openPeerRing(int, int, uint64, []byte) (*shmRing, error) {
	return nil, errors.New("no shared memory on this system")
}

func shmOffer(*net.UnixConn, int) (*shmRing, error) { return nil, nil }

func shmAccept(*net.UnixConn, bool) (*shmRing, error, error) {
	return nil, errors.New("no shared memory on this system"), nil
}
