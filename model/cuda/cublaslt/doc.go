// Package cublaslt is goddp's cgo binding of the cublasLt matmuls with epilogues (lt.go), for the
// CUDA device's tensor.EpilogueDevice (model/cuda/lt.go): a GEMM whose epilogue adds a bias, or
// adds it and applies GELU keeping the pre-GELU values as an auxiliary output, or sums the bias
// gradient, or applies GELU's derivative from that auxiliary output and sums the bias gradient.
// lt.go builds only with the tag cuda (cublasLt ships with cuBLAS); this file, without build
// tags, keeps the package a package in every build.
package cublaslt
