#!/usr/bin/env bash
# gpu-stage3-check.sh — what can be checked of the GPU stage-3 scripts on a machine without a GPU
# (about a minute on two cores): shellcheck (where installed), the Python files parse, every part's
# dry run (PRINT_ONLY=1), then the ddptrain/ddplaunch/ddpbench parts of each run on the CPU with a
# tiny GPT (configs/opticks-gpt-tiny.yaml), so the flags and config keys the scripts pass are ones
# the programs accept and the tables come out of real metrics. The GPU-only pieces (the model bench,
# PyTorch, CUDA IPC) are left out there. Fails (exit 1) naming what failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
W=$(mktemp -d /tmp/goddp-stage3-check.XXXXXX)
fail=0
bad() { echo "FAIL: $*"; fail=1; }
ok() { echo "ok: $*"; }
scripts=(scripts/gpu-stage3.sh scripts/bench-gpu-vs-pytorch.sh scripts/bench-gpu-ddp.sh scripts/bench-gpu-ddp-rows.sh scripts/stage3-lib.sh scripts/bench-gpu-variants.sh)
for f in "${scripts[@]}"; do bash -n "$f" || bad "bash -n $f"; done
if command -v shellcheck > /dev/null; then
  shellcheck -x "${scripts[@]}" && ok shellcheck || bad shellcheck
else
  echo "skip: shellcheck not installed"
fi
python3 -c 'import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]' scripts/stage3_metrics.py scripts/bench_gpt2_pytorch.py &&
  ok "python files parse" || bad "python parse"

# Dry runs: every part prints its commands; a wrong part is refused.
for p in bf16 shard ipc resnet memory; do
  out=$(PRINT_ONLY=1 OUT="$W/po" LOGS="$W/po-$p" bash scripts/gpu-stage3.sh "$p" 2>&1) || bad "PRINT_ONLY $p: exit $?"
  grep -q '^+ ' <<< "$out" || bad "PRINT_ONLY $p printed no command"
done
grep -q -- '--set precision=bf16' <<< "$(PRINT_ONLY=1 OUT="$W/po" LOGS="$W/po-x" bash scripts/gpu-stage3.sh bf16)" || bad "bf16 dry run has no bf16 trainer"
PRINT_ONLY=1 bash scripts/gpu-stage3.sh nonsense > /dev/null 2>&1 && bad "part nonsense accepted"
ok "dry runs"

go build -o "$W/bin/" ./cmd/ddptrain ./cmd/ddplaunch ./cmd/ddpbench || { bad "go build"; exit 1; }
cpu=(env DEVICE=cpu CONFIG=configs/opticks-gpt-tiny.yaml BIN="$W/bin")

# fp16: the trainer rows with and without gradient clipping (the no-clip row is PyTorch's work).
"${cpu[@]}" MODEL=0 EAGER=0 COMPILE=0 BATCHES=4 TSTEPS=25 OUT="$W/fp16" \
  bash scripts/bench-gpu-vs-pytorch.sh > "$W/fp16.txt" 2>&1 || bad "fp16 part: exit $? ($W/fp16.txt)"
grep -q '^4 *ddptrain' "$W/fp16.txt" || bad "fp16 table has no ddptrain row"
grep -q '^4 *noclip' "$W/fp16.txt" || bad "fp16 table has no noclip row"
# the setting took: the gradients are clipped at 1.0 in one run and not in the other (norms ~2-3)
lastloss() { grep -o '"loss":[0-9.]*' "$1" | tail -1; }
[ -n "$(lastloss "$W/fp16/trainer-noclip-4.jsonl")" ] && [ "$(lastloss "$W/fp16/trainer-noclip-4.jsonl")" != "$(lastloss "$W/fp16/trainer-4.jsonl")" ] ||
  bad "the noclip run's loss is the clipped run's: train.grad_clip=0 did not take"
grep -q '^4 *synth' "$W/fp16.txt" || bad "fp16 table has no synth row"
grep -q 'data=synthetic-tokens' "$W/fp16/trainer-synth-4.log" ||
  bad "the synth run did not train on synthetic tokens ($W/fp16/trainer-synth-4.log)"
ok "fp16 part on the cpu"

