//go:build linux

package tcpnet

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// connGone says, without blocking, whether c's peer has closed it or it has failed: a peek that
// finds the end of the stream or an error other than "nothing to read yet". (The links that
// carry shared memory carry nothing the peek could take: they are read only for stream
// records, by the same goroutine.)
func connGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, e := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		gone = (n == 0 && e == nil) || (e != nil && e != unix.EAGAIN && e != unix.EINTR)
		return true
	})
	return gone || err != nil
}
