//go:build !race || !linux

package allreduce

func grpcRaceAcquireIO(uintptr) {}
