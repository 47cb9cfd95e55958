#!/usr/bin/env bash
# What a sync costs, measured in one run against memstored on loopback:
# for stores of 2,000 and 10,000 memories, the requests and the daemon's
# CPU time (utime + stime from /proc/PID/stat) per idle sync, from the
# version feed and from full listings (the feed turned off with a 404
# fault, as a server without it); and a drain of 2,000 dirty files (time,
# requests, and how busy memstored was meanwhile: near 100 % of a core
# means the server is the limit).  BASELINE=/path/to/other/memstorefs adds
# that build's idle-sync column (this build vs the last).
#   contrib/bench-sync.sh [SIZES...]      (default: 2000 10000)
# A build without `memstorefs sync` is measured over 30 s of 5 s intervals
# (its numbers are per interval, marked ~).
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
BUILD=${BUILD_DIR:-build}
MSD=$TOP/$BUILD/contrib/memstored/memstored
MFS=$TOP/$BUILD/fs/memstorefs
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(2000 10000)
[ -x "$MSD" ] && [ -x "$MFS" ] || {
  echo "build first: cmake -S . -B $BUILD && cmake --build $BUILD" >&2; exit 1; }
FEED_SYNCS=${FEED_SYNCS:-200}
LIST_SYNCS=${LIST_SYNCS:-10}
DRAIN=${DRAIN:-2000}

