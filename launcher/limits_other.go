//go:build !linux

package launcher

// nprocLimit is 0 outside Linux: the launcher does not read RLIMIT_NPROC there.
func nprocLimit() uint64 { return 0 }
