#!/usr/bin/env bash
# bench-allreduce.sh — goddp's ring all-reduce against what this machine's loopback can carry
# (iperf3) and against PyTorch's gloo all-reduce of the same FP32 buffers, in one run.
#
#   scripts/bench-allreduce.sh                       # worlds 2 and 4, sizes 1M,16M,64M,256M
#   NPROCS="2" SIZES=64M ITERS=10 scripts/bench-allreduce.sh
#   TRANSPORTS="grpc tcp" CHUNK=1M scripts/bench-allreduce.sh   # ours over each data plane
#   TRANSPORTS="grpc grpc-net tcp tcp-inet" ...   # -net/-inet: as between hosts (TCP, no shared memory)
#   BASELINE=/tmp/ddpbench.old scripts/bench-allreduce.sh        # also an older build, rows "grpc@base"
#
# Needs: iperf3, a python3 with torch (Debian: python3-torch), Go (or a built bin/ddpbench).
# Install on Debian/Ubuntu:  apt-get update && apt-get install -y iperf3 python3-torch libopenblas0-pthread
# Results: a table per tool and the ratios the issue asks for; raw JSON lines in $OUT (default
# a temp dir, printed at the end).
set -euo pipefail

cd "$(dirname "$0")/.."
NPROCS=${NPROCS:-"2 4"}
SIZES=${SIZES:-1M,16M,64M,256M}
ITERS=${ITERS:-10}
IPERF_SECONDS=${IPERF_SECONDS:-5}
TRANSPORTS=${TRANSPORTS:-"grpc tcp"}
CHUNK=${CHUNK:-1M}
BASELINE=${BASELINE:-}                        # another ddpbench binary (e.g. an older commit's) to run too
BASELINE_TRANSPORTS=${BASELINE_TRANSPORTS:-grpc}
PYTHON=${PYTHON:-}
OUT=${OUT:-$(mktemp -d /tmp/bench-allreduce.XXXXXX)}
mkdir -p "$OUT"

missing=0
if ! command -v iperf3 >/dev/null; then
	echo "bench-allreduce: iperf3 not found. Install it: apt-get install -y iperf3" >&2
	missing=1
fi
if [[ -z "$PYTHON" ]]; then
	for p in /usr/bin/python3 python3; do
		if command -v "$p" >/dev/null && "$p" -c 'import torch.distributed' 2>/dev/null; then
			PYTHON=$p
			break
		fi
	done
fi
if [[ -z "$PYTHON" ]]; then
	echo "bench-allreduce: no python3 with torch found. Install Debian's: apt-get install -y python3-torch libopenblas0-pthread (or set PYTHON=...)" >&2
	missing=1
fi
if ! command -v go >/dev/null && [[ ! -x bin/ddpbench ]]; then
	echo "bench-allreduce: need Go to build bin/ddpbench (or a built bin/ddpbench)" >&2
	missing=1
fi
((missing == 0)) || exit 1
if command -v go >/dev/null; then
	go build -o bin/ddpbench ./cmd/ddpbench
fi

echo "== machine: $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. iperf3 over loopback: one stream one way (the limit the issue quotes), and both ways at
#    once (what each ring link sees: every rank sends and receives at the same time).
port=$((20000 + RANDOM % 20000))
iperf3 -s -p "$port" >/dev/null 2>&1 &
iperf_pid=$!
trap 'kill "$iperf_pid" 2>/dev/null || true' EXIT
sleep 0.5
iperf3 -c 127.0.0.1 -p "$port" -t "$IPERF_SECONDS" -J >"$OUT/iperf3.json"
iperf3 -c 127.0.0.1 -p "$port" -t "$IPERF_SECONDS" --bidir -J >"$OUT/iperf3-bidir.json" || true
# A ring of N ranks keeps N links busy at once: what the machine carries over N parallel
# streams (aggregate) bounds N x busbw.
for n in $NPROCS; do
	iperf3 -c 127.0.0.1 -p "$port" -t "$IPERF_SECONDS" -P "$n" -J >"$OUT/iperf3-P$n.json" || true
done
kill "$iperf_pid" 2>/dev/null || true

# 2. gloo all-reduce of FP32 buffers (SUM; the same sizes), median of ITERS after 2 warm-ups.
cat >"$OUT/gloo_bench.py" <<'PY'
import json, os, statistics, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp

def parse(s):
    s = s.strip().upper().rstrip("B")
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * m[s[-1]]) if s[-1] in m else int(s)

def run(rank, world, port, sizes, iters, q):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    for nbytes in sizes:
        x = torch.randn(nbytes // 4)
        times = []
        for i in range(iters + 2):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            if i >= 2:
                times.append(dt.item())
        if rank == 0:
            q.put({"world": world, "bytes": nbytes, "sec": statistics.median(times)})
    dist.destroy_process_group()

if __name__ == "__main__":
    world, port, iters = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[4])
    sizes = [parse(s) for s in sys.argv[3].split(",")]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, world, port, sizes, iters, q)) for r in range(world)]
    for p in procs: p.start()
    for p in procs: p.join()
    while not q.empty():
        r = q.get()
        alg = r["bytes"] / r["sec"] / 1e9
        r.update(algbw_GBs=alg, busbw_GBs=alg * 2 * (world - 1) / world)
        print(json.dumps(r))
