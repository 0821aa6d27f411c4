#!/usr/bin/env bash
# bench-resnet.sh — ResNet-50 training on one GPU, goddp and PyTorch 2.x side by side in one run
# (issue 33 stage 3): synthetic 224×224 batches of 1000 classes, SGD with momentum, channels last.
#
#   1. The GPU tests of the convolutional path (-tags cuda,cudnn: every op against the CPU, a
#      ResNet's losses against the CPU's).
#   2. goddp: ddptrain on configs/resnet50-synthetic.yaml with --device cuda, model.layout=nhwc,
#      per mode (fp32, fp16, fp16 with every residual block checkpointed) and batch: the median
#      step of TSTEPS steps after the first logged window, images/s and peak allocated memory.
#   3. goddp: the largest micro-batch under BUDGET (train.micro_batch: auto: doubling, then
#      bisection, real trial steps; the budget bounds reserved bytes, the cache freed and the
#      allocation retried first), per mode.
#   4. PyTorch eager and torch.compile the same way (scripts/bench_resnet_pytorch.py; its
#      checkpointing is per stage, layer1..layer4, goddp's per residual block).
#
# Run on the GPU host from the repository root inside the Go environment, e.g.
#   bash .gpu/run bash scripts/bench-resnet.sh
#   BATCHES=64,128  TSTEPS=30  BUDGET=16  (GiB)  OUT=dir (default ./out/bench-resnet)
#   SKIP_TESTS=1 SKIP_TORCH=1 SKIP_COMPILE=1 SKIP_MAXBATCH=1
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BATCHES=${BATCHES:-64,128}
TSTEPS=${TSTEPS:-30}
BUDGET=${BUDGET:-16}
OUT=${OUT:-out/bench-resnet}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0)) s] $*"; }

stamp "build (-tags cuda,cudnn)"
bash scripts/cuda-env.sh go build -tags cuda,cudnn -o "$OUT/bin/" ./cmd/ddptrain || { echo "build failed"; exit 1; }
if [ -z "${SKIP_TESTS:-}" ]; then
  stamp "GPU tests of the convolutional path"
  bash scripts/cuda-env.sh go test -count=1 -tags cuda,cudnn ./model/cuda/ ./model/ -run 'CUDA_conv|CUDA_resnet' 2>&1 | tail -8
fi

# modeargs MODE: ddptrain's settings for fp32 | fp16 | fp16+ckpt.
modeargs() {
  case $1 in
  fp32) echo "--set precision=fp32" ;;
  fp16) echo "--set precision=fp16" ;;
  fp16+ckpt) echo "--set precision=fp16 --set model.checkpoint=blocks" ;;
  esac
}
run() { # name, mode, extra args...
  local name=$1 mode=$2; shift 2
  # shellcheck disable=SC2046
  "$OUT/bin/ddptrain" --device cuda --config configs/resnet50-synthetic.yaml --set model.layout=${LAYOUT:-nhwc} \
    --set data.workers=${WORKERS:-8} --set checkpoint.dir= $(modeargs "$mode") --metrics "$OUT/$name.jsonl" "$@" > "$OUT/$name.log" 2>&1
}
for mode in fp32 fp16 fp16+ckpt; do
  for b in ${BATCHES//,/ }; do
    stamp "goddp $mode batch $b"
    run "goddp-$mode-$b" $mode --set train.micro_batch=$b --set train.global_batch=$b --set train.max_steps=$TSTEPS --set train.log_every=5 ||
      { tail -3 "$OUT/goddp-$mode-$b.log"; continue; }
    grep '"event":"step"' "$OUT/goddp-$mode-$b.jsonl" | sed -n '2,$p' | sed 's/.*"step_ms":\([0-9.]*\).*/\1/' | sort -n |
      awk -v b=$b -v m=$mode -v peak="$(grep -o '"peak_memory_bytes":[0-9]*' "$OUT/goddp-$mode-$b.jsonl" | tail -1 | cut -d: -f2)" \
        '{a[NR]=$1} END {ms=a[int((NR+1)/2)]; printf "STEP goddp %s %d %.0f %.2f %.2f -\n", m, b, b*1000/ms, ms, peak/2^30}' | tee -a "$OUT/goddp.log"
  done
done
if [ -z "${SKIP_MAXBATCH:-}" ]; then
  for mode in fp32 fp16 fp16+ckpt; do
    stamp "goddp largest batch, $mode, ${BUDGET} GiB"
    run "goddp-max-$mode" $mode --set train.micro_batch=auto --set train.memory_budget=${BUDGET}GiB --set train.max_steps=2 --set train.log_every=1
    b=$(grep 'micro_batch auto' "$OUT/goddp-max-$mode.log" | grep -o 'largest_fit_here=[0-9]*' | head -1 | cut -d= -f2)
    echo "MAXBATCH goddp $mode ${b:-failed}" | tee -a "$OUT/goddp.log"
  done
fi
if [ -z "${SKIP_TORCH:-}" ]; then
  mb=""; [ -z "${SKIP_MAXBATCH:-}" ] && mb="--maxbatch fp32,amp,amp+ckpt --budget-gib $BUDGET"
  stamp "PyTorch eager"
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 python3 scripts/bench_resnet_pytorch.py --batch "$BATCHES" --steps 20 $mb 2>&1 | tee "$OUT/pytorch.log"
  if [ -z "${SKIP_COMPILE:-}" ]; then
    stamp "PyTorch torch.compile"
    PYTHONUNBUFFERED=1 python3 scripts/bench_resnet_pytorch.py --batch "$BATCHES" --steps 20 --modes amp --compile 2>&1 | tee "$OUT/pytorch-compile.log"
  fi
fi

echo
echo "ResNet-50 train step, 224×224, SGD momentum, channels last — $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
echo "impl mode batch images/s ms peak_GiB reserved_GiB"
grep -hs '^STEP' "$OUT/goddp.log" "$OUT"/pytorch*.log | sed 's/^STEP //' | sed 's/ amp / fp16 /; s/ amp+ckpt / fp16+ckpt /' | sort -k2,2 -k3,3n -k1,1
echo "largest batch under ${BUDGET} GiB (impl mode batch):"
grep -hs '^MAXBATCH' "$OUT/goddp.log" "$OUT"/pytorch*.log | awk '{print $2, $3, $4}' | sed 's/ amp / fp16 /; s/ amp+ckpt / fp16+ckpt /' | sort -k2,2 -k1,1
