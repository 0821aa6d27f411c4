#!/usr/bin/env bash
# cuda-cgo-check.sh — compile the cuda-tagged packages with their real cgo (model/cuda/cudadrv,
# model/cuda/cublaslt, gorgonia.org/cu) against real CUDA headers, on a machine without a GPU or
# CUDA's libraries: packages are compiled, nothing is linked. cuda-typecheck.sh swaps the cgo
# files for pure-Go stubs, so the C in their preambles (the small wrappers, the enums passed, each
# call's argument types as C sees them) is checked here only, before any GPU compiles it.
# Headers: $CUDA_HEADERS (a folder with cuda.h), else .cuda-headers/usr/include
# (scripts/cuda-headers.sh: Debian's CUDA 11.8; .ci/run fetches them), else /usr/local/cuda/include.
# Skipped, with a line saying so, where none is found. The cuDNN binding (tag cudnn) needs
# cudnn.h, which Debian does not ship: it is type-checked only (cuda-typecheck.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
inc=""
for d in "${CUDA_HEADERS:-}" "$root/.cuda-headers/usr/include" /usr/local/cuda/include; do
  if [ -n "$d" ] && [ -f "$d/cuda.h" ]; then
    inc="$d"
    break
  fi
done
if [ -z "$inc" ]; then
  echo "cuda-cgo-check: skipped (no CUDA headers; bash scripts/cuda-headers.sh fetches them)"
  exit 0
fi
# Every package but the commands (a command would be linked, and the libraries are not here).
pkgs=$(go list -tags cuda -f '{{if and (ne .Name "main") .GoFiles}}{{.ImportPath}}{{end}}' ./...)
# shellcheck disable=SC2086 # one argument per package
CGO_ENABLED=1 CGO_CFLAGS="-I$inc" go build -tags cuda $pkgs
echo "cuda-cgo-check: ok ($(grep -m1 '#define CUDA_VERSION' "$inc/cuda.h" | awk '{print "CUDA_VERSION " $3}'), $(echo "$pkgs" | wc -l) packages)"
