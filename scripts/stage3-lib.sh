# stage3-lib.sh — sourced by the GPU stage-3 scripts (gpu-stage3.sh, bench-gpu-vs-pytorch.sh,
# bench-gpu-ddp.sh): PRINT_ONLY=1 prints each command instead of running it (a dry run that needs
# no GPU, no build and no Python packages), and the metrics helper.
# shellcheck shell=bash

# x CMD ARGS...: run CMD, or with PRINT_ONLY=1 print it (shell-quoted, after "+ ") on the script's
# own stdout (fd 3), also where the caller redirects the command's output into a log.
exec 3>&1
x() {
  if [ -n "${PRINT_ONLY:-}" ]; then
    { printf '+'; printf ' %q' "$@"; printf '\n'; } >&3
  else
    "$@"
  fi
}

# m ARGS...: scripts/stage3_metrics.py (median step, summary fields, ranks, loss curves, the
# memory report); prints "-" and returns 0 where it fails, after its error on stderr, so one
# missing run leaves a gap in the table rather than ending the script.
m() {
  python3 "$(dirname "${BASH_SOURCE[0]}")/stage3_metrics.py" "$@" || echo "-"
}
