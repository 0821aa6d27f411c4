//go:build race && linux

package allreduce

import "syscall"

// grpcRaceAcquireIO tells the race detector what syscall.Read would after a read: whatever a
// write(2) on any file did happens before (syscall's ioSync). readv(2) is not annotated, and
// in tests whole rings run in one process, where the bytes a rank received were encoded by
// another rank's goroutine. A zero-length read does just that annotation.
func grpcRaceAcquireIO(fd uintptr) { syscall.Read(int(fd), nil) }
