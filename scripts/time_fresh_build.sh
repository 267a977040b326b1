#!/usr/bin/env bash
# Usage: scripts/time_fresh_build.sh [--out FILE] [--keep] [--dry-run]
#
# Times the README's first command (`bash scripts/demo.sh`: set-up check,
# cmake, the whole ninja build, the demo) in a fresh clone of this checkout's
# HEAD, with ccache off so that nothing comes from an earlier build. The clone
# shares this checkout's .venv through a link (torch and the Python packages
# are installed already: apt and pip are not timed; scripts/venv_install.sh
# leaves a linked .venv alone). Prints, and with --out appends to FILE as a
# Markdown section: the commit, the wall time of the whole command and of its
# build (scripts/build.sh's "[build] ok in" line), the CPU time the command and
# its children used, the cores, and the load average before, during (sampled
# every 15 s) and after, since a shared machine's other work stretches the
# wall time and not the CPU time.
# --keep leaves the clone (its path is printed); --dry-run clones, prints what
# it would run and stops.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out="" keep=0 dry=0
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$(realpath -m "$2"); shift 2 ;;
    --keep) keep=1; shift ;;
    --dry-run) dry=1; shift ;;
    *) echo "time_fresh_build.sh: unknown argument $1 (--out FILE, --keep, --dry-run)" >&2; exit 2 ;;
  esac
done
[ -x .venv/bin/python ] || { echo "time_fresh_build.sh: $repo/.venv/bin/python is missing: run scripts/setup.sh once" >&2; exit 1; }

tmp=$(mktemp -d /tmp/lazyjit-fresh-build.XXXXXX)
sampler=""
cleanup() {
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null || true
  if [ "$keep" = 1 ]; then echo "clone kept: $tmp/clone"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
git clone --quiet --no-hardlinks "$repo" "$tmp/clone"
commit=$(git -C "$tmp/clone" rev-parse --short HEAD)
ln -s "$repo/.venv" "$tmp/clone/.venv"
cmd=(bash scripts/demo.sh)
echo "fresh clone of $commit in $tmp/clone; running: CCACHE_DISABLE=1 ${cmd[*]}"
[ "$dry" = 1 ] && exit 0

load() { cut -d' ' -f1-3 /proc/loadavg; }
load_before=$(load)
( while sleep 15; do cut -d' ' -f1 /proc/loadavg; done > "$tmp/load" ) &
sampler=$!
t0=$(date +%s.%N)
start_utc=$(date -u '+%Y-%m-%d %H:%M UTC')
rc=0
# `times` after the command: the CPU time of this shell's children (the command and everything it ran).
( cd "$tmp/clone" && CCACHE_DISABLE=1 "${cmd[@]}" > "$tmp/out.txt" 2>&1; r=$?; times > "$tmp/times"; exit $r ) || rc=$?
t1=$(date +%s.%N)
kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; sampler=""
load_after=$(load)
cat "$tmp/out.txt"
if [ "$rc" -ne 0 ]; then echo "time_fresh_build.sh: the command failed (exit $rc)" >&2; exit "$rc"; fi

mins() { awk -v d="$1" 'BEGIN { printf "%d min %02d s", d / 60, d % 60 }'; }
wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }')
build_line=$(grep -o '\[build\] ok in .*' "$tmp/out.txt" | head -1 || true)
# The children's line of `times`: "XmY.YYYs XmY.YYYs" (user, sys).
cpu=$(tail -1 "$tmp/times" | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.0f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }')
samples=$(tr '\n' ' ' < "$tmp/load" | sed 's/ $//')
during=$(awk '{ s += $1; if ($1 > m) m = $1; n++ } END { if (n) printf "mean %.2f, max %.2f over %d samples", s / n, m, n; else print "no samples" }' "$tmp/load")

report=$(cat <<EOF
## $start_utc, commit $commit

\`CCACHE_DISABLE=1 bash scripts/demo.sh\` in a fresh clone (\`scripts/time_fresh_build.sh\`), $(nproc) cores, nice $(nice):

| what | measured |
|---|---|
| the whole command (set-up check, cmake, build, demo) | $(mins "$wall") wall |
| its build (\`${build_line:-[build] ok in ?}\`) | ${build_line#\[build\] ok in } |
| CPU time of the command and its children (user + sys) | $(mins "$cpu") |
| load average before (1, 5, 15 min) | $load_before |
| load average during (1 min, every 15 s) | $during |
| load average after (1, 5, 15 min) | $load_after |

Load samples: $samples
EOF
)
echo
echo "$report"
if [ -n "$out" ]; then printf '\n%s\n' "$report" >> "$out"; echo "appended to $out"; fi
