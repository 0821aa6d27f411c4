#!/usr/bin/env bash
# cuda-toolkit-local.sh [DIR] — NVRTC and ptxas on a machine without a GPU, for
# scripts/cuda-ptx-check.sh: Debian trixie's libnvrtc12, libnvrtc-builtins12.4 and
# nvidia-cuda-toolkit (CUDA 12.4, non-free; ~120 MB) are downloaded, not installed, and unpacked
# into DIR (default .cuda-toolkit in the repository, ignored by git): the NVRTC library and ptxas,
# which compile the kernel sources as the device does and report each kernel's registers and
# spills for sm_90a (wgmma included), where clang's front end (cuda-kernels-check.sh) stops at
# the C. Nothing is installed and no system file is changed (a private apt state under DIR).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$root/.cuda-toolkit}"
if [ -x "$dir/usr/bin/ptxas" ] && [ -e "$dir/usr/lib/x86_64-linux-gnu/libnvrtc.so.12" ]; then
  echo "cuda-toolkit-local: $dir has them"
  exit 0
fi
command -v apt-get >/dev/null || { echo "cuda-toolkit-local: needs apt-get" >&2; exit 1; }
st="$dir/.apt"
mkdir -p "$st/lists/partial" "$st/cache/archives/partial" "$dir"
cat > "$st/sources.list" <<SRC
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main contrib non-free
SRC
opts=(-o "Dir::Etc::sourcelist=$st/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$st/lists"
  -o "Dir::Cache=$st/cache" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
apt-get "${opts[@]}" update -qq
(cd "$st" && apt-get "${opts[@]}" download -qq libnvrtc12 libnvrtc-builtins12.4 nvidia-cuda-toolkit)
for d in "$st"/*.deb; do dpkg -x "$d" "$dir"; done
rm -rf "$st"
"$dir/usr/bin/ptxas" --version | tail -1