W=$(mktemp -d /tmp/mfs-bsync-XXXXXX)
export MEMSTOREFS_RUNTIME_DIR=$W/run ANTHROPIC_API_KEY=bench-key
MSD_PID=""
cleanup() {
  for b in "$MFS" ${BASELINE:-}; do "$b" unmount --all >/dev/null 2>&1 || true; done
  [ -n "$MSD_PID" ] && kill "$MSD_PID" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

TICK=$(getconf CLK_TCK)
# utime + stime of a process in ms (dead threads included).
cpu_ms() { awk -v t="$TICK" '{ sub(/^.*\) /, ""); print int(($12 + $13) * 1000 / t) }' "/proc/$1/stat"; }
now() { date +%s.%N; }
py() { python3 -c "$@"; }
admin() { curl -s -X "$1" -H 'x-admin-key: bench-admin' "$ANTHROPIC_BASE_URL$2" ${3:+-d "$3"}; }
total() { admin GET /admin/stats | py 'import json,sys; print(json.load(sys.stdin)["total"])'; }
daemon_pid() { sed -n 's/^pid=//p' "$W"/run/store-*.lock | head -1; }

# One store per size, seeded before memstored listens.
SEEDS=()
for n in "${SIZES[@]}"; do
  d=$W/seed-$n
  mkdir -p "$d"
  for i in $(seq 0 $((n - 1))); do
    [ $((i % 100)) -eq 0 ] && mkdir -p "$d/d$((i / 100))"
    printf 'memory %d of %d\n' "$i" "$n" >"$d/d$((i / 100))/m$i.md"
  done
  SEEDS+=(--seed "s$n=$d")
done
mkdir -p "$W/seed-drain"
SEEDS+=(--seed "drain=$W/seed-drain")
"$MSD" --listen 127.0.0.1:0 --db "$W/msd.db" --api-key bench-key --admin-key bench-admin \
  "${SEEDS[@]}" >"$W/msd.out" 2>"$W/msd.log" &
MSD_PID=$!
for _ in $(seq 600); do grep -q '^listening' "$W/msd.out" 2>/dev/null && break; sleep 0.1; done
grep -q '^listening' "$W/msd.out" || { echo "memstored did not start" >&2; exit 1; }
export ANTHROPIC_BASE_URL; ANTHROPIC_BASE_URL=$(sed -n 's/^listening url=//p' "$W/msd.out")
store_of() { sed -n "s/^seeded name=$1 id=\\([^ ]*\\).*/\\1/p" "$W/msd.out"; }
# When the seeds were written, by the server's stamps: memstored stamps
# every write a millisecond after the last, so a fast seed of thousands
# of memories is stamped up to seconds past the wall clock.
newest_version_s() { curl -s -H "x-api-key: bench-key" -H 'anthropic-version: 2023-06-01' \
  -H 'anthropic-beta: agent-memory-2026-07-22' \
  "$ANTHROPIC_BASE_URL/v1/memory_stores/$1/memory_versions?limit=1" | py '
import datetime, json, sys
d = json.load(sys.stdin)["data"]
t = d[0]["created_at"] if d else "1970-01-01T00:00:00.000Z"
print(int(datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()) + 1)'; }
SEEDED_AT=$(date +%s)
for n in "${SIZES[@]}"; do
  t=$(newest_version_s "$(store_of "s$n")")
  [ "$t" -gt "$SEEDED_AT" ] && SEEDED_AT=$t
done

# The feed's window reaches 30 s back: seeds younger than that are in it.
wait_seed_age() { local left=$((SEEDED_AT + 32 - $(date +%s))); [ "$left" -le 0 ] || sleep "$left"; }

# Idle means nothing left to do: the background prefetch of the store's
# content (its downloads are not a sync's cost) has finished.  A build
# whose status has no content_missing is not waited for.
wait_prefetched() {
  local i m
  for i in $(seq 1200); do
    m=$("$1" status --json 2>/dev/null | py 'import json,sys; print(json.load(sys.stdin).get("content_missing", 0))' 2>/dev/null || echo 0)
    [ "$m" = 0 ] && return 0
    "$1" sync --all --wait >/dev/null 2>&1 || sleep 0.1
  done
}

# idle MFS STORE SYNCS -> "requests_per_sync cpu_ms_per_sync"
idle() {
  local mfs=$1 store=$2 k=$3 mnt=$W/mnt-$RANDOM cache=$W/cache-$RANDOM pid c0 r0 c1 r1
  "$mfs" mount --store "$store:$mnt" --cache-dir "$cache" --sync-interval 5 >/dev/null 2>&1
  pid=$(daemon_pid)
  wait_seed_age
  if "$mfs" sync --help >/dev/null 2>&1; then
    "$mfs" sync --all --wait >/dev/null 2>&1 || true # the listing the mount left due
    wait_prefetched "$mfs"
    r0=$(total); c0=$(cpu_ms "$pid")
    for _ in $(seq "$k"); do "$mfs" sync --all --wait >/dev/null 2>&1 || true; done
    r1=$(total); c1=$(cpu_ms "$pid")
    py "print(f'{($r1 - $r0) / $k:.1f} {($c1 - $c0) / $k:.2f}')"
  else
    sleep 6
    r0=$(total); c0=$(cpu_ms "$pid"); sleep 30
    r1=$(total); c1=$(cpu_ms "$pid")
    py "print(f'~{($r1 - $r0) / 6:.1f} ~{($c1 - $c0) / 6:.2f}')"
  fi
  "$mfs" unmount --all >/dev/null 2>&1 || true
}

declare -A FEED LIST BASE
for n in "${SIZES[@]}"; do
  st=$(store_of "s$n")
  FEED[$n]=$(idle "$MFS" "$st" "$FEED_SYNCS")
  admin POST /admin/faults '{"action":"status","status":404,"count":0,"method":"GET","path":"/v1/memory_stores/*/memory_versions"}' >/dev/null
  LIST[$n]=$(idle "$MFS" "$st" "$LIST_SYNCS")
  admin DELETE /admin/faults >/dev/null
  if [ -n "${BASELINE:-}" ]; then BASE[$n]=$(idle "$BASELINE" "$st" "$LIST_SYNCS"); fi
done

# Drain: DRAIN new files written at once, then one sync --wait.
drain() {
  local mfs=$1 mnt=$W/mnt-drain-$RANDOM cache=$W/cache-drain-$RANDOM t0 t1 r0 r1 m0 m1
  "$mfs" mount --store "$(store_of drain):$mnt" --cache-dir "$cache" --sync-interval 3600 >/dev/null 2>&1
  for i in $(seq 1 "$DRAIN"); do printf 'dirty %d\n' "$i" >"$mnt/f$i.md"; done
  local pid d0 d1
  pid=$(daemon_pid)
  r0=$(total); m0=$(cpu_ms "$MSD_PID"); d0=$(cpu_ms "$pid"); t0=$(now)
  "$mfs" sync --all --wait >/dev/null 2>&1 || true
  t1=$(now); r1=$(total); m1=$(cpu_ms "$MSD_PID"); d1=$(cpu_ms "$pid")
  py "w = $t1 - $t0; print(f'{w:.2f} {$r1 - $r0} {$DRAIN / w:.0f} {100 * ($m1 - $m0) / 1000 / w:.0f} {100 * ($d1 - $d0) / 1000 / w:.0f}')"
  "$mfs" unmount --all >/dev/null 2>&1 || true
}
read -r D_S D_REQ D_RATE D_MSD D_MFS <<<"$(drain "$MFS")"

printf '%-52s %12s %12s' "idle sync (per sync, per store)" "feed" "listing"
[ -n "${BASELINE:-}" ] && printf ' %12s' "baseline"
printf '\n'
for n in "${SIZES[@]}"; do
  read -r fr fc <<<"${FEED[$n]}"; read -r lr lc <<<"${LIST[$n]}"
  printf '%-52s %12s %12s' "  $n memories: requests" "$fr" "$lr"
  [ -n "${BASELINE:-}" ] && printf ' %12s' "$(cut -d' ' -f1 <<<"${BASE[$n]}")"
  printf '\n%-52s %12s %12s' "  $n memories: daemon CPU (ms)" "$fc" "$lc"
  [ -n "${BASELINE:-}" ] && printf ' %12s' "$(cut -d' ' -f2 <<<"${BASE[$n]}")"
  printf '\n%-52s %12s\n' "  $n memories: CPU listing / feed (x)" \
    "$(py "f, l = $fc, $lc; print(f'{l / f:.0f}' if f > 0 else '>' + str(int(l / 0.01)))")"
done
printf '%-52s %12s\n' "drain of $DRAIN dirty files: time (s)" "$D_S"
printf '%-52s %12s\n' "drain of $DRAIN dirty files: requests" "$D_REQ"
printf '%-52s %12s\n' "drain of $DRAIN dirty files: files/s" "$D_RATE"
printf '%-52s %12s\n' "drain: memstored busy (% of one core)" "$D_MSD"
printf '%-52s %12s\n' "drain: memstorefs busy (% of one core)" "$D_MFS"
