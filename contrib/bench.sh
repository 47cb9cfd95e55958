#!/usr/bin/env bash
# Benchmarks of memstorefs, as ratios measured in one run (never timed
# assertions): each workload runs on a memstorefs mount and on a tmpfs
# directory on the same machine at the same time, and the ratio is what is
# reported.  Also: mount time as the store grows, one sync with nothing
# changed and with k dirty files (requests counted at memstored), and the
# daemon's memory, and the cache's size on disk after each workload (one
# 100 KiB file rewritten 10,000 times among them) beside the live content.
# BASELINE=/path/to/other/memstorefs adds a column with
# that build's ratios (this build vs the last).
#   contrib/bench.sh [FILES]      (default 500 files of ~1 KiB)
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
BUILD=${BUILD_DIR:-build}
MSD=$TOP/$BUILD/contrib/memstored/memstored
N=${1:-500}
[ -x "$MSD" ] && [ -x "$TOP/$BUILD/fs/memstorefs" ] || {
  echo "build first: cmake -S . -B $BUILD && cmake --build $BUILD" >&2; exit 1; }

W=$(mktemp -d /tmp/mfs-bench-XXXXXX)
TMPFS=$(mktemp -d /dev/shm/mfs-bench-XXXXXX)
export MEMSTOREFS_RUNTIME_DIR=$W/run ANTHROPIC_API_KEY=bench-key
MSD_PID=""
cleanup() {
  for b in "$TOP/$BUILD/fs/memstorefs" ${BASELINE:-}; do "$b" unmount --all >/dev/null 2>&1 || true; done
  [ -n "$MSD_PID" ] && kill "$MSD_PID" 2>/dev/null || true
  rm -rf "$W" "$TMPFS"
}
trap cleanup EXIT

