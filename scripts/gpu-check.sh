#!/usr/bin/env bash
# gpu-check.sh [BASE_DIR] — a GPU session's first call: the whole CUDA test suite, then the cuDNN
# convolutions' tests, then (with BASE_DIR) the A/B of GPT-2 small against an older tree. Fits one
# 10-minute device call (measured 2026-12-05: the suite ≈1 min with compiling, cudnn ≈30 s, the A/B
# ≈5 min at ROUNDS=3). Run inside the Go environment on the GPU host:
#   bash .gpu/run bash scripts/gpu-check.sh .base      (carry [".gpu", ".base"])
# where .base is an older tree: `mkdir .base && git archive OLD | tar -x -C .base && cp go.mod
# go.sum .base/` (and `.base` in .git/info/exclude). Logs under $OUT (default out/gpu-check); a
# short table last.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
OUT=${OUT:-out/gpu-check}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
nvidia-smi -L || true
# PKGS="./a/ ./b/" runs those packages in that order instead (a call that finishes what an
# earlier one's SUITE_LIMIT cut off).
pkgs=${PKGS:-$(git grep -lE '^//go:build .*cuda' -- '*.go' ':!scripts/' 2>/dev/null | xargs -n1 dirname | sort -u | sed 's|^|./|' | tr '\n' ' ')}
[ -n "$pkgs" ] || pkgs="./model/cuda/ ./model/ ./ddp/ ./worker/ ./model/cuda/cudadrv/ ./model/cuda/cudnn/"
# One package at a time under go test's own -timeout, the whole under 420 s: a package that hangs
# names its running test (go test's timeout panic) and the others still report. (One go test over
# every package under `timeout 420` reported nothing at all when one package ran long: session 15.)
: > "$OUT/cuda.log"
cuda=0
t0=$SECONDS
for p in $pkgs; do
  left=$((${SUITE_LIMIT:-420} - (SECONDS - t0)))
  if [ "$left" -lt 20 ]; then
    echo "SKIPPED $p: the suite's ${SUITE_LIMIT:-420} s are spent" | tee -a "$OUT/cuda.log"
    cuda=124
    continue
  fi
  lim=$(( left < ${PKG_LIMIT:-240} ? left : ${PKG_LIMIT:-240} ))
  timeout $((lim + 15)) bash scripts/cuda-env.sh go test -count=1 -v -tags cuda -timeout "$((lim - 5))s" "$p" >> "$OUT/cuda.log" 2>&1
  rc=$?
  [ "$rc" = 0 ] || cuda=$rc
  echo "== $p exit $rc ($((SECONDS - t0)) s)" >> "$OUT/cuda.log"
done
timeout 120 bash scripts/cuda-env.sh go test -count=1 -tags cuda,cudnn ./model/cuda/ ./model/ -run 'CUDA_conv|CUDA_resnet|CUDA_bn|CUDA_fused' -v > "$OUT/cudnn.log" 2>&1
cudnn=$?
ab=skipped
if [ -n "${1:-}" ]; then
  ROUNDS=${ROUNDS:-3} OUT="$OUT/ab" timeout 300 bash scripts/bench-gpu-ab.sh "$1" > "$OUT/ab.log" 2>&1
  ab=$?
fi
echo
grep -hE '^(ok|FAIL|panic|SKIPPED|== )|--- FAIL|^\s+Test.*\([0-9.ms]+\)$' "$OUT/cuda.log" "$OUT/cudnn.log" | head -40
echo "slowest tests:"
grep -hE -- '^\s*--- (PASS|FAIL).*\([0-9.]+s\)$' "$OUT/cuda.log" | sed -E 's/.*--- (PASS|FAIL): ([^ ]+) \(([0-9.]+)s\)/\3 \1 \2/' | sort -rn | head -12
echo "part           exit"
printf '%-14s %s\n' "-tags cuda" "$cuda" "-tags cudnn" "$cudnn" "A/B" "$ab"
[ "$ab" = skipped ] || tail -8 "$OUT/ab.log"
