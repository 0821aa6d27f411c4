//go:build unix && !linux

package launcher

import "syscall"

// workerSysProcAttr puts a worker in its own process group. There is no Pdeathsig outside Linux:
// a worker outlives a launcher that is SIGKILLed.
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
