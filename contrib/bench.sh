#!/usr/bin/env bash
# Benchmarks of memstorefs, as figures and ratios measured in one run (never
# timed assertions): each file workload runs on a memstorefs mount, on a
# tmpfs directory and on libfuse's passthrough_ll example over tmpfs (the
# reference FUSE file system, built here from libfuse3-dev's examples), all
# mounted side by side; each figure is the median of ROUNDS rounds (3
# unless the environment says otherwise: an odd number), and a round
# runs the workload once on every target in turn (the order rotated each
# round), so a change in the machine's load during the run weighs on every
# target alike rather than on whichever ran at that moment.  Each memstorefs
# build mounts a store of its own, seeded alike.
#   - create 1,000 files of 4 KiB (open, write, close): files/s and ratios;
#   - overwrite those 1,000 files; sed -i on 200 files of the store, and
#     sed -i's system calls on 200 others in one process (mfs_fsops save:
#     the file system's part, without starting a process a file);
#   - open/read/close of every file of the store, warm; ls -lR, warm; cat
#     of every file, warm;
#   - a cold mount with 50 ms of latency on every request: the time until
#     every file's content is local, and the requests it took; beside it
#     the official worker's download with the same latency (the store
#     listed with view=full, 20 a page, page after page, into files), all
#     on the store as seeded, before any workload adds to it;
#   - mount times, the downloads of a warm remount, the daemon's memory;
#   - the cache's size on disk after the workloads and after one 100 KiB
#     file rewritten 10,000 times, beside the live content.
# BASELINE=/path/to/other/memstorefs runs the memstorefs rows again with
# that build (this build vs the last).  Then what a sync costs
# (contrib/bench-sync.sh); SYNC=0 leaves that part out.
#   contrib/bench.sh [FILES]      (default 2000 documents, mean 9 KiB; the
#                                 sed -i rows want at least 400)
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
BUILD=${BUILD_DIR:-build}
MSD=$TOP/$BUILD/contrib/memstored/memstored
MFS=$TOP/$BUILD/fs/memstorefs
FSOPS=$TOP/$BUILD/contrib/mfs_fsops
N=${1:-2000}
ROUNDS=${ROUNDS:-3}
[[ $N =~ ^[1-9][0-9]*$ ]] && [ "$N" -le 100000 ] || {
  echo "bench: FILES must be a number of documents from 1 to 100000, got '$N'" >&2; exit 2; }
[[ $ROUNDS =~ ^[1-9][0-9]?$ ]] && [ $((ROUNDS % 2)) -eq 1 ] || {
  echo "bench: ROUNDS must be an odd number from 1 to 99 (the median of the rounds), got '$ROUNDS'" >&2; exit 2; }
[ -x "$MSD" ] && [ -x "$MFS" ] && [ -x "$FSOPS" ] || {
  echo "build first: cmake -S . -B $BUILD && cmake --build $BUILD" >&2; exit 1; }
PT_SRC=/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c
wake_here() { cat /sys/module/fuse/parameters/wake_here 2>/dev/null || echo "not offered"; }
# A virtual machine's idle processors: how long an idle one polls before it
# halts (haltpoll's window, 0: it halts at once) sets what waking a sleeping
# caller costs (docs/operations.md, "The kernel's wake-ups").
idle_cpus() {
  local drv ns
  drv=$(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null) || drv="none"
  if [ "$drv" = haltpoll ] && ns=$(cat /sys/module/haltpoll/parameters/guest_halt_poll_ns 2>/dev/null); then
    echo "haltpoll, guest_halt_poll_ns $ns"
  else
    echo "$drv"
  fi
}
# setting_span AT END: a setting read at the start and at the end of the run.
setting_span() { [ "$1" = "$2" ] && echo "$1" || echo "$1 at the start, $2 at the end"; }
WAKE_AT=$(wake_here)
IDLE_AT=$(idle_cpus)

