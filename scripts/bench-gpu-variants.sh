#!/usr/bin/env bash
# bench-gpu-variants.sh NAME=ENV... — GPT-2 small's model bench (TestCUDA_gpt2Bench) on one GPU,
# one build, each variant (a name and the environment it sets) run in turn for ROUNDS rounds, so
# an off-default knob is measured against the default on the machine as it is now. Run on the GPU
# host inside the Go environment, e.g. the issue-35 knobs:
#   bash .gpu/run bash scripts/bench-gpu-variants.sh base= epilogue=GODDP_GEMM_EPILOGUE=1 rows128=GODDP_FLASH_ROWS=128
# A variant's ENV is space-separated assignments after the first '='. Prints each run and, per
# batch and variant, the median step, its ratio to the first variant's and the peak allocated.
#   ROUNDS=3 BATCHES="16 8" STEPS=20 OUT=dir (default out/bench-gpu-variants)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ $# -ge 2 ] || { echo "usage: bench-gpu-variants.sh NAME=[ENV ...] NAME=[ENV ...] ..." >&2; exit 2; }
ROUNDS=${ROUNDS:-3}; BATCHES=${BATCHES:-16 8}; STEPS=${STEPS:-20}
OUT=${OUT:-out/bench-gpu-variants}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
bash scripts/cuda-env.sh go test -tags cuda -c -o "$OUT/model.test" ./model/
: > "$OUT/runs.txt"
for r in $(seq "$ROUNDS"); do
  for v in "$@"; do
    name=${v%%=*}; env=${v#*=}
    for b in $BATCHES; do
      log="$OUT/$name.b$b.$r.log"
      # shellcheck disable=SC2086 # env is a list of assignments
      (cd model && env $env GODDP_BENCH="$b" GODDP_BENCH_STEPS="$STEPS" "$OUT/model.test" -test.run '^TestCUDA_gpt2Bench$' -test.v) > "$log" 2>&1 ||
        echo "$name batch $b round $r: exit $? (see $log)"
      awk -v n="$name" -v r="$r" '/^RESULT/ {print n, $3, r, $6, $7}' "$log" | tee -a "$OUT/runs.txt"
    done
  done
done
echo
echo "median step ms over $ROUNDS rounds (model bench, GPT-2 small, T 1024)"
first=${1%%=*}
for b in $BATCHES; do
  base=$(awk -v n="$first" -v b="$b" '$1 == n && $2 == b {print $4}' "$OUT/runs.txt" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  for v in "$@"; do
    name=${v%%=*}
    vals=$(awk -v n="$name" -v b="$b" '$1 == n && $2 == b {print $4}' "$OUT/runs.txt" | sort -n)
    med=$(echo "$vals" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    if [ -n "$med" ] && [ -n "$base" ]; then
      peak=$(awk -v n="$name" -v b="$b" '$1 == n && $2 == b && $5 != "" {p = $5} END {print p}' "$OUT/runs.txt")
      printf "batch %-3s %-12s %8.2f  x%.3f  peak %5s GiB  (%s)\n" "$b" "$name" "$med" "$(awk -v m="$med" -v b0="$base" 'BEGIN {print m / b0}')" "${peak:--}" "$(echo "$vals" | tr "\n" " ")"
    else
      printf "batch %-3s %-12s %8s  (no result)\n" "$b" "$name" "-"
    fi
  done
done