now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$2"; }
ratio() { python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print(f'{a / b:.2f}' if b > 0 else 'n/a')" "$1" "$2"; }
timed() { local t0; t0=$(now); "$@" >/dev/null 2>&1; secs "$t0" "$(now)"; }

# The store: N files in 10 directories.
mkdir -p "$W/seed"
for i in $(seq 0 $((N - 1))); do
  d="$W/seed/d$((i % 10))"; mkdir -p "$d"
  head -c 1024 /dev/zero | tr '\0' "$(printf "\\$(printf '%03o' $((97 + i % 26)))")" >"$d/m$i.md"
done
cp -r "$W/seed/." "$TMPFS/"
"$MSD" --listen 127.0.0.1:0 --db "$W/msd.db" --api-key bench-key --admin-key bench-admin \
  --seed "bench=$W/seed" >"$W/msd.out" 2>"$W/msd.log" &
MSD_PID=$!
for _ in $(seq 200); do grep -q '^listening' "$W/msd.out" 2>/dev/null && break; sleep 0.1; done
export ANTHROPIC_BASE_URL; ANTHROPIC_BASE_URL=$(sed -n 's/^listening url=//p' "$W/msd.out")
STORE=$(sed -n 's/^seeded name=bench id=\([^ ]*\).*/\1/p' "$W/msd.out")
admin() { curl -s -X "$1" -H 'x-admin-key: bench-admin' "$ANTHROPIC_BASE_URL$2"; }
downloads() { admin GET /admin/stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["routes"].get("GET /v1/memory_stores/{id}/memories/{id}", 0))'; }

read_all() { for _ in 1 2 3 4 5; do cat "$1"/d*/*.md >/dev/null; done; }
# The cache's size on disk (cache.db and its WAL, which the daemon's
# collector truncates every sync interval, at least once a minute), and the
# live content of a mount (the sum of its files' sizes), in KiB.
cache_kb() { local n=0 f; for f in "$1"/cache.db "$1"/cache.db-wal; do
  [ -f "$f" ] && n=$((n + $(stat -c %s "$f"))); done; echo $((n / 1024)); }
live_kb() { find "$1" -type f -printf '%s\n' | awk '{n += $1} END {print int(n / 1024)}'; }
# One 100 KiB file rewritten 10,000 times, each time with other content.
rewrite_big() { python3 - "$1/big.md" <<'PY'
import sys
body = b"x" * (100 * 1024 - 8)
for i in range(10000):
    with open(sys.argv[1], "wb") as f:
        f.write(b"%07d\n" % i + body)
PY
}
write_small() { for i in $(seq 1 200); do printf 'note %d\n' "$i" >"$1/w$i.md"; done; }
grep_all() { grep -r -l zzz "$1" || true; }

bench_one() { # $1 = memstorefs binary; prints ratios
  local mfs=$1 mnt=$W/mnt-$RANDOM cache=$W/cache-$RANDOM t0 t1
  t0=$(now)
  "$mfs" mount --store "$STORE:$mnt" --cache-dir "$cache" --sync-interval 3600 >/dev/null 2>&1
  t1=$(now)
  MOUNT_S=$(secs "$t0" "$t1")
  cat "$mnt"/d*/*.md >/dev/null # first reads: fetch what the prefetch has not
  CACHE_MOUNT=$(cache_kb "$cache")
  READ_R=$(ratio "$(timed read_all "$mnt")" "$(timed read_all "$TMPFS")")
  GREP_R=$(ratio "$(timed grep_all "$mnt")" "$(timed grep_all "$TMPFS")")
  CACHE_READ=$(cache_kb "$cache")
  WRITE_R=$(ratio "$(timed write_small "$mnt")" "$(timed write_small "$TMPFS")")
  CACHE_WRITE=$(cache_kb "$cache")
  rewrite_big "$mnt"
  CACHE_REWRITE=$(cache_kb "$cache")
  WAL_REWRITE=$(( $(stat -c %s "$cache/cache.db-wal" 2>/dev/null || echo 0) / 1024 ))
  LIVE=$(live_kb "$mnt")
  RSS_KB=$(ps -o rss= -p "$(sed -n 's/^pid=//p' "$W"/run/store-*.lock | head -1)" | tr -d ' ')
  "$mfs" unmount --all >/dev/null 2>&1
  rm -f "$TMPFS"/w*.md
  # Mount again on the same cache: nothing is downloaded again.
  admin POST /admin/stats/reset >/dev/null
  t0=$(now)
  "$mfs" mount --store "$STORE:$mnt" --cache-dir "$cache" --sync-interval 3600 >/dev/null 2>&1
  REMOUNT_S=$(secs "$t0" "$(now)")
  sleep 1
  REMOUNT_REQ=$(downloads)
  "$mfs" unmount --all >/dev/null 2>&1
}

bench_one "$TOP/$BUILD/fs/memstorefs"
printf '%-44s %10s\n' "memstorefs benchmark ($N files of 1 KiB)" "this build"
printf '%-44s %10s\n' "warm reads, mount / tmpfs (x slower)" "$READ_R"
printf '%-44s %10s\n' "grep -r, mount / tmpfs" "$GREP_R"
printf '%-44s %10s\n' "200 small writes, mount / tmpfs" "$WRITE_R"
printf '%-44s %10s\n' "mount time, cold cache (s)" "$MOUNT_S"
printf '%-44s %10s\n' "mount time, warm cache (s)" "$REMOUNT_S"
printf '%-44s %10s\n' "content downloads of a warm mount" "$REMOUNT_REQ"
printf '%-44s %10s\n' "daemon RSS after the workloads (KiB)" "$RSS_KB"
printf '%-44s %10s\n' "cache on disk after mount + reads (KiB)" "$CACHE_MOUNT"
printf '%-44s %10s\n' "cache on disk after warm reads, grep (KiB)" "$CACHE_READ"
printf '%-44s %10s\n' "cache on disk after 200 small writes (KiB)" "$CACHE_WRITE"
printf '%-44s %10s\n' "cache on disk after 100 KiB x 10,000 (KiB)" "$CACHE_REWRITE"
printf '%-44s %10s\n' "  of which the write-ahead log (KiB)" "$WAL_REWRITE"
printf '%-44s %10s\n' "live content of the mount then (KiB)" "$LIVE"
if [ -n "${BASELINE:-}" ]; then
  B=("$READ_R" "$GREP_R" "$WRITE_R" "$MOUNT_S" "$REMOUNT_S" "$CACHE_REWRITE")
  bench_one "$BASELINE"
  printf '\n%-44s %10s %10s\n' "this build vs BASELINE" "this" "baseline"
  printf '%-44s %10s %10s\n' "warm reads ratio" "${B[0]}" "$READ_R"
  printf '%-44s %10s %10s\n' "grep -r ratio" "${B[1]}" "$GREP_R"
  printf '%-44s %10s %10s\n' "small writes ratio" "${B[2]}" "$WRITE_R"
  printf '%-44s %10s %10s\n' "mount time, cold (s)" "${B[3]}" "$MOUNT_S"
  printf '%-44s %10s %10s\n' "mount time, warm (s)" "${B[4]}" "$REMOUNT_S"
  printf '%-44s %10s %10s\n' "cache after 100 KiB x 10,000 (KiB)" "${B[5]}" "$CACHE_REWRITE"
fi