# bf16: the trainer rows, the loss curves and the two workers with ddp.wire bf16.
"${cpu[@]}" DTYPE=bf16 MODEL=0 EAGER=0 COMPILE=0 BATCHES=4 TSTEPS=25 LOSS_STEPS=30 LOSS_BATCH=4 WSTEPS=10 OUT="$W/bf16" \
  bash scripts/bench-gpu-vs-pytorch.sh > "$W/bf16.txt" 2>&1 || bad "bf16 part: exit $? ($W/bf16.txt)"
grep -q '^4 *ddptrain' "$W/bf16.txt" || bad "bf16 table has no ddptrain row"
grep -q 'loss over the run: bf16-vs-fp16 .* rel 0\.0' "$W/bf16.txt" || bad "bf16 loss comparison missing or >= 10%"
grep -q 'ddp.wire bf16: 2 ranks: IDENTICAL' "$W/bf16.txt" || bad "bf16 wire: replicas not identical"
grep -q 'wire bf16' "$W/bf16/wire2.log" || bad "the two workers did not run with wire bf16"
ok "bf16 part on the cpu"

# shard: both settings, their memory reports and the largest batch.
"${cpu[@]}" ROWS=shard BATCH=4 STEPS=15 WS=2 BUDGET=64MiB OUT="$W/shard" bash scripts/bench-gpu-ddp.sh > "$W/shard.txt" 2>&1 ||
  bad "shard part: exit $? ($W/shard.txt)"
for sh in false true; do
  grep -qE "^2 +$sh +\| +[0-9.]+ .*\| +[0-9.]+ +<=1.55 .*IDENTICAL" "$W/shard.txt" || bad "shard table: no complete row for shard $sh"
  grep -qE "ddp.shard_optimizer $sh: [0-9]+ " "$W/shard.txt" || bad "shard: no largest batch for $sh"
done
grep -q "rank's shard" "$W/shard/shard-w2-true.log" || bad "ddp.shard_optimizer true did not shard (no shard row in the memory report)"
grep -qE "^2 +master +\| +[0-9.]+ .*IDENTICAL" "$W/shard.txt" || bad "shard table: no complete row for master (ddp.shard_master on)"
grep -q "master weights (rank's shard)" "$W/shard/shard-w2-master.log" || bad "ddp.shard_master on did not shard the master (no master shard row in the memory report)"
ok "shard part on the cpu"

# device: the host ring rows, the host path rows, and the device path and copies refused on the cpu
# (the row quotes the refusal naming ddp.intra_host) or, where they run, rows of their own.
"${cpu[@]}" ROWS=device BATCH=4 DSTEPS=20 D4STEPS=10 NS=2 ITERS=2 OUT="$W/device" bash scripts/bench-gpu-ddp.sh > "$W/device.txt" 2>&1 ||
  bad "device part: exit $? ($W/device.txt)"
grep -qE '^grpc +2 +497903616 +f16' "$W/device.txt" || bad "device: no host ring row for the whole gradient"
grep -qE '^2 +host +\| +[0-9.]+ .*IDENTICAL' "$W/device.txt" || bad "device: no host path row"
grep -qE '^2 +device +\| (SKIPPED: .*intra_host|[0-9.]+ .*IDENTICAL)' "$W/device.txt" || bad "device: the device row is neither a run nor a refusal naming ddp.intra_host"
grep -qE '^2 +copies +\| (SKIPPED: .*intra_host: copies|[0-9.]+ .*IDENTICAL .*param_sha256 against host: SAME)' "$W/device.txt" ||
  bad "device: the copies row is neither a run with the host path's weights nor a refusal naming ddp.intra_host: copies"
ok "device part on the cpu"

# bench-gpu-variants.sh TRAINER=1: ddptrain's own knobs A/B'd, here on the cpu.
TRAINER=1 DEVICE=cpu CONFIG=configs/opticks-gpt-tiny.yaml BATCHES=4 TSTEPS=20 ROUNDS=1 OUT="$W/variants" \
  bash scripts/bench-gpu-variants.sh base= nw=GODDP_STEP_END_WAIT=0 > "$W/variants.txt" 2>&1 || bad "variants (trainer): exit $? ($W/variants.txt)"
for v in base nw; do
  grep -qE "^batch 4 +$v +[0-9.]+ +x[0-9.]+" "$W/variants.txt" || bad "variants (trainer): no median row for $v"
done
ok "variants (trainer) on the cpu"

if [ "$fail" = 0 ]; then
  echo "gpu-stage3-check: all passed"
  rm -rf "$W"
else
  echo "gpu-stage3-check: FAILED (outputs in $W)"
fi
exit "$fail"
