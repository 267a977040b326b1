# Sourced by the set-up scripts: one line per step on the terminal, the tools'
# own output (apt, pip, cmake, ninja) in one log file, named once at the start.
# The outermost script starts the log; the scripts it runs append to it.
if [ -z "${LAZYJIT_SETUP_LOG:-}" ]; then
  mkdir -p build
  export LAZYJIT_SETUP_LOG="$PWD/build/setup.log"
  : > "$LAZYJIT_SETUP_LOG"
  echo "[setup] log of the tools' output: ${LAZYJIT_SETUP_LOG#"$PWD"/}"
fi

_lazyjit_now() { date +%s.%N; }
# Seconds since $1, as "0.4 s", "12 s" or "3 min 05 s".
_lazyjit_since() {
  awk -v a="$1" -v b="$(_lazyjit_now)" 'BEGIN { d = b - a;
    if (d < 10) printf "%.1f s", d; else if (d < 60) printf "%d s", d;
    else printf "%d min %02d s", d / 60, d % 60 }'
}

# step TAG WHAT CMD...: prints "[TAG] WHAT ... done in T", running CMD with its
# output appended to the log. On failure: the log's last lines, then exit.
# (CMD runs in a `||` list, where `set -e` does not apply: a function given as
# CMD chains its commands with &&.)
step() {
  local tag=$1 what=$2; shift 2
  local t0 rc=0
  t0=$(_lazyjit_now)
  printf '[%s] %s ... ' "$tag" "$what"
  printf '\n==== [%s] %s: %s\n' "$tag" "$what" "$*" >> "$LAZYJIT_SETUP_LOG"
  "$@" >> "$LAZYJIT_SETUP_LOG" 2>&1 < /dev/null || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "FAILED (exit $rc, after $(_lazyjit_since "$t0"))"
    echo "---- the last 40 lines of $LAZYJIT_SETUP_LOG ----"
    tail -n 40 "$LAZYJIT_SETUP_LOG"
    echo "---- (the whole log: $LAZYJIT_SETUP_LOG)"
    exit "$rc"
  fi
  echo "done in $(_lazyjit_since "$t0")"
}