PY
: >"$OUT/gloo.jsonl"
: >"$OUT/ddpbench.jsonl"
for n in $NPROCS; do
	echo "== gloo, $n processes"
	"$PYTHON" "$OUT/gloo_bench.py" "$n" $((port + 1)) "$SIZES" "$ITERS" | tee -a "$OUT/gloo.jsonl"
	for tr in $TRANSPORTS; do
		echo "== ddpbench allreduce, $n processes, transport $tr"
		case $tr in
		grpc-net) # the default data plane as between hosts: gRPC over TCP, no Unix socket, no shared memory
			DDP_GRPC_UNIX=0 DDP_SHM_BYTES=0 ./bin/ddpbench allreduce --nproc "$n" --sizes "$SIZES" --wire f32,f16 --iters "$ITERS" --chunk "$CHUNK" --transport grpc --json |
				sed -E 's/"transport": *"grpc"/"transport":"grpc-net"/' | tee -a "$OUT/ddpbench.jsonl" ;;
		*)
			./bin/ddpbench allreduce --nproc "$n" --sizes "$SIZES" --wire f32,f16 --iters "$ITERS" --chunk "$CHUNK" --transport "$tr" --json | tee -a "$OUT/ddpbench.jsonl" ;;
		esac
	done
	if [[ -n "$BASELINE" ]]; then
		for tr in $BASELINE_TRANSPORTS; do
			echo "== baseline $BASELINE, $n processes, transport $tr"
			"$BASELINE" allreduce --nproc "$n" --sizes "$SIZES" --wire f32,f16 --iters "$ITERS" --chunk "$CHUNK" --transport "$tr" --json |
				sed -E 's/"transport": *"([a-z-]+)"/"transport":"\1@base"/' | tee -a "$OUT/ddpbench.jsonl"
		done
	fi
done

# 3. The comparison.
"${PYTHON}" - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
def load(name): return [json.loads(l) for l in open(os.path.join(out, name)) if l.strip()]
ip = json.load(open(os.path.join(out, "iperf3.json")))
one_way = ip["end"]["sum_received"]["bits_per_second"] / 8e9
bidir = None
try:
    b = json.load(open(os.path.join(out, "iperf3-bidir.json")))
    bidir = b["end"]["sum_received"]["bits_per_second"] / 8e9  # each direction
except Exception:
    pass
gloo = {(r["world"], r["bytes"]): r for r in load("gloo.jsonl")}
ours = {(r.get("transport", "grpc"), r["world"], r["bytes"], r["wire"]): r for r in load("ddpbench.jsonl")}
par = {}
for name in os.listdir(out):
    if name.startswith("iperf3-P") and name.endswith(".json"):
        try:
            par[int(name[8:-5])] = json.load(open(os.path.join(out, name)))["end"]["sum_received"]["bits_per_second"] / 8e9
        except Exception:
            pass
print()
print(f"iperf3 loopback: {one_way:.2f} GB/s one way" + (f", {bidir:.2f} GB/s each way with both directions busy" if bidir else ""))
for n, agg in sorted(par.items()):
    print(f"iperf3 loopback, {n} parallel streams: {agg:.2f} GB/s in all, {agg/n:.2f} GB/s per stream (a ring of {n} bounds busbw by this)")
transports = sorted({k[0] for k in ours}, key=lambda t: (t.split("@")[0] != "grpc", t))
print(f"{'transport':>10} {'world':>5} {'bytes':>10} {'gloo f32 ms':>12} {'ours f32 ms':>12} {'ours f16 ms':>12} {'f16/gloo':>9} {'f16 wire busbw':>15} {'/iperf3':>8} {'/bidir':>7} {'/P-n':>6}")
for tr in transports:
    for (w, n), g in sorted(gloo.items()):
        f32 = ours.get((tr, w, n, "f32")); f16 = ours.get((tr, w, n, "f16"))
        fmt = lambda r: f"{r['sec']*1e3:12.2f}" if r else f"{'-':>12}"
        ratio = f"{f16['sec']/g['sec']:9.2f}" if f16 else f"{'-':>9}"
        wb = f"{f16['wire_busbw_GBs']:15.3f}" if f16 else f"{'-':>15}"
        r1 = f"{f16['wire_busbw_GBs']/one_way:8.0%}" if f16 else f"{'-':>8}"
        r2 = f"{f16['wire_busbw_GBs']/bidir:7.0%}" if f16 and bidir else f"{'-':>7}"
        r3 = f"{f16['wire_busbw_GBs']/(par[w]/w):6.0%}" if f16 and par.get(w) else f"{'-':>6}"
        print(f"{tr:>10} {w:>5} {n:>10} {g['sec']*1e3:12.2f} {fmt(f32)} {fmt(f16)} {ratio} {wb} {r1} {r2} {r3}")
print(f"\ntargets: f16/gloo <= 0.50 at 64 MiB (2 and 4 processes); f16 wire busbw >= 85% of iperf3")
print(f"raw results: {out}")
PY
