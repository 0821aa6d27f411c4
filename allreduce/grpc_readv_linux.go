package allreduce

import (
	"io"
	"syscall"
	"unsafe"
)

// readv reads into iov (one readv(2) once the socket is readable).
func readv(raw syscall.RawConn, iov []syscall.Iovec) (int, error) {
	var n int
	var errno syscall.Errno
	err := raw.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.Syscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			}
			n, errno = int(r), e
			if e == 0 && n > 0 {
				grpcRaceAcquireIO(fd)
			}
			return true
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, errno
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

const grpcRxSupported = true