W=$(mktemp -d /tmp/mfs-bench-XXXXXX)
chmod 700 "$W"
TMPFS=$(mktemp -d /dev/shm/mfs-bench-XXXXXX)
PT_SRCDIR=$(mktemp -d /dev/shm/mfs-bench-pt-XXXXXX)
PT_MNT=$W/pt
export MEMSTOREFS_RUNTIME_DIR=$W/run ANTHROPIC_API_KEY=bench-key
mkdir -p "$W/run" && chmod 700 "$W/run"
MSD_PID="" PT_PID=""
# Each memstorefs mount has its runtime directory (by tag: mfs, base, nx;
# "run" for the cold mounts), so that each can be told apart and stopped.
in_rt() { local t=$1; shift; mkdir -p "$W/run-$t" && chmod 700 "$W/run-$t"
  MEMSTOREFS_RUNTIME_DIR=$W/run-$t "$@"; }
cleanup() {
  local b d
  for b in "$MFS" ${BASELINE:-}; do for d in "$W"/run "$W"/run-*; do
    [ -d "$d" ] && MEMSTOREFS_RUNTIME_DIR=$d "$b" unmount --all >/dev/null 2>&1 || true
  done; done
  if [ -n "$PT_PID" ]; then fusermount3 -u "$PT_MNT" 2>/dev/null || true; kill "$PT_PID" 2>/dev/null || true; fi
  [ -n "$MSD_PID" ] && kill "$MSD_PID" 2>/dev/null || true
  rm -rf "$W" "$TMPFS" "$PT_SRCDIR"
}
trap cleanup EXIT

now() { date +%s.%N; }
py() { python3 -c "$@"; }
secs() { py "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.4f}')" "$1" "$2"; }
median() { printf '%s\n' "$@" | sort -g | sed -n "$(( ($# + 1) / 2 ))p"; }
ratio() { py "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print(f'{a / b:.2f}' if b > 0 else 'n/a')" "$1" "$2"; }
timed() { local t0; t0=$(now); "$@" >/dev/null 2>&1; secs "$t0" "$(now)"; }
fsecs() { "$FSOPS" "$@" | sed -n 's/^secs=\([^ ]*\).*/\1/p'; }

