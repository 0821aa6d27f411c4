//go:build !amd64

package cpu

var gemmKernels = []namedKernel{{"go", gemmKernGo}}
