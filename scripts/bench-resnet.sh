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
#      checkpointing is per stage, layer1..layer4, goddp's per residual block). PyTorch's batch
#      is drawn on the GPU once, so its rows compare with goddp-model's (the model step alone,
#      TestCUDA_resnet50Profile, fp16 and fp32), ddptrain's adding the loader and the upload.
#
# Run on the GPU host from the repository root inside the Go environment, e.g.
#   bash .gpu/run bash scripts/bench-resnet.sh
#   BATCHES=64,128  TSTEPS=30  BUDGET=16  (GiB)  OUT=dir (default ./out/bench-resnet)
#   SKIP_TESTS=1 SKIP_TORCH=1 SKIP_COMPILE=1 SKIP_MAXBATCH=1 SKIP_MODEL_STEP=1
#   MODES=fp32,fp16,fp16+ckpt  LAYOUT=nhwc|nchw  WORKERS=8
#   VARIANTS="base split:GODDP_BN_SPLIT=1 split+tf32:GODDP_BN_SPLIT=1,GODDP_CUDNN_TF32=1": each goddp
#     row once per variant, its environment set (model/cuda/env.go's knobs); a variant other than
#     base is named in the row's mode (fp32/split). Default "base".
#   PRINT_ONLY=1: print the goddp commands, run nothing (no GPU, no build).
# Each goddp row ends with the median data_ms (the loop's wait for batches, from the metrics).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BATCHES=${BATCHES:-64,128}
TSTEPS=${TSTEPS:-30}
BUDGET=${BUDGET:-16}
MODES=${MODES:-fp32,fp16,fp16+ckpt}
VARIANTS=${VARIANTS:-base}
OUT=${OUT:-out/bench-resnet}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0)) s] $*"; }

if [ -n "${PRINT_ONLY:-}" ]; then
  SKIP_TESTS=1 SKIP_TORCH=1
  echo "build: bash scripts/cuda-env.sh go build -tags cuda,cudnn -o $OUT/bin/ ./cmd/ddptrain"
else
stamp "build (-tags cuda,cudnn)"
bash scripts/cuda-env.sh go build -tags cuda,cudnn -o "$OUT/bin/" ./cmd/ddptrain || { echo "build failed"; exit 1; }
fi
if [ -z "${SKIP_TESTS:-}" ]; then
  stamp "GPU tests of the convolutional path"
  bash scripts/cuda-env.sh go test -count=1 -tags cuda,cudnn ./model/cuda/ ./model/ -run 'CUDA_conv|CUDA_resnet|CUDA_bn' 2>&1 | tail -8
fi

