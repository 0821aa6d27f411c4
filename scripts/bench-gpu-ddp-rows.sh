#!/usr/bin/env bash
# bench-gpu-ddp-rows.sh shard|device — the stage-3 rows of scripts/bench-gpu-ddp.sh (which runs this
# for ROWS=shard and ROWS=device): GPT-2 small (configs/gpt2-124m.yaml on byte-level text),
# workers sharing the one GPU, micro-batch BATCH (8) each. Each fits one 10-minute device call.
#
# shard (issue 31): for W in WS (2,4) and ddp.shard_optimizer off/on, and on with
#   ddp.overlap_gather: on (the row "overlap": the weights' all-gather left to the next forward), and that with
#   ddp.shard_master: on (the row "master": the f32 master kept for the shard only), and that with
#   ddp.intra_host: device (the row "device", in SHARDROWS=false,true,overlap,master,device only: the
#   reduce-scatter and all-gather over CUDA IPC, GODDP_IPC_WAIT=IPC_WAIT; under MPS), and master with
#   ddp.shard_gather: device and ddp.shard_reduce: host (the row "peer", in SHARDROWS only: the f16
#   weights copied between the devices after one meeting, ddp/shard_peer.go; the other sharded rows
#   pin ddp.shard_gather: host, since auto takes device on cuda), and peer with ddp.shard_reduce:
#   device (the row "peerred", in SHARDROWS only, auto's choice on one GPU since session 22: the f16
#   gradients reduce-scattered by copies between the devices' staging buffers and a ring-ordered sum
#   on each, ddp/shard_peer_reduce.go; a tree without it refuses the key: a SKIPPED row), and master
#   with both keys left to auto (the row "auto", in SHARDROWS only: peerred on one GPU). The
#   unsharded row "false" runs ddp.intra_host: auto (copies on one shared GPU). STEPS (30) steps with
#   --memory-report: the step (median of the logged windows after the first), per-rank peak
#   (each rank's summary), static memory (rank 0's report: peak − input batch − activations;
#   target ≤ 0.6 GiB + 1.9 GiB / W), param_sha256 of all ranks; then the largest micro-batch under
#   BUDGET (16GiB) per rank with MAXW (2) workers, off/on/master (MAXROWS: the rows' names above; train.micro_batch: auto with
#   train.memory_budget: doubling then bisection with real trial steps, worker/autobatch.go; the
#   budget bounds reserved bytes; MAXROWS set and empty skips the search).
# device (issue 34): the all-reduce alone for N in NS (2,4), host ring and CUDA IPC side by side
#   (ddpbench allreduce --device cuda: algbw and busbw; a 25 MiB-f32 bucket and the whole gradient,
#   WIRES f16); then the one-worker step and, for each N, ddp.intra_host host and device
#   (DSTEPS=200 steps at N=2, D4STEPS=60 at N=4): step, target 1.10 × N × one worker, replicas
#   (param_sha256), the loss curve against the host path's (target within 1e-3 relative). A run that
#   refuses its settings (ddp.intra_host: device in a tree without the engine's path, or on
#   --device cpu) is a SKIPPED row quoting the refusal, and the rest goes on. WAITS (kernel,stream):
#   the ways the device path's ranks wait for each other (GODDP_IPC_WAIT, model/cuda/ipc_pace.go; set and empty: none),
#   each measured alone and in training: the row "device" waits in the kernel, "device-stream"
#   by the stream. COPIES=1 (the default; 0: left out) adds the row "copies": ddp.intra_host: copies,
#   the staged f16 all-reduce by copies between the devices (ddp/engine_peer.go; auto's choice where
#   the ranks share one GPU), whose param_sha256 should be the host path's (its loss column says SAME or DIFFER). AUTO=1
#   adds the row "auto" (ddp.intra_host: auto, the default; its Info line in the log says which path).
#
#   OUT=dir (default out/bench-gpu-ddp-ROWS)  BIN=dir (prebuilt ddptrain, ddplaunch, ddpbench; else
#   `make cuda` into bin/)  CONFIG DEVICE=cuda  PRINT_ONLY=1 (print the commands)
#   DEVICE=cpu with a tiny CONFIG runs it on a CPU (scripts/gpu-stage3-check.sh does).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
. scripts/stage3-lib.sh
ROWS=${1:?usage: bench-gpu-ddp-rows.sh shard|device}
case $ROWS in shard | device) ;; *) echo "bench-gpu-ddp-rows.sh: rows $ROWS: want shard or device" >&2; exit 2 ;; esac
STEPS=${STEPS:-30}
BATCH=${BATCH:-8}
CONFIG=${CONFIG:-configs/gpt2-124m.yaml}
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-out/bench-gpu-ddp-$ROWS}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
t0=$(date +%s)
stamp() { echo "=== $1 ($(($(date +%s) - t0)) s)"; }
if [ -z "${BIN:-}" ]; then
  stamp "build (make cuda)"
  x make cuda > "$OUT/build.log" 2>&1 || { tail -5 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
  BIN=bin
fi
[ -n "${PRINT_ONLY:-}" ] || nvidia-smi -L 2>/dev/null || true

# launch NAME W STEPS SETS... [-- DDPTRAIN-FLAGS...]: W workers on this host, metrics in
# $OUT/NAME.jsonl (ddplaunch writes rank r's as NAME.rankR.jsonl), output in $OUT/NAME.log; its
# exit status. timeout --foreground stays in the caller's process group, so gpu-stage3.sh's limit
# (which signals its whole group) reaches ddplaunch too; ddplaunch then stops its workers.
launch() {
  local name=$1 w=$2 n=$3; shift 3
  local sets=() rest=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do sets+=("$1"); shift; done
  if [ $# -gt 0 ]; then shift; rest=("$@"); fi
  rm -f "$OUT/$name".jsonl "$OUT/$name".rank*.jsonl # an earlier run's files must not stand in for this one's
  x timeout --foreground "${RUN_TIMEOUT:-150}" "$BIN/ddplaunch" --nproc-per-node "$w" --config "$CONFIG" --set data.kind=text --set data.path= \
    --set train.max_steps="$n" --set train.micro_batch="$BATCH" --set train.log_every=5 --set train.eval_batches=2 \
    --set checkpoint.dir= "${sets[@]}" -- --device "$DEVICE" --metrics "$OUT/$name.jsonl" "${rest[@]}" > "$OUT/$name.log" 2>&1
}
# refusal NAME: why a run failed — the launcher's or trainer's own line first (a refusal names its
# key: "ddplaunch: config: ddp.intra_host: ...", "ddptrain: ddp.intra_host: device needs --device
# cuda ..."), else the first error line, else the last line.
refusal() {
  { grep -m1 -E '^(\[rank [0-9]+\] )?(ddplaunch: config:|ddptrain: )' "$OUT/$1.log" ||
    grep -m1 -E '[Ee]rror|refus|invalid' "$OUT/$1.log" || tail -1 "$OUT/$1.log"; } 2>/dev/null | sed 's/^\[rank [0-9]*\] //' | cut -c1-200
}

if [ "$ROWS" = shard ]; then
  WS=${WS:-2,4}
  # shardsets ROW: the sets of a row: false, true, overlap (true with ddp.overlap_gather on), or
  # master (overlap with ddp.shard_master on, which needs fp16 or bf16: precision fp16 is set, as
  # gpt2-124m.yaml has it; the CPU check's tiny config is fp32)
  shardsets() {
    case $1 in
    overlap) echo "--set ddp.shard_optimizer=true --set ddp.overlap_gather=on --set ddp.shard_master=off --set ddp.shard_gather=host" ;;
    master) echo "--set ddp.shard_optimizer=true --set ddp.overlap_gather=on --set ddp.shard_master=on --set precision=fp16 --set ddp.shard_gather=host" ;;
    device) echo "--set ddp.shard_optimizer=true --set ddp.overlap_gather=on --set ddp.shard_master=on --set precision=fp16 --set ddp.intra_host=device" ;;
    peer) echo "--set ddp.shard_optimizer=true --set ddp.overlap_gather=on --set ddp.shard_master=on --set precision=fp16 --set ddp.shard_gather=device --set ddp.shard_reduce=host" ;;
    peerred) echo "--set ddp.shard_optimizer=true --set ddp.overlap_gather=on --set ddp.shard_master=on --set precision=fp16 --set ddp.shard_gather=device --set ddp.shard_reduce=device" ;;
    auto) echo "--set ddp.shard_optimizer=true --set ddp.overlap_gather=on --set ddp.shard_master=on --set precision=fp16" ;;
    true) echo "--set ddp.shard_optimizer=true --set ddp.overlap_gather=off --set ddp.shard_master=off --set ddp.shard_gather=host" ;;
    *) echo "--set ddp.shard_optimizer=$1 --set ddp.overlap_gather=off" ;;
    esac
  }
  SHARDROWS=${SHARDROWS:-false,true,overlap,master}
  for w in ${WS//,/ }; do
    for sh in ${SHARDROWS//,/ }; do
      stamp "$w workers, ddp.shard_optimizer $sh"
      # shellcheck disable=SC2046 # shardsets' words are the sets
      GODDP_IPC_WAIT=${IPC_WAIT:-kernel} launch "shard-w$w-$sh" "$w" "$STEPS" $(shardsets "$sh") -- --memory-report || echo "exit $?: $(refusal "shard-w$w-$sh")"
    done
  done
  MAXW=${MAXW:-2}
  BUDGET=${BUDGET:-16GiB}
  MAXROWS=${MAXROWS-false,true,master} # set and empty: no search
  for sh in ${MAXROWS//,/ }; do
    stamp "largest micro-batch under $BUDGET, $MAXW workers, ddp.shard_optimizer $sh"
    read -ra sets <<< "$(shardsets "$sh")" # the rows' names, as above
    BATCH=auto launch "max-$sh" "$MAXW" 2 "${sets[@]}" --set train.memory_budget="$BUDGET" --set train.log_every=1 ||
      echo "exit $?: $(refusal "max-$sh")"
  done
  [ -z "${PRINT_ONLY:-}" ] || exit 0
  stamp "table"
  echo
  echo "GPT-2 124M, micro-batch $BATCH per worker, workers sharing one GPU ($DEVICE), $STEPS steps: ddp.shard_optimizer off/on"
  printf '%-3s %-6s | %8s %7s | %-28s %6s | %7s %7s %7s | %s\n' W shard "step ms" "/unsh." "per-rank peak GiB" "max" "static" "target" "activ." "param_sha256"
  for w in ${WS//,/ }; do
    base=$(m step "$OUT/shard-w$w-false.jsonl")
    for sh in ${SHARDROWS//,/ }; do
      f=$OUT/shard-w$w-$sh
      ms=$(m step "$f.jsonl")
      peaks=- mx=- sha=- static=- act=-
      read -r peaks mx sha <<< "$(m rankrow "$f.jsonl" | sed 's/peaks=//; s/max=//; s/sha=//')"
      read -r _ _ _ static _ act <<< "$(m report "$f.log")"
      rel=$(awk -v a="$ms" -v b="$base" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.3f", a / b; else print "-" }')
      tgt=$(awk -v w="$w" 'BEGIN { printf "%.2f", 0.6 + 1.9 / w }')
      printf '%-3s %-6s | %8s %7s | %-28s %6s | %7s %7s %7s | %s\n' "$w" "$sh" "$ms" "$rel" "${peaks:--}" "${mx:--}" "${static:--}" "<=$tgt" "${act:--}" "${sha:--}"
    done
  done
  echo "(overlap: sharded with ddp.overlap_gather on; master: overlap with ddp.shard_master on; device: master with ddp.intra_host device, GODDP_IPC_WAIT=${IPC_WAIT:-kernel}; peer: master with ddp.shard_gather device, ddp.shard_reduce host; peerred: peer with ddp.shard_reduce device; auto: master with both auto; step /unsh.: target <= 1.05; static = rank 0's peak - input batch - activations, from --memory-report; GiB)"
  echo "largest micro-batch under $BUDGET per worker, $MAXW workers:"
  for sh in ${MAXROWS//,/ }; do
    b=$(grep -o 'largest_fit_here=[0-9]*' "$OUT/max-$sh.log" 2>/dev/null | head -1 | cut -d= -f2)
    all=$(grep -o 'largest_fit_all_ranks=[0-9]*' "$OUT/max-$sh.log" 2>/dev/null | head -1 | cut -d= -f2)
    echo "  ddp.shard_optimizer $sh: ${b:-failed} (all ranks agree on ${all:--})"
  done
  stamp "end"
  exit 0
fi

# ROWS=device
# The embedding's default backward adds by atomics, so two runs of one path differ in their last
# bits; the rows compare the paths' weights and loss curves, so they run the deterministic one
# (GODDP_EMB_SORTED=1, 0.1-1% slower) unless the caller sets GODDP_EMB_SORTED.
export GODDP_EMB_SORTED=${GODDP_EMB_SORTED-1}
NS=${NS:-2,4}
WIRES=${WIRES:-f16}
WAITS=${WAITS-kernel,stream} # set and empty: no device rows (host and copies only)
paths=(host)
[ "${COPIES:-1}" = 0 ] || paths+=(copies)
[ -z "${AUTO:-}" ] || paths+=(auto)
for w in ${WAITS//,/ }; do
  case $w in kernel) paths+=(device) ;; stream) paths+=(device-stream) ;; *) echo "bench-gpu-ddp-rows.sh: WAITS: $w: want kernel or stream" >&2; exit 2 ;; esac
done
for n in ${NS//,/ }; do
  for w in ${WAITS//,/ }; do
    stamp "all-reduce alone, $n processes: host ring and CUDA IPC (GODDP_IPC_WAIT=$w)"
    x env GODDP_IPC_WAIT="$w" timeout --foreground 150 "$BIN/ddpbench" allreduce --nproc "$n" --wire "$WIRES" --sizes 25M,497903616 --iters "${ITERS:-5}" --warmup 2 \
      --device "$DEVICE" --json > "$OUT/allreduce-$n-$w.jsonl" 2> "$OUT/allreduce-$n-$w.err" || { echo "exit $?"; tail -3 "$OUT/allreduce-$n-$w.err"; }
  done
done
stamp "one worker"
launch one 1 "${DSTEPS:-200}" || echo "exit $?: $(refusal one)"
for n in ${NS//,/ }; do
  steps=${DSTEPS:-200}
  [ "$n" -gt 2 ] && steps=${D4STEPS:-60}
  for path in "${paths[@]}"; do
    wait=kernel
    [ "$path" = device-stream ] && wait=stream
    stamp "$n workers, ddp.intra_host ${path%-stream}, $steps steps (GODDP_IPC_WAIT=$wait)"
    GODDP_IPC_WAIT=$wait launch "ddp-$n-$path" "$n" "$steps" --set ddp.intra_host="${path%-stream}" || echo "exit $?: $(refusal "ddp-$n-$path")"
  done
done
[ -z "${PRINT_ONLY:-}" ] || exit 0
stamp "table"
echo
echo "all-reduce alone (ddpbench allreduce --device $DEVICE, wire $WIRES): median of ${ITERS:-5}"
printf '%-10s %5s %12s %5s %9s %11s %11s\n' transport world bytes wire ms "algbw GB/s" "busbw GB/s"
for f in "$OUT"/allreduce-*.jsonl; do
  [ -e "$f" ] || continue
  w=${f%.jsonl}
  grep '^{' "$f" | WAIT=${w##*-} python3 -c '
import json, os, sys
for l in sys.stdin:
    d = json.loads(l)
    t = d["transport"]
    if t == "cuda-ipc" and os.environ["WAIT"] == "stream":
        t = "cuda-ipc/s"  # GODDP_IPC_WAIT=stream
    elif t != "cuda-ipc" and os.environ["WAIT"] == "stream":
        continue  # the host ring measured once, beside the kernel-paced rows
    print("%-10s %5d %12d %5s %9.2f %11.2f %11.2f" % (t, d["world"], d["bytes"], d["wire"], d["sec"] * 1e3, d["algbw_GBs"], d["busbw_GBs"]))'
done
one=$(m step "$OUT/one.jsonl")
echo
echo "GPT-2 124M, micro-batch $BATCH per worker, workers sharing one GPU ($DEVICE): ddp.intra_host host against copies and device"
echo "one worker: step $one ms"
printf '%-3s %-13s | %8s %9s %7s | %-10s | %s\n' N path "step ms" "target" "/target" "replicas" "loss vs host (max rel, target 1e-3)"
for n in ${NS//,/ }; do
  for path in "${paths[@]}"; do
    f=$OUT/ddp-$n-$path
    if ! grep -q '"event":"summary"' "$f.jsonl" 2>/dev/null; then
      printf '%-3s %-13s | SKIPPED: %s\n' "$n" "$path" "$(refusal "ddp-$n-$path")"
      continue
    fi
    ms=$(m step "$f.jsonl")
    sha=$(m rankrow "$f.jsonl" | grep -o 'sha=[A-Z]*' | cut -d= -f2)
    tgt=$(awk -v o="$one" -v n="$n" 'BEGIN { if (o + 0 > 0) printf "%.1f", 1.10 * n * o; else print "-" }')
    rel=$(awk -v a="$ms" -v b="$tgt" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.3f", a / b; else print "-" }')
    loss="-"
    [ "$path" != host ] && loss=$(m loss "$f.jsonl" "$OUT/ddp-$n-host.jsonl" 5)
    if [ "$path" = copies ] || [ "$path" = auto ]; then # the host ring's bits: the host path's very weights (rank 0's file is NAME.jsonl)
      a=$(m summary "$f.jsonl" param_sha256)
      b=$(m summary "$OUT/ddp-$n-host.jsonl" param_sha256)
      same=DIFFER
      [ "$a" != - ] && [ -n "$a" ] && [ "$a" = "$b" ] && same=SAME
      loss="$loss; param_sha256 against host: $same"
    fi
    printf '%-3s %-13s | %8s %9s %7s | %-10s | %s\n' "$n" "$path" "$ms" "$tgt" "$rel" "${sha:--}" "$loss"
  done
done
stamp "end"
