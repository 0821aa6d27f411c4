package launcher

import (
	"os"

	"golang.org/x/sys/unix"
)

// nprocLimit is RLIMIT_NPROC's soft limit, or 0 when it is unlimited or not enforced: the kernel
// does not apply it to root (CAP_SYS_ADMIN or CAP_SYS_RESOURCE).
func nprocLimit() uint64 {
	if os.Geteuid() == 0 {
		return 0
	}
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &r); err != nil || r.Cur == unix.RLIM_INFINITY {
		return 0
	}
	return r.Cur
}
