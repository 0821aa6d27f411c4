#!/usr/bin/env bash
# cuda-typecheck.sh [PACKAGES] — type-check the cuda-tagged code on a machine without CUDA.
# Copies the tree to a temporary directory, points gorgonia.org/cu at the pure-Go stub in
# scripts/cudastub/cu (a module of its own, so not part of ./...), swaps the cgo files of
# model/cuda/cudadrv, model/cuda/cudnn and model/cuda/cublaslt for the stubs' signatures (scripts/cudastub/*.go.txt),
# and runs `go vet` with the tags cuda and cuda,cudnn.
# It catches names, qualifiers and types — what a move or a rename breaks — not cgo or behaviour:
# CUDA code still lands only after a GPU run (../shared/gpu/README.md). Keep the stubs' signatures
# equal to the real ones when either changes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$root"
git ls-files -co --exclude-standard | grep -v '^scripts/cudastub/' | xargs -d '\n' cp --parents -t "$tmp/"
cp -r scripts/cudastub/cu "$tmp/.cu-stub"
cp scripts/cudastub/cudadrv.go.txt "$tmp/model/cuda/cudadrv/cudadrv.go"
cp scripts/cudastub/cudnn.go.txt "$tmp/model/cuda/cudnn/cudnn.go"
cp scripts/cudastub/cublaslt.go.txt "$tmp/model/cuda/cublaslt/lt.go"
cd "$tmp"
echo "replace gorgonia.org/cu => ./.cu-stub" >> go.mod
GOFLAGS=-mod=mod go vet -tags cuda "${@:-./...}"
GOFLAGS=-mod=mod go vet -tags cuda,cudnn "${@:-./...}" # the device with cuDNN's convolutions
echo "cuda-typecheck: ok"
