#!/usr/bin/env bash
# cuda-env.sh CMD ARGS... — run CMD with the cgo flags the CUDA build (go build -tags cuda) needs:
# the project's compatibility cuda.h first on the include path (model/cuda/cudacompat:
# gorgonia.org/cu v0.9.6 against CUDA 13), then CUDA's headers; the driver, cuBLAS and NVRTC
# libraries to link.
# CUDA_HOME (default /usr/local/cuda) says where CUDA is. Used by `make cuda` and `make cuda-test`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cuda="${CUDA_HOME:-/usr/local/cuda}"
export CGO_ENABLED=1
export CGO_CFLAGS="-I${root}/model/cuda/cudacompat -I${cuda}/include ${CGO_CFLAGS:-}"
export CGO_LDFLAGS="-L${cuda}/lib64 -L${cuda}/lib64/stubs -lcuda -lcublas -lnvrtc ${CGO_LDFLAGS:-}"
exec "$@"
