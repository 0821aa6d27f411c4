#!/usr/bin/env bash
# cuda-kernels-check.sh — syntax- and type-check the CUDA device's kernel sources on a machine
# without CUDA: every Go raw-string constant of model/cuda holding a __global__ kernel, and the bf16
# instantiation of each 16-bit source (model/cuda/bf16.go's swaps, applied as the device applies
# them), compiled by clang's CUDA front end for sm_80 with -fsyntax-only and the declarations of
# scripts/cudastub/kernel_prelude.h in place of NVRTC's built-ins. It catches what a typo, a renamed
# variable or a wrong argument type breaks in kernels no GPU has compiled yet; not the PTX inside
# asm() strings, not behaviour (a GPU run of `go test -tags cuda ./...` does). Skipped, with a line
# saying so, where clang is missing (.ci/run installs it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! command -v clang >/dev/null; then
  echo "cuda-kernels-check: skipped (no clang; apt-get install clang)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$root/scripts/cuda-kernel-sources.py" "$root" "$tmp"
status=0
for f in "$tmp"/*.cu; do
  if ! clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -fsyntax-only -std=c++17 \
    -include "$root/scripts/cudastub/kernel_prelude.h" "$f" 2> "$f.log"; then
    echo "cuda-kernels-check: $(basename "$f" .cu):"; sed "s|$tmp/||" "$f.log" | head -20
    status=1
  fi
done
# The kernels each source defines once its macros are expanded (the preprocessor alone, without the
# prelude, so __global__ stays a word) must be exactly those the name scan registers: a kernel made
# by a macro is invisible to the scan and panics "no kernel" at its first launch (session 15's
# CHAN_PART8). And every literal the Go code launches must be registered by some source.
# The attention source again with every compile-time option flashOptions can pass (env.go), the
# f16 module and the bf16 one.
for f in "$tmp"/flashKernelSource.cu "$tmp"/flashKernelSource_bf16.cu; do
if [ -f "$f" ] && ! clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -fsyntax-only -std=c++17 \
  -include "$root/scripts/cudastub/kernel_prelude.h" -DFLASH_TILE_MAJOR=1 -DFLASH_EX2_FTZ=1 -DFLASH_PACK_X2=1 -DFLASH_MASK_SPLIT=1 \
  -DFLASH_FWD_MINB=,4 -DFLASH_DQ_MINB=,4 -DFLASH_DKDV_MINB=,3 "$f" 2> "$f.optlog"; then
  echo "cuda-kernels-check: $(basename "$f" .cu) with flashOptions' defines:"; sed "s|$tmp/||" "$f.optlog" | head -20
  status=1
fi
done
# The elementwise source with kernelOptions' defines (env.go), f16 and bf16.
for f in "$tmp"/kernelSource.cu "$tmp"/kernelSource_bf16.cu; do
if [ -f "$f" ] && ! clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -fsyntax-only -std=c++17 \
  -include "$root/scripts/cudastub/kernel_prelude.h" -DGELU_TANH_APPROX=1 -DXENT_EX2=1 "$f" 2> "$f.optlog"; then
  echo "cuda-kernels-check: $(basename "$f" .cu) with kernelOptions' defines:"; sed "s|$tmp/||" "$f.optlog" | head -20
  status=1
fi
done
for f in "$tmp"/*.cu; do
  case "$f" in *_bf16.cu) continue ;; esac
  if ! clang -E -P -x cuda --cuda-device-only -nocudainc -nocudalib -std=c++17 "$f" 2> "$f.elog" |
    grep -oE '__global__[[:space:]]+void[[:space:]]+(__launch_bounds__\([^)]*\)[[:space:]]*)?k_[a-z0-9_]+[[:space:]]*\(' |
    grep -oE 'k_[a-z0-9_]+' | sort -u > "$f.defined"; then
    echo "cuda-kernels-check: $(basename "$f" .cu): the preprocessor failed:"; sed "s|$tmp/||" "$f.elog" | head -5
    status=1
    continue
  fi
  missing=$(comm -23 "$f.defined" "${f%.cu}.names")
  if [ -n "$missing" ]; then
    echo "cuda-kernels-check: $(basename "$f" .cu): kernels the name scan (kernelNameRE) does not register: $(tr "\n" " " <<< "$missing")"
    status=1
  fi
done
unknown=$(comm -23 "$tmp/literals" <(cat "$tmp"/*.names | sort -u))
if [ -n "$unknown" ]; then
  echo "cuda-kernels-check: the Go code launches kernels no source registers: $(tr "\n" " " <<< "$unknown")"
  status=1
fi
[ $status = 0 ] && echo "cuda-kernels-check: ok ($(ls "$tmp"/*.cu | wc -l) sources)"
exit $status
