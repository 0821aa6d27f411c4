#!/usr/bin/env bash
# bench-gpu-ab.sh BASE_DIR — GPT-2 small on one GPU, this tree against an older one in the same
# call, alternating, so a change is measured against the machine as it is now (a number from an
# earlier call differs by a few percent from the card's state alone). Run on the GPU host inside
# the Go environment: `bash .gpu/run bash scripts/bench-gpu-ab.sh .base` where .base holds the
# older tree (e.g. `git archive OLD | tar -x -C .base`, with this tree's go.mod and go.sum copied
# in so the vendored modules match; carry it with the call).
#
# For each of ROUNDS rounds, base then new: the model bench (TestCUDA_gpt2Bench, batch BATCH,
# STEPS timed steps) and the trainer (ddptrain on configs/gpt2-124m.yaml, TSTEPS steps, the
# median of its logged windows after the first). Prints each run and the medians.
#   ROUNDS=3 BATCH=16 STEPS=20 TSTEPS=60 OUT=dir (default out/bench-gpu-ab)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
base=${1:?usage: bench-gpu-ab.sh BASE_DIR}
ROUNDS=${ROUNDS:-3}; BATCH=${BATCH:-16}; STEPS=${STEPS:-20}; TSTEPS=${TSTEPS:-60}
OUT=${OUT:-out/bench-gpu-ab}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
if [ -d vendor ]; then rm -rf "$base/vendor"; cp -r vendor "$base/vendor"; fi
for side in base new; do
  dir=.; [ "$side" = base ] && dir=$base
  # each tree with its own cuda-env.sh (the compatibility header's path moved with model/cuda)
  (cd "$dir" && bash scripts/cuda-env.sh go test -tags cuda -c -o "$OUT/$side.model.test" ./model/ &&
    bash scripts/cuda-env.sh go build -tags cuda -o "$OUT/$side.bin/" ./cmd/ddptrain)
done
for r in $(seq "$ROUNDS"); do
  for side in base new; do
    (cd model && GODDP_BENCH=$BATCH GODDP_BENCH_STEPS=$STEPS "$OUT/$side.model.test" -test.run '^TestCUDA_gpt2Bench$' -test.v) \
      > "$OUT/$side.model.$r.log" 2>&1
    awk -v s="$side" -v r="$r" '/^RESULT/ {print "model", s, r, $6}' "$OUT/$side.model.$r.log" | tee -a "$OUT/runs.txt"
    # each side with its own configs/gpt2-124m.yaml, on the byte-level text (no shards to make)
    dir=.; [ "$side" = base ] && dir=$base
    extra=(); grep -q '^  kind: tokens' "$dir/configs/gpt2-124m.yaml" && extra=(--set data.kind=text --set data.path=)
    "$OUT/$side.bin/ddptrain" --config "$dir/configs/gpt2-124m.yaml" "${extra[@]}" --device cuda --set train.max_steps=$TSTEPS \
      --set checkpoint.dir= --metrics "$OUT/$side.train.$r.jsonl" > "$OUT/$side.train.$r.log" 2>&1
    grep '"event":"step"' "$OUT/$side.train.$r.jsonl" | sed -n '2,$p' | sed 's/.*"step_ms":\([0-9.]*\).*/\1/' | sort -n \
      | awk -v s="$side" -v r="$r" '{a[NR]=$1} END {print "trainer", s, r, a[int((NR+1)/2)]}' | tee -a "$OUT/runs.txt"
  done
done
echo
echo "median step ms over $ROUNDS rounds (model bench batch $BATCH; trainer configs/gpt2-124m.yaml)"
for key in "model base" "model new" "trainer base" "trainer new"; do
  vals=$(awk -v k="$key" '$1" "$2 == k {print $4}' "$OUT/runs.txt" | sort -n)
  med=$(echo "$vals" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  printf "%-14s %8.2f   (%s)\n" "$key" "$med" "$(echo $vals)"
done
