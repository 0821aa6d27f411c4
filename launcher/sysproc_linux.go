package launcher

import "syscall"

// workerSysProcAttr puts a worker in its own process group, so that the launcher can signal it and
// every process it started at once, and asks the kernel to SIGKILL it if the launcher dies first
// (even by SIGKILL). Pdeathsig fires when the launcher's thread that started the worker exits; the
// Go runtime does not end threads of a program that never calls runtime.LockOSThread, which the
// launcher does not.
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
