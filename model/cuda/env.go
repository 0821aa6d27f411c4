//go:build cuda

package cuda

import (
	"os"
	"path/filepath"
)

// The environment the CUDA device reads, all of it here:
//
//	GODDP_FLASH=0     turns the fused attention kernels off (flash.go)
//	XDG_CACHE_HOME    where compiled kernels are cached (KernelCacheDir)

// flashOff reports whether GODDP_FLASH=0 turned the fused attention off.
func flashOff() bool { return os.Getenv("GODDP_FLASH") == "0" }

// KernelCacheDir is where compiled kernels are kept: $XDG_CACHE_HOME/goddp/kernels, by default
// ~/.cache/goddp/kernels.
func KernelCacheDir() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		if h, err := os.UserHomeDir(); err == nil {
			base = filepath.Join(h, ".cache")
		} else {
			base = os.TempDir()
		}
	}
	return filepath.Join(base, "goddp", "kernels")
}
