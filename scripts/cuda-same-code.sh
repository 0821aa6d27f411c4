#!/usr/bin/env bash
# cuda-same-code.sh [REV] — whether the working tree's CUDA kernel sources compile to the same PTX
# and the same machine code as REV's (default HEAD), every module and its bf16 and PDL forms, as
# cuda-ptx-check.sh compiles them (NVRTC and ptxas 12.4, compute capability 9.0, the default
# options). For a rewrite of kernel source that must not change what runs — a repeat folded into a
# device function, a comment, a rename of a local — the same PTX (which the GPU's driver compiles)
# is the proof that no GPU run is needed for it. Prints the kernels whose code differs, and exits 1
# where any does; 0 where none does, listing the kernels REV lacks (new ones need their GPU run). Needs .cuda-toolkit
# (scripts/cuda-toolkit-local.sh). About two minutes on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rev=${1:-HEAD}
tk="${CUDA_TOOLKIT_LOCAL:-$root/.cuda-toolkit}"
[ -x "$tk/usr/bin/ptxas" ] || { echo "cuda-same-code: no ptxas in $tk: bash scripts/cuda-toolkit-local.sh" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/base"
git -C "$root" archive "$rev" model/cuda | tar -x -C "$tmp/base"
CUDA_TOOLKIT_LOCAL="$tk" TREE="$tmp/base" SASS_OUT="$tmp/a" bash "$root/scripts/cuda-ptx-check.sh" > "$tmp/a.log" 2>&1 || { echo "cuda-same-code: $rev's sources do not compile:"; tail -5 "$tmp/a.log"; exit 2; }
CUDA_TOOLKIT_LOCAL="$tk" SASS_OUT="$tmp/b" bash "$root/scripts/cuda-ptx-check.sh" > "$tmp/b.log" 2>&1 || { echo "cuda-same-code: the working tree's sources do not compile:"; tail -5 "$tmp/b.log"; exit 2; }
python3 - "$tmp/a" "$tmp/b" "$rev" <<'PY'
import os, re, sys
a, b, rev = sys.argv[1:]
def funcs(path, kind):
    # PTX: .entry NAME ... up to the next entry; SASS: "Function : NAME" blocks.
    text = open(path).read() if os.path.exists(path) else ""
    pat = r"\.entry (\w+)" if kind == "ptx" else r"Function : (\w+)"
    marks = [(m.start(), m.group(1)) for m in re.finditer(pat, text)]
    out = {n: text[s:(marks[i + 1][0] if i + 1 < len(marks) else len(text))] for i, (s, n) in enumerate(marks)}
    return {n: canon(t) for n, t in out.items()}
def canon(t):
    # What renames without changing what a kernel does: PTX numbers its block labels and local
    # depots by the function's place in the module (a kernel added before another renumbers the
    # other's), names a function-scope __shared__ array by its template's mangled signature (a
    # template parameter added renames it; renamed here by order of first use, so two arrays that
    # trade places still differ), and its comments.
    t = "\n".join(l for l in t.splitlines() if not l.lstrip().startswith("//"))
    t = re.sub(r"(\$L__BB|__local_depot)\d+", r"\1", t)
    names = {}
    return re.sub(r"_ZZ\w+", lambda m: names.setdefault(m.group(0), f"_ZZ#{len(names)}"), t)
diffs, n = [], 0
for f in sorted(set(os.listdir(a)) | set(os.listdir(b))):
    kind = f.rsplit(".", 1)[1]
    fa, fb = funcs(os.path.join(a, f), kind), funcs(os.path.join(b, f), kind)
    for k in sorted(set(fa) | set(fb)):
        n += 1
        if k not in fa:
            diffs.append(f"{f}: {k} is new")
        elif k not in fb:
            diffs.append(f"{f}: {k} is gone")
        elif fa[k] != fb[k]:
            diffs.append(f"{f}: {k} differs")
new = [d for d in diffs if d.endswith(" is new")]
changed = [d for d in diffs if not d.endswith(" is new")]
if changed:
    print(f"cuda-same-code: {len(changed)} of {n} kernels' code differs from {rev}'s:")
    print("\n".join(changed))
    sys.exit(1)
print(f"cuda-same-code: every kernel of {rev} compiles to its very code ({n - len(new)} PTX and SASS functions)" + (f"; {len(new)} new:" if new else ""))
if new:
    print("\n".join(new))
PY
