//go:build !amd64

package model

var gemmKernels = []namedKernel{{"go", gemmKernGo}}
