#!/usr/bin/env bash
# cuda-ptx-check.sh — compile the CUDA device's kernel sources as the device does, without a GPU:
# NVRTC (the library the device calls) to PTX, then ptxas to machine code, for compute capability
# 9.0 (sm_90a where a source needs it: the Hopper attention's wgmma), each source with the options
# its module is loaded with by default (the attention's flashOptions, the elementwise
# kernelOptions: their defaults), f16 and bf16. It catches what clang's front end
# (cuda-kernels-check.sh) cannot: the PTX inside asm() strings, instructions the target lacks, and
# ptxas' warnings (a wgmma serialized, a register spill asked for by __launch_bounds__ it cannot
# meet is only reported). It prints each attention kernel's registers and spill bytes (this
# ptxas's, CUDA 12.4: the driver's JIT on the GPU may allocate a few registers differently).
# LOOPS=1 also prints, for each attention kernel, the machine instructions of its main loop (the
# longest loop holding a tensor-core instruction) by opcode: a static count of what a tile costs to
# issue, for comparing kernel versions before a GPU runs them (a loop with a branch inside counts
# both sides). SASS_OUT=dir also writes each source's PTX and machine code there (dir/NAME.ptx,
# dir/NAME.sass from cuobjdump -sass): two trees' dirs compared by diff -r show whether a rewrite
# of a kernel source changed what the GPU runs (the same PTX, which the driver compiles: the same
# behaviour, no GPU run needed to know it).
# Needs scripts/cuda-toolkit-local.sh's .cuda-toolkit (or CUDA_TOOLKIT_LOCAL=dir);
# skipped, with a line saying so, without it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tk="${CUDA_TOOLKIT_LOCAL:-$root/.cuda-toolkit}"
lib="$tk/usr/lib/x86_64-linux-gnu"
if [ ! -x "$tk/usr/bin/ptxas" ] || [ ! -e "$lib/libnvrtc.so.12" ]; then
  echo "cuda-ptx-check: skipped (no NVRTC and ptxas in $tk: bash scripts/cuda-toolkit-local.sh)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# TREE=dir compiles another checkout's kernel sources (cuda-same-code.sh's base) with this script.
python3 "$root/scripts/cuda-kernel-sources.py" "${TREE:-$root}" "$tmp"
# Each source's options: its arch (sm_90a for the Hopper module) and the defaults' defines
# (model/cuda/env.go: flashOptions' tile-major grid, ex2 and dk/dv's 3 blocks an SM).
flash_opts="-DFLASH_TILE_MAJOR=1 -DFLASH_EX2_FTZ=1 -DFLASH_DKDV_MINB=,3"
status=0
for f in "$tmp"/*.cu; do
  n=$(basename "$f" .cu)
  arch=90 defs=""
  case "$n" in
    flashWGMMA*) arch=90a defs="$flash_opts" ;;
    flash*) defs="$flash_opts" ;;
  esac
  # shellcheck disable=SC2086 # defs are separate words
  if ! LD_LIBRARY_PATH="$lib" python3 - "$f" "$f.ptx" --gpu-architecture=compute_$arch -default-device --std=c++17 $defs > "$f.nvrtc" 2>&1 <<'PY'
import ctypes, sys
nv = ctypes.CDLL("libnvrtc.so.12")
src, out, opts = sys.argv[1], sys.argv[2], [o.encode() for o in sys.argv[3:]]
prog = ctypes.c_void_p()
nv.nvrtcCreateProgram(ctypes.byref(prog), open(src, "rb").read(), b"goddp.cu", 0, None, None)
rc = nv.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
n = ctypes.c_size_t()
nv.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
log = ctypes.create_string_buffer(n.value)
nv.nvrtcGetProgramLog(prog, log)
if log.value.strip():
    print(log.value.decode())
if rc != 0:
    nv.nvrtcGetErrorString.restype = ctypes.c_char_p
    sys.exit("nvrtc: " + nv.nvrtcGetErrorString(rc).decode())
nv.nvrtcGetPTXSize(prog, ctypes.byref(n))
ptx = ctypes.create_string_buffer(n.value)
nv.nvrtcGetPTX(prog, ptx)
open(out, "wb").write(ptx.value)
PY
  then
    echo "cuda-ptx-check: $n: NVRTC failed:"; head -20 "$f.nvrtc"
    status=1
    continue
  fi
  if ! "$tk/usr/bin/ptxas" -arch=sm_$arch -v "$f.ptx" -o "$f.cubin" > "$f.ptxas" 2>&1; then
    echo "cuda-ptx-check: $n: ptxas failed:"; grep -v "^ptxas info" "$f.ptxas" | head -20
    status=1
    continue
  fi
  if grep -qE "warning|Performance Loss" "$f.ptxas"; then
    echo "cuda-ptx-check: $n: ptxas warns:"; grep -E "warning|Performance Loss" "$f.ptxas" | sort -u | head -10
    status=1
  fi
  if [ -n "${SASS_OUT:-}" ]; then
    mkdir -p "$SASS_OUT"
    "$tk/usr/bin/cuobjdump" -sass "$f.cubin" | grep -v 'code for sm_\|^\s*$' > "$SASS_OUT/$n.sass"
    grep -v '^//' "$f.ptx" > "$SASS_OUT/$n.ptx"
  fi
  if [ "${LOOPS:-0}" = 1 ] && [[ "$n" == flash* ]] && [[ "$n" != *_bf16 ]]; then
    "$tk/usr/bin/cuobjdump" -sass "$f.cubin" | python3 -c '
import collections, re, sys
fn, ins = None, collections.defaultdict(list)
for l in sys.stdin:
    m = re.match(r"\s+Function : (\S+)", l)
    if m:
        fn = m.group(1)
    m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", l)
    if m and fn:
        ins[fn].append((int(m.group(1), 16), m.group(2).strip()))
for fn, code in sorted(ins.items()):
    at = {a: i for i, (a, _) in enumerate(code)}
    best = None
    for i, (a, t) in enumerate(code):
        m = re.search(r"BRA .*0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
            s = at[int(m.group(1), 16)]
            body = [b for _, b in code[s:i + 1]]
            if any("HMMA" in b or "HGMMA" in b for b in body) and (best is None or len(body) > len(best)):
                best = body
    if best:
        c = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", b).split()[0].split(".")[0] for b in best)
        print(f"  {fn:24s} main loop {len(best):4d} instructions: " + ", ".join(f"{o} {k}" for o, k in c.most_common(8)))
'
  fi
  case "$n" in
    flash*_bf16) ;;
    flash*)
      awk -v src="$n" "/Compiling entry/{match(\$0,/'[^']*'/); k=substr(\$0,RSTART+1,RLENGTH-2)}
        /bytes spill stores/{st=\$5; ld=\$9}
        /Used [0-9]+ registers/{if (!seen[k]++) printf \"  %-24s %-22s %3d registers, spills %s/%s bytes\\n\", src, k, \$5, st, ld}" "$f.ptxas" ;;
  esac
done
[ $status = 0 ] && echo "cuda-ptx-check: ok ($(find "$tmp" -name "*.cu" | wc -l) sources compiled by NVRTC and ptxas $("$tk/usr/bin/ptxas" --version | grep -o 'release [0-9.]*'))"
exit $status
