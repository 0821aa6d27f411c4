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
python3 - "$root" "$tmp" <<'PY'
import glob, re, sys
root, out = sys.argv[1], sys.argv[2]
# Each `name = <raw string or constant> + <raw string or constant> + ...`, concatenations resolved
# (convKernelSource is its own text around vec8Source: the first raw string alone is a fragment).
exprs = {}
for f in sorted(glob.glob(root + "/model/cuda/*.go")):
    if f.endswith("_test.go"):
        continue
    text = open(f).read()
    for m in re.finditer(r"(\w+)\s*=\s*(?=`)", text):
        parts, i = [], m.end()
        while True:
            if text[i] == "`":
                j = text.index("`", i + 1)
                parts.append(("raw", text[i + 1:j]))
                i = j + 1
            else:
                k = re.match(r"\w+", text[i:])
                if not k:
                    break
                parts.append(("ref", k.group(0)))
                i += k.end()
            k = re.match(r"\s*\+\s*", text[i:])
            if not k:
                break
            i += k.end()
        exprs[m.group(1)] = parts
def value(name, seen=()):
    if name not in exprs or name in seen:
        return None
    out = []
    for kind, v in exprs[name]:
        if kind == "raw":
            out.append(v)
        else:
            r = value(v, seen + (name,))
            if r is None:
                return None
            out.append(r)
    return "".join(out)
consts = {n: value(n) for n in exprs}
consts = {n: v for n, v in consts.items() if v is not None}
sources = {n: b for n, b in consts.items() if "__global__" in b}
if not sources:
    sys.exit("cuda-kernels-check: no kernel sources found in model/cuda")
# The module's name scan (kernels.go's kernelNameRE: every loader registers what it matches), read
# from the Go source so this check cannot drift from it.
kre = re.search(r"kernelNameRE = regexp\.MustCompile\(`([^`]*)`\)", open(root + "/model/cuda/kernels.go").read())
if not kre:
    sys.exit("cuda-kernels-check: kernelNameRE not found in model/cuda/kernels.go")
kre = re.compile(kre.group(1))
for n, b in sources.items():
    open(f"{out}/{n}.cu", "w").write(b)
    open(f"{out}/{n}.names", "w").write("\n".join(sorted(set(kre.findall(b)))) + "\n")
# Every kernel name the package's code (not its tests) asks for by a whole literal ("k_..."; a
# prefix ending in _ is completed at run time and not checked).
lits = set()
for f in sorted(glob.glob(root + "/model/cuda/*.go")):
    if f.endswith("_test.go"):
        continue
    lits |= {m for m in re.findall(r'"(k_[a-z0-9_]+)"', open(f).read()) if not m.endswith("_")}
open(f"{out}/literals", "w").write("\n".join(sorted(lits)) + "\n")
# The bf16 instantiations: each swap's f16 text must occur exactly once (as bf16.go requires).
swaps = [("f16H2F", "bf16H2F"), ("f16F2H", "bf16F2H")]
for n, b in sources.items():
    pairs = list(swaps) + [(a, z) for a, z in (("f16MMA", "bf16MMA"), ("f16Pack2X", "bf16Pack2X")) if consts.get(a, "\0") in b]
    if not all(consts.get(a, "\0") in b for a, _ in swaps):
        continue
    for a, z in pairs:
        if b.count(consts[a]) != 1:
            sys.exit(f"cuda-kernels-check: {n}: {a} occurs {b.count(consts[a])} times, want once")
        b = b.replace(consts[a], consts[z])
    open(f"{out}/{n}_bf16.cu", "w").write(b)
PY
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
  -include "$root/scripts/cudastub/kernel_prelude.h" -DFLASH_TILE_MAJOR=1 -DFLASH_EX2_FTZ=1 -DFLASH_PACK_X2=1 \
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