# The store: N documents in N/100 directories, 1 to 17 KiB (mean 9 KiB).
mkdir -p "$W/seed"
py "
import os, random
random.seed(7)
for i in range($N):
    d = os.path.join('$W/seed', 'd%d' % (i // 100))
    os.makedirs(d, exist_ok=True)
    size = random.randint(1024, 17 * 1024)
    line = ('memory %d: ' % i) + 'lorem ipsum dolor sit amet ' * 4 + '\n'
    with open(os.path.join(d, 'm%d.md' % i), 'w') as f:
        f.write((line * (size // len(line) + 1))[:size - 1] + '\n')
"
cp -r "$W/seed/." "$TMPFS/"
cp -r "$W/seed/." "$PT_SRCDIR/"
"$MSD" --listen 127.0.0.1:0 --db "$W/msd.db" --api-key bench-key --admin-key bench-admin \
  --seed "bench=$W/seed" --seed "bench-base=$W/seed" --seed "bench-nx=$W/seed" \
  >"$W/msd.out" 2>"$W/msd.log" &
MSD_PID=$!
for _ in $(seq 600); do grep -q '^listening' "$W/msd.out" 2>/dev/null && break; sleep 0.1; done
export ANTHROPIC_BASE_URL; ANTHROPIC_BASE_URL=$(sed -n 's/^listening url=//p' "$W/msd.out")
store_id() { sed -n "s/^seeded name=$1 id=\\([^ ]*\\).*/\\1/p" "$W/msd.out"; }
STORE=$(store_id bench)
# The store each memstorefs mount of the workloads uses (by tag).
declare -A STORE_OF=([mfs]=$STORE [base]=$(store_id bench-base) [nx]=$(store_id bench-nx))
admin() { curl -s -X "$1" -H 'x-admin-key: bench-admin' "$ANTHROPIC_BASE_URL$2" ${3:+-d "$3"}; }
total() { admin GET /admin/stats | py 'import json,sys; print(json.load(sys.stdin)["total"])'; }
downloads() { admin GET /admin/stats | py 'import json,sys; r = json.load(sys.stdin)["routes"]; print(r.get("GET /v1/memory_stores/{id}/memories/{id}", 0))'; }

# The reference FUSE file system.
PT=""
if [ -f "$PT_SRC" ] && cc -O2 -o "$W/passthrough_ll" "$PT_SRC" $(pkg-config fuse3 --cflags --libs) 2>"$W/pt-cc.log"; then
  mkdir -p "$PT_MNT"
  "$W/passthrough_ll" -f -o source="$PT_SRCDIR" "$PT_MNT" 2>"$W/pt.log" &
  PT_PID=$!
  for _ in $(seq 100); do mountpoint -q "$PT_MNT" && break; sleep 0.1; done
  mountpoint -q "$PT_MNT" && PT=$PT_MNT
fi
[ -n "$PT" ] || echo "(passthrough_ll not available: $PT_SRC missing or not built; its column is n/a)" >&2

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

# The workloads on one directory D; each sets a global (seconds).
list_files() { find "$1" -name 'm*.md' -type f | sort >"$W/list-$2"; }
w_create() { rm -f "$1"/w/c*.md; mkdir -p "$1/w"; fsecs create "$1/w" 1000 4096; }
w_overwrite() { fsecs overwrite "$1/w" 1000 4096; }
w_sed() { local t0; t0=$(now); for f in $(head -200 "$W/list-$2"); do sed -i 's/lorem/LOREM/' "$f"; done; secs "$t0" "$(now)"; }
w_save() { sed -n 201,400p "$W/list-$2" >"$W/save-$2"; fsecs save "$W/save-$2"; }
# (Five passes, the median one: a pass takes some 50 ms, and runs of one
# build side by side, BASELINE the same binary, differed by a quarter on
# a single pass.)
w_read() { fsecs read "$W/list-$2" 5; }
w_ls() { timed ls -lR "$1"; }
w_cat() { local t0; t0=$(now); xargs -a "$W/list-$2" cat >/dev/null; secs "$t0" "$(now)"; }
# Before each timed run of a warm workload (w_read, w_ls, w_cat), its
# target is warmed again, untimed: a kernel may page out file pages nobody
# touched for a while (this machine's DAMON reclaim, kdamond, takes page
# cache unused for about a minute), and a tree read minutes earlier is
# then partly cold again.  tmpfs's pages never are; a FUSE file's are
# read again (a READ), after which the kernel also asks its attributes
# again at the next stat (a READ marks the access time stale).  The stat
# here asks that too, so the timed run finds pages and attributes cached.
warm_files() { xargs -a "$W/list-$2" cat >/dev/null; xargs -a "$W/list-$2" stat >/dev/null; }
warm_read() { warm_files "$@"; }
warm_cat() { warm_files "$@"; }
warm_ls() { ls -lR "$1" >/dev/null; }
# The cost of one request (microseconds): getxattr of a security.* name,
# which a mount answers at once without its cache; on tmpfs, the call.
w_rt() { "$FSOPS" rt "$(head -1 "$W/list-$2")" 20000 | sed -n 's/^us_each=//p'; }

# interleave NAME TAG...: ROUNDS rounds; each runs w_NAME once on every
# target in turn, starting one target later than the round before (and
# warm_NAME, when there is one, just before each run); the median of each
# target's runs into R_NAME[TAG].
declare -A DIR_OF
interleave() {
  local name=$1 r i t; shift
  local -a tags=("$@")
  local -A got=()
  for ((r = 0; r < ROUNDS; r++)); do
    for i in "${!tags[@]}"; do
      t=${tags[$(( (i + r) % ${#tags[@]} ))]}
      if declare -F "warm_$name" >/dev/null; then "warm_$name" "${DIR_OF[$t]}" "$t"; fi
      got[$t]+="$("w_$name" "${DIR_OF[$t]}" "$t") "
    done
  done
  local -n out=R_$name
  for t in "${tags[@]}"; do
    # shellcheck disable=SC2086 # ROUNDS numbers
    out[$t]=$(median ${got[$t]})
  done
}

# All the file workloads, interleaved on the targets TAG... (directories
# in DIR_OF); results in R_<name>[TAG].  The --no-xattrs mount (nx) runs
# only the rows its switch changes.
declare -A R_create R_overwrite R_sed R_save R_read R_ls R_cat R_rt
workloads() { # TAG...
  local t
  local -a all=("$@") most=() rt=()
  for t in "${all[@]}"; do
    list_files "${DIR_OF[$t]}" "$t"
    w_read "${DIR_OF[$t]}" "$t" >/dev/null # warm: content local, kernel caches filled
    w_ls "${DIR_OF[$t]}" "$t" >/dev/null
    [ "$t" = nx ] || most+=("$t")
    # passthrough_ll keeps no attributes: its kernel answers getxattr itself.
    [ "$t" = nx ] || [ "$t" = pt ] || rt+=("$t")
  done
  interleave create "${all[@]}"
  interleave overwrite "${all[@]}"
  interleave sed "${most[@]}"
  interleave save "${most[@]}"
  interleave read "${most[@]}"
  interleave ls "${all[@]}"
  interleave cat "${most[@]}"
  interleave rt "${rt[@]}"
  for t in "${all[@]}"; do rm -rf "${DIR_OF[$t]:?}/w"; done
}

# Cold mount with 50 ms on every request: until every file's content is
# local (status: content cached = total); the requests it took.
cold_latency() { # MFS
  local mfs=$1 mnt=$W/mnt-lat-$RANDOM cache=$W/cache-lat-$RANDOM t0 t1 r0
  admin POST /admin/faults '{"action":"latency","latency_ms":50,"count":0}' >/dev/null
  r0=$(total); t0=$(now)
  "$mfs" mount --store "$STORE:$mnt" --cache-dir "$cache" --sync-interval 3600 >"$W/mount-lat.log" 2>&1 || {
    admin DELETE /admin/faults >/dev/null
    echo "bench: cannot mount the store with $mfs:" >&2; cat "$W/mount-lat.log" >&2; return 1; }
  # A light poll (no interpreter started each time: it would take the
  # CPU the daemon and memstored are measured with).
  for _ in $(seq 1200); do
    "$mfs" status --json 2>/dev/null | grep -q '"content_missing":0,' && break
    sleep 0.02
  done
  t1=$(now)
  LAT_S=$(secs "$t0" "$t1"); LAT_REQ=$(( $(total) - r0 ))
  admin DELETE /admin/faults >/dev/null
  "$mfs" unmount --all >/dev/null 2>&1 || true
}

# The official worker's download, for reference, with the same 50 ms: the
# whole store listed with view=full, 20 memories a page, one page after
# the other on one kept-alive connection, each memory written to a file
# (docs: the SDK's session-start download).
worker_latency() {
  admin POST /admin/faults '{"action":"latency","latency_ms":50,"count":0}' >/dev/null
  local out
  out=$(py '
import http.client, json, os, sys, time, urllib.parse
base, store, dest = sys.argv[1], sys.argv[2], sys.argv[3]
u = urllib.parse.urlsplit(base)
conn = http.client.HTTPConnection(u.hostname, u.port)
hdr = {"x-api-key": "bench-key", "anthropic-beta": "agent-memory-2026-07-22"}
t0 = time.monotonic(); n = 0; cur = None
while n < 100000:
    q = {"view": "full", "limit": "20"}
    if cur:
        q["page"] = cur
    conn.request("GET", "/v1/memory_stores/%s/memories?%s" % (store, urllib.parse.urlencode(q)), headers=hdr)
    r = conn.getresponse(); body = r.read(); n += 1
    if r.status != 200:
        break
    page = json.loads(body)
    for m in page["data"]:
        if m.get("type") == "memory" and m.get("content") is not None:
            f = os.path.join(dest, m["path"].lstrip("/"))
            os.makedirs(os.path.dirname(f), exist_ok=True)
            with open(f, "w") as fh:
                fh.write(m["content"])
    cur = page.get("next_page")
    if not cur:
        break
print("%.4f %d" % (time.monotonic() - t0, n))
' "$ANTHROPIC_BASE_URL" "$STORE" "$W/worker" || echo "n/a 0")
  WORKER_S=${out% *}; WORKER_REQ=${out#* }
  admin DELETE /admin/faults >/dev/null
}

declare -A MOUNT_S REMOUNT_S REMOUNT_REQ RSS_KB LAT LATREQ CACHE_WORK CACHE_REWRITE WAL_REWRITE LIVE
# mount_tag MFS TAG [OPTION...]: mounts the tag's store at $W/mnt-TAG on
# the cache $W/cache-TAG.
mount_tag() {
  local mfs=$1 t=$2; shift 2
  in_rt "$t" "$mfs" mount --store "${STORE_OF[$t]}:$W/mnt-$t" --cache-dir "$W/cache-$t" \
    --sync-interval 3600 "$@"
}
# mount_mfs MFS TAG [OPTION...]: a cold mount of the tag's store, timed;
# non-zero, with the mount's own message, when it fails.
mount_mfs() {
  local mfs=$1 t=$2 t0; shift 2
  t0=$(now)
  mount_tag "$mfs" "$t" "$@" >"$W/mount-$t.log" 2>&1 || {
    echo "bench: cannot mount the store with $mfs ($t):" >&2; cat "$W/mount-$t.log" >&2; return 1; }
  DIR_OF[$t]=$W/mnt-$t
  MOUNT_S[$t]=$(secs "$t0" "$(now)")
}
# after_mfs MFS TAG: after the workloads, the cache's size, the daemon's
# memory, and a remount on the same cache.
after_mfs() {
  local mfs=$1 t=$2 mnt=${DIR_OF[$2]} cache=$W/cache-$2 t0
  CACHE_WORK[$t]=$(cache_kb "$cache")
  rewrite_big "$mnt"
  CACHE_REWRITE[$t]=$(cache_kb "$cache")
  WAL_REWRITE[$t]=$(( $(stat -c %s "$cache/cache.db-wal" 2>/dev/null || echo 0) / 1024 ))
  LIVE[$t]=$(live_kb "$mnt")
  RSS_KB[$t]=$(ps -o rss= -p "$(sed -n 's/^pid=//p' "$W/run-$t"/store-*.lock | head -1)" | tr -d ' ')
  in_rt "$t" "$mfs" unmount --all >/dev/null 2>&1 || true
  # Mount again on the same cache: nothing is downloaded again.
  admin POST /admin/stats/reset >/dev/null
  t0=$(now)
  mount_tag "$mfs" "$t" >/dev/null 2>&1
  REMOUNT_S[$t]=$(secs "$t0" "$(now)")
  sleep 1
  REMOUNT_REQ[$t]=$(downloads)
  in_rt "$t" "$mfs" unmount --all >/dev/null 2>&1 || true
}

# The cold mounts under latency, each build's and the official worker's,
# on the store as seeded, before the workloads add to it.
worker_latency
cold_latency "$MFS" || exit 1
LAT[mfs]=$LAT_S; LATREQ[mfs]=$LAT_REQ
if [ -n "${BASELINE:-}" ]; then
  cold_latency "$BASELINE" || exit 1
  LAT[base]=$LAT_S; LATREQ[base]=$LAT_REQ
fi
# Every target mounted side by side, then the workloads interleaved on them.
# The rows the user.memstore.* attributes cost most run again with
# --no-xattrs (the kernel then stops asking the daemon for attributes).
DIR_OF[tmpfs]=$TMPFS
TAGS=(tmpfs)
[ -n "$PT" ] && { DIR_OF[pt]=$PT; TAGS+=(pt); }
mount_mfs "$MFS" mfs || exit 1
mount_mfs "$MFS" nx --no-xattrs || echo "bench: the --no-xattrs rows are left out" >&2
if [ -n "${BASELINE:-}" ]; then mount_mfs "$BASELINE" base || exit 1; fi
for t in mfs nx base; do [ -n "${DIR_OF[$t]:-}" ] && TAGS+=("$t"); done
workloads "${TAGS[@]}"
in_rt nx "$MFS" unmount --all >/dev/null 2>&1 || true
after_mfs "$MFS" mfs
[ -n "${BASELINE:-}" ] && after_mfs "$BASELINE" base

rate() { py "import sys; print(f'{float(sys.argv[2]) / float(sys.argv[1]):.0f}')" "$1" "$2"; }
col() { # NAME TAG: seconds and ratios against tmpfs and passthrough_ll
  local -n arr=$1
  local v=${arr[$2]:-} pt=${arr[pt]:-}
  [ -n "$v" ] || { printf '%10s %10s %10s' n/a n/a n/a; return; }
  printf '%10s %10s %10s' "$v" "$(ratio "$v" "${arr[tmpfs]}")" "$([ -n "$pt" ] && ratio "$v" "$pt" || echo n/a)"
}
row() { # LABEL NAME
  printf '%-36s' "$1"; col "$2" mfs
  [ -n "${BASELINE:-}" ] && col "$2" base
  printf '\n'
}
printf 'memstorefs benchmark: %d documents, mean 9 KiB; %s, the targets taken in turn\n' "$N" \
  "$([ "$ROUNDS" -eq 1 ] && echo "one round" || echo "medians of $ROUNDS rounds")"
printf 'time in seconds; x tmpfs and x pt = that time / the time on tmpfs, on passthrough_ll (lower is better)\n'
# The kernel's placement of a FUSE daemon's wake-ups moves every FUSE row
# (docs/operations.md, "The kernel's wake-ups"): say which one ran.
WAKE_END=$(wake_here)
IDLE_END=$(idle_cpus)
printf 'kernel %s, fuse wake_here: %s; idle: %s\n' "$(uname -r)" \
  "$(setting_span "$WAKE_AT" "$WAKE_END")" "$(setting_span "$IDLE_AT" "$IDLE_END")"
printf '%-36s %10s %10s %10s' "" "secs" "x tmpfs" "x pt"
[ -n "${BASELINE:-}" ] && printf ' %10s %10s %10s' "base secs" "x tmpfs" "x pt"
printf '\n'
row "create 1,000 x 4 KiB" R_create
row "overwrite 1,000 files" R_overwrite
row "sed -i on 200 files" R_sed
row "sed -i's calls on 200, one process" R_save
row "open/read/close every file, warm" R_read
row "ls -lR, warm" R_ls
row "cat of every file, warm" R_cat
if [ -n "${R_create[nx]:-}" ]; then
  nxrow() { printf '%-36s' "$1"; col "$2" nx; printf '\n'; }
  nxrow "create 1,000 x 4 KiB, --no-xattrs" R_create
  nxrow "overwrite 1,000, --no-xattrs" R_overwrite
  nxrow "ls -lR, warm, --no-xattrs" R_ls
fi
printf '%-36s %10s' "creates/s: memstorefs" "$(rate "${R_create[mfs]}" 1000)"
[ -n "${R_create[nx]:-}" ] && printf '   --no-xattrs %s' "$(rate "${R_create[nx]}" 1000)"
[ -n "${BASELINE:-}" ] && printf ' %10s' "$(rate "${R_create[base]}" 1000)"
printf '\n%-36s %10s   passthrough_ll %s\n' "creates/s: tmpfs" "$(rate "${R_create[tmpfs]}" 1000)" \
  "$([ -n "$PT" ] && rate "${R_create[pt]}" 1000 || echo n/a)"
printf '%-36s %10s' "open/read/close per s: memstorefs" "$(rate "${R_read[mfs]}" "$N")"
[ -n "${BASELINE:-}" ] && printf ' %10s' "$(rate "${R_read[base]}" "$N")"
printf '\n'
# The least any FUSE file system can do here: one round trip per open
# (the kernel asks OPEN of each), on top of what tmpfs takes.
floor() { # ROUND_TRIP_US TMPFS_SECS
  py "import sys; r, t, n = map(float, sys.argv[1:]); print(f'{(t + n * r / 1e6) / t:.2f}')" "$1" "$2" "$N"; }
printf '%-36s %10s' "one round trip, getxattr (us)" "${R_rt[mfs]}"
[ -n "${BASELINE:-}" ] && printf ' %10s' "${R_rt[base]}"
printf '   tmpfs %s\n' "${R_rt[tmpfs]}"
printf '%-36s %10s' "  ... open/read/close floor, x tmpfs" "$(floor "${R_rt[mfs]}" "${R_read[tmpfs]}")"
[ -n "${BASELINE:-}" ] && printf ' %10s' "$(floor "${R_rt[base]}" "${R_read[tmpfs]}")"
printf '   (tmpfs time + one round trip a file)\n'
printf '%-36s %10s' "  ... cat floor, x tmpfs" "$(floor "${R_rt[mfs]}" "${R_cat[tmpfs]}")"
[ -n "${BASELINE:-}" ] && printf ' %10s' "$(floor "${R_rt[base]}" "${R_cat[tmpfs]}")"
printf '   (the same for cat)\n'
printf '%-36s %10s' "cold mount, 50 ms latency: all local (s)" "${LAT[mfs]}"
[ -n "${BASELINE:-}" ] && printf ' %10s' "${LAT[base]}"
printf '\n%-36s %10s' "  ... requests it took" "${LATREQ[mfs]}"
[ -n "${BASELINE:-}" ] && printf ' %10s' "${LATREQ[base]}"
printf '\n%-36s %10s   (%s requests)' "  official worker's download (s)" "$WORKER_S" "$WORKER_REQ"
printf '\n%-36s %10s' "  ... memstorefs / official worker" "$(ratio "${LAT[mfs]}" "$WORKER_S")"
[ -n "${BASELINE:-}" ] && printf ' %10s' "$(ratio "${LAT[base]}" "$WORKER_S")"
printf '\n%-36s %10s' "mount time, cold cache (s)" "${MOUNT_S[mfs]}"
[ -n "${BASELINE:-}" ] && printf ' %10s' "${MOUNT_S[base]}"
printf '\n%-36s %10s' "mount time, warm cache (s)" "${REMOUNT_S[mfs]}"
[ -n "${BASELINE:-}" ] && printf ' %10s' "${REMOUNT_S[base]}"
printf '\n%-36s %10s' "content downloads of a warm mount" "${REMOUNT_REQ[mfs]}"
[ -n "${BASELINE:-}" ] && printf ' %10s' "${REMOUNT_REQ[base]}"
printf '\n%-36s %10s' "daemon RSS after the workloads (KiB)" "${RSS_KB[mfs]}"
[ -n "${BASELINE:-}" ] && printf ' %10s' "${RSS_KB[base]}"
printf '\n%-36s %10s' "cache on disk after them (KiB)" "${CACHE_WORK[mfs]}"
[ -n "${BASELINE:-}" ] && printf ' %10s' "${CACHE_WORK[base]}"
printf '\n%-36s %10s' "... after 100 KiB x 10,000 (KiB)" "${CACHE_REWRITE[mfs]}"
[ -n "${BASELINE:-}" ] && printf ' %10s' "${CACHE_REWRITE[base]}"
printf '\n%-36s %10s' "    of which write-ahead log (KiB)" "${WAL_REWRITE[mfs]}"
[ -n "${BASELINE:-}" ] && printf ' %10s' "${WAL_REWRITE[base]}"
printf '\n%-36s %10s' "live content of the mount (KiB)" "${LIVE[mfs]}"
[ -n "${BASELINE:-}" ] && printf ' %10s' "${LIVE[base]}"
printf '\n'

if [ "${SYNC:-1}" != 0 ]; then
  printf '\n'
  "$TOP/contrib/bench-sync.sh"
fi
