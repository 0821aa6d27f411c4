#!/usr/bin/env bash
# cuda-headers.sh [DIR] — put real CUDA headers (cuda.h, cublas_v2.h, cublasLt.h, nvrtc.h …) on a
# machine without CUDA, for scripts/cuda-cgo-check.sh: Debian's nvidia-cuda-dev (CUDA 11.8, in
# the non-free component) is downloaded, not installed, and only its usr/include is extracted,
# into DIR (default .cuda-headers in the repository, ignored by git). Nothing is linked against
# them and no library is installed. Needs root and apt-get (adds a sources file for non-free when
# no source lists it); .ci/run calls it and goes on without the headers when it fails.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$root/.cuda-headers}"
if [ -f "$dir/usr/include/cuda.h" ] && [ -f "$dir/usr/include/cublasLt.h" ]; then
  echo "cuda-headers: $dir has them"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "cuda-headers: needs root and apt-get" >&2
  exit 1
fi
# A package with no candidate (no source lists it) still answers apt-cache show: ask for a candidate.
if ! apt-cache policy nvidia-cuda-dev 2>/dev/null | grep -q 'Candidate: [0-9]'; then
  . /etc/os-release
  cat > /etc/apt/sources.list.d/goddp-nonfree.sources <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: ${VERSION_CODENAME:-bookworm}
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt-get update -qq
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 777 "$tmp" # apt-get download drops to the _apt user where it can
(cd "$tmp" && apt-get download -qq nvidia-cuda-dev 2>&1 | grep -v "unsandboxed" || true)
deb=$(ls "$tmp"/nvidia-cuda-dev_*.deb 2>/dev/null | head -1)
if [ -z "$deb" ]; then
  echo "cuda-headers: could not download nvidia-cuda-dev" >&2
  exit 1
fi
mkdir -p "$dir"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dir" ./usr/include
echo "cuda-headers: CUDA_VERSION $(grep -m1 "#define CUDA_VERSION" "$dir/usr/include/cuda.h" | awk "{print \$3}") headers in $dir"
