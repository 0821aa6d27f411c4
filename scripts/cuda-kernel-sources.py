#!/usr/bin/env python3
# cuda-kernel-sources.py ROOT OUT — the CUDA device's kernel sources as files, for the checks that
# compile them without a GPU (cuda-kernels-check.sh: clang's front end; cuda-ptx-check.sh: NVRTC and
# ptxas): every Go raw-string constant of ROOT/model/cuda holding a __global__ kernel, its
# concatenations resolved, written to OUT/NAME.cu with the names the module's scan registers
# (OUT/NAME.names), the kernel literals the Go code launches (OUT/literals), and the bf16
# instantiation of each 16-bit source (OUT/NAME_bf16.cu, model/cuda/bf16.go's swaps applied as the
# device applies them).
import glob, re, sys
root, out = sys.argv[1], sys.argv[2]
# Each `name = <raw string or constant> + <raw string or constant> + ...` that holds a raw string,
# concatenations resolved (convKernelSource is its own text around vec8Source: the first raw string
# alone is a fragment; flashWGMMAKernelSource starts with flashKernelSource).
exprs = {}
for f in sorted(glob.glob(root + "/model/cuda/*.go")):
    if f.endswith("_test.go"):
        continue
    text = open(f).read()
    for m in re.finditer(r"(\w+)\s*=\s*(?=`|\w+\s*\+\s*`)", text):
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
    pairs = list(swaps) + [(a, z) for a, z in (("f16MMA", "bf16MMA"), ("f16Pack2X", "bf16Pack2X"), ("f16WGMMA", "bf16WGMMA")) if consts.get(a, "\0") in b]
    if not all(consts.get(a, "\0") in b for a, _ in swaps):
        continue
    for a, z in pairs:
        if b.count(consts[a]) != 1:
            sys.exit(f"cuda-kernels-check: {n}: {a} occurs {b.count(consts[a])} times, want once")
        b = b.replace(consts[a], consts[z])
    open(f"{out}/{n}_bf16.cu", "w").write(b)
# GODDP_PDL=1's sources (model/cuda/pdl.go's pdlSource, its regular expression read from the Go
# source): the modules the device's launch reaches, each kernel opening on the wait for the grid
# before it, written to OUT/NAME_pdl.cu.
pdl_go = open(root + "/model/cuda/pdl.go").read()
pre = re.search(r"pdlKernelRE = regexp\.MustCompile\(`([^`]*)`\)", pdl_go)
if not pre or "pdlPrelude" not in consts:
    sys.exit("cuda-kernels-check: pdlKernelRE or pdlPrelude not found in model/cuda/pdl.go")
pre = re.compile(pre.group(1))
for n in ("kernelSource", "flashKernelSource", "flashWGMMAKernelSource", "convKernelSource"):
    b = sources[n]
    p, k = pre.subn(lambda m: m.group(0) + " GODDP_PDL_ENTRY();", b)
    if k != b.count("__global__"):
        sys.exit(f"cuda-kernels-check: {n}: {k} of its {b.count('__global__')} __global__ functions open with the PDL wait")
    open(f"{out}/{n}_pdl.cu", "w").write(consts["pdlPrelude"] + p)
    open(f"{out}/{n}_pdl.names", "w").write(open(f"{out}/{n}.names").read())
