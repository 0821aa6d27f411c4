// Package cudnn is goddp's cgo binding of cuDNN 9's convolutions (cudnn.go), built only with the
// tags cuda and cudnn; this file, without build tags, keeps the package a package in every build,
// so `go test -tags cuda` over make cuda-test's package list (found by build lines) does not fail
// on it with "build constraints exclude all Go files".
package cudnn