# modeargs MODE: ddptrain's settings for fp32 | fp16 | fp16+ckpt.
modeargs() {
  case $1 in
  fp32) echo "--set precision=fp32" ;;
  fp16) echo "--set precision=fp16" ;;
  fp16+ckpt) echo "--set precision=fp16 --set model.checkpoint=blocks" ;;
  esac
}
run() { # name, mode, extra args... ($venv: the variant's environment, VAR=val,...)
  local name=$1 mode=$2; shift 2
  local envs=(${venv//,/ })
  if [ -n "${PRINT_ONLY:-}" ]; then
    # shellcheck disable=SC2046
    echo env "${envs[@]}" "$OUT/bin/ddptrain" --device cuda --config configs/resnet50-synthetic.yaml --set model.layout=${LAYOUT:-nhwc} \
      --set data.workers=${WORKERS:-8} --set checkpoint.dir= $(modeargs "$mode") --metrics "$OUT/$name.jsonl" "$@"
    return 1
  fi
  # shellcheck disable=SC2046
  env "${envs[@]}" "$OUT/bin/ddptrain" --device cuda --config configs/resnet50-synthetic.yaml --set model.layout=${LAYOUT:-nhwc} \
    --set data.workers=${WORKERS:-8} --set checkpoint.dir= $(modeargs "$mode") --metrics "$OUT/$name.jsonl" "$@" > "$OUT/$name.log" 2>&1
}
for mode in ${MODES//,/ }; do
  for b in ${BATCHES//,/ }; do
    for v in $VARIANTS; do
      label=${v%%:*} venv=""
      [ "$v" != "$label" ] && venv=${v#*:}
      m=$mode n="goddp-$mode-$b"
      [ "$label" != base ] && m="$mode/$label" n="goddp-$mode-$label-$b"
      stamp "goddp $m batch $b ${venv}"
      run "$n" $mode --set train.micro_batch=$b --set train.global_batch=$b --set train.max_steps=$TSTEPS --set train.log_every=5 ||
        { [ -z "${PRINT_ONLY:-}" ] && tail -3 "$OUT/$n.log"; continue; }
      median() { grep '"event":"step"' "$OUT/$n.jsonl" | sed -n '2,$p' | grep -o "\"$1\":[0-9.]*" | cut -d: -f2 | sort -n |
        awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : "nan")}'; }
      ms=$(median step_ms) dms=$(median data_ms)
      awk -v b=$b -v m=$m -v ms="$ms" -v dms="$dms" -v peak="$(grep -o '"peak_memory_bytes":[0-9]*' "$OUT/$n.jsonl" | tail -1 | cut -d: -f2)" \
        'BEGIN {printf "STEP goddp %s %d %.0f %.2f %.2f - %.1f\n", m, b, b*1000/ms, ms, peak/2^30, dms}' | tee -a "$OUT/goddp.log"
    done
  done
done
# The model step alone (TestCUDA_resnet50Profile: forward, backward and SGD on a batch already on
# the GPU, median of 5): what PyTorch's bench measures too (it draws its batch on the GPU once and
# uploads nothing), where ddptrain's rows add the loader and the upload.
if [ -z "${SKIP_MODEL_STEP:-}" ] && [ -z "${PRINT_ONLY:-}" ]; then
  # fp32 also with TF32 convolutions (GODDP_CUDNN_TF32=1): PyTorch's default for cuDNN, so the
  # row its fp32 compares with.
  mmodes=""
  for mode in ${MODES//,/ }; do
    case $mode in fp16) mmodes="$mmodes fp16" ;; fp32) mmodes="$mmodes fp32 fp32+tf32" ;; esac
  done
  for mode in $mmodes; do
    pdt=f16 tf32=0
    case $mode in fp32) pdt=f32 ;; fp32+tf32) pdt=f32 tf32=1 ;; esac
    for b in ${BATCHES//,/ }; do
      stamp "goddp model step $mode batch $b"
      GODDP_CUDNN_TF32=$tf32 GODDP_RESNET_PROFILE=$b GODDP_RESNET_PROFILE_DTYPE=$pdt bash scripts/cuda-env.sh go test -count=1 -tags cuda,cudnn ./model/ \
        -run TestCUDA_resnet50Profile -v > "$OUT/model-$mode-$b.log" 2>&1
      ms=$(grep -o 'one step [0-9.]* ms' "$OUT/model-$mode-$b.log" | awk '{print $3}')
      if [ -n "$ms" ]; then
        awk -v b="$b" -v m="$mode" -v ms="$ms" 'BEGIN {printf "STEP goddp-model %s %d %.0f %.2f - - -\n", m, b, b*1000/ms, ms}' | tee -a "$OUT/goddp.log"
      else
        echo "goddp model step $mode $b failed:"; tail -5 "$OUT/model-$mode-$b.log"
      fi
    done
  done
fi
[ -n "${PRINT_ONLY:-}" ] && exit 0
venv=""
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
echo "impl mode batch images/s ms peak_GiB reserved_GiB data_ms(goddp)"
grep -hs '^STEP' "$OUT/goddp.log" "$OUT"/pytorch*.log | sed 's/^STEP //' | sed 's/ amp / fp16 /; s/ amp+ckpt / fp16+ckpt /' | sort -k2,2 -k3,3n -k1,1
echo "largest batch under ${BUDGET} GiB (impl mode batch):"
grep -hs '^MAXBATCH' "$OUT/goddp.log" "$OUT"/pytorch*.log | awk '{print $2, $3, $4}' | sed 's/ amp / fp16 /; s/ amp+ckpt / fp16+ckpt /' | sort -k2,2 -k1,1
