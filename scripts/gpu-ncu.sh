#!/usr/bin/env bash
# gpu-ncu.sh — Nsight Compute on a few kernels of GPT-2 small's model bench (TestCUDA_gpt2Bench):
# registers a thread, the shared-memory configuration, theoretical and achieved occupancy, what
# limits the blocks per SM, SM and memory throughput, and the warps' stall reasons; first the
# driver's own figures (registers, spills, blocks per SM: no counters needed). It answers
# the question session 15's A/B left (docs/perf-gpu.md): the fused attention kernels run ~4x off
# every throughput bound and are not limited by shared-memory reads, so is it occupancy or latency?
# Run on the GPU host from the repository root inside the Go environment (one call, ~1-2 min):
#   bash .gpu/run bash scripts/gpu-ncu.sh
#   KERNELS='regex:k_flash_(fwd|bwd_dkdv|bwd_dq)$' (ncu's -k)  B=8 (batch)  COUNT=36 (launches
#   profiled: 12 layers x 3 kernels)  ENV="GODDP_X=1 ..." (a variant's settings)  OUT=dir
#   (default out/gpu-ncu): ncu.log (everything), the summary printed last.
# ncu needs the GPU's performance counters: where they are not open to this user it prints
# ERR_NVGPUCTRPERM, which this script quotes.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
KERNELS=${KERNELS:-'regex:k_flash_(fwd|bwd_dkdv|bwd_dq)$'}
B=${B:-8}
COUNT=${COUNT:-36}
OUT=${OUT:-out/gpu-ncu}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[ -x "$NCU" ] || { echo "gpu-ncu: no ncu on this host (PATH, /usr/local/cuda/bin)"; exit 2; }
"$NCU" --version | tail -1
bash scripts/cuda-env.sh go test -tags cuda -c -o "$OUT/model.test" ./model/ || { echo "gpu-ncu: build failed"; exit 1; }
echo "the driver's launch statistics (TestCUDA_flashKernelResources; ENV applies):"
# shellcheck disable=SC2086 # ENV is a list of assignments
env ${ENV:-} bash scripts/cuda-env.sh go test -count=1 -tags cuda ./model/cuda/ -run '^TestCUDA_flashKernelResources$' -v 2>&1 |
  grep -E 'k_flash|FAIL|ok ' | sed 's/^ *//'
# The kernels' PTX into a cache of this run's own, so ptxas can say each one's registers, spills
# and shared memory (this needs no counters: it answers the register half even where ncu cannot).
export XDG_CACHE_HOME="$OUT/cache"
rm -rf "$XDG_CACHE_HOME"
# shellcheck disable=SC2086 # ENV is a list of assignments
(cd model && env ${ENV:-} GODDP_BENCH="$B" GODDP_BENCH_STEPS=1 "$NCU" -k "$KERNELS" --launch-count "$COUNT" \
  --section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats \
  --print-summary per-kernel "$OUT/model.test" -test.run '^TestCUDA_gpt2Bench$') > "$OUT/ncu.log" 2>&1
rc=$?
echo "ncu exit $rc (log $OUT/ncu.log)"
grep -m3 -E 'ERR_NVGPUCTRPERM|==ERROR==' "$OUT/ncu.log"
grep -E '^ +k_[a-z0-9_]+|Registers Per Thread|Shared Memory Configuration Size|Static Shared Memory Per Block|Block Limit (Registers|Shared Mem|Warps)|Theoretical Occupancy|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput|^ +Duration|Warp Cycles Per Issued Instruction|Stall' "$OUT/ncu.log" | head -120
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
PTXAS=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
echo
echo "ptxas -v, sm_$cc (registers, spills, shared memory per kernel of the cached modules):"
for f in "$XDG_CACHE_HOME"/goddp/kernels/*.ptx; do
  [ -e "$f" ] || { echo "no cached PTX under $XDG_CACHE_HOME"; break; }
  grep -q 'k_flash_fwd' "$f" || continue
  "$PTXAS" -arch="sm_$cc" -v -o /dev/null "$f" 2>&1 | grep -E "Compiling entry|spill|Used [0-9]+ registers" |
    sed -E "s/.*Compiling entry function '([a-z0-9_]+)'.*/\1:/; s/^ptxas info +: //"
done
rm -f "$OUT/model.test"
exit $rc
