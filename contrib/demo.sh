#!/usr/bin/env bash
# The memstorefs demo: installs the packages, builds, starts memstored on
# loopback with a demo store (seeded from contrib/demo-seed), mounts it with
# memstorefs, and shows it with ls and cat.  Everything lives below
# $MEMSTOREFS_DEMO_DIR (default /tmp/memstorefs-demo).
#   contrib/demo.sh         set up and show the demo (stops a previous one)
#   contrib/demo.sh stop    unmount and stop memstored
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
DEMO=${MEMSTOREFS_DEMO_DIR:-/tmp/memstorefs-demo}
BUILD=${BUILD_DIR:-build}
MFS=$TOP/$BUILD/fs/memstorefs
MSD=$TOP/$BUILD/contrib/memstored/memstored
export MEMSTOREFS_RUNTIME_DIR=$DEMO/run

stop() {
  if [ -x "$MFS" ] && [ -d "$DEMO/run" ]; then
    "$MFS" unmount --all 2>/dev/null || true
  fi
  if [ -f "$DEMO/memstored.pid" ]; then
    kill "$(cat "$DEMO/memstored.pid")" 2>/dev/null || true
    rm -f "$DEMO/memstored.pid"
  fi
}

if [ "${1:-}" = "stop" ]; then
  stop
  echo "demo stopped"
  exit 0
fi

contrib/install-deps.sh
cmake -S . -B "$BUILD" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target memstorefs memstored

stop
mkdir -p "$DEMO"
# A new server, so a new store, every run: the cache of the stores of the
# runs before would only grow.
rm -rf "$DEMO/mnt" "$DEMO/memstored.db"* "$DEMO/cache"
"$MSD" --listen 127.0.0.1:0 --db "$DEMO/memstored.db" --api-key demo-key \
  --seed "Demo Memory=$TOP/contrib/demo-seed" >"$DEMO/memstored.out" 2>"$DEMO/memstored.log" &
echo $! >"$DEMO/memstored.pid"
for _ in $(seq 100); do
  grep -q '^listening url=' "$DEMO/memstored.out" 2>/dev/null && break
  sleep 0.1
done
URL=$(sed -n 's/^listening url=//p' "$DEMO/memstored.out")
STORE=$(sed -n 's/^seeded name=Demo Memory id=\([^ ]*\).*/\1/p' "$DEMO/memstored.out")
if [ -z "$URL" ] || [ -z "$STORE" ]; then
  echo "memstored did not start; see $DEMO/memstored.log" >&2
  exit 1
fi
echo "memstored: $URL (store $STORE, API key demo-key)"

export ANTHROPIC_API_KEY=demo-key ANTHROPIC_BASE_URL=$URL
MNT=$DEMO/mnt/demo-memory
"$MFS" mount --store "$STORE:$MNT" --cache-dir "$DEMO/cache" --log-file "$DEMO/memstorefs.log" \
  --sync-interval 5

echo
echo "\$ ls -la $MNT"
ls -la "$MNT"
echo
echo "\$ find $MNT -type f"
find "$MNT" -type f | sort
echo
echo "\$ cat $MNT/notes/todo.md"
cat "$MNT/notes/todo.md"
echo
echo "\$ cat $MNT/.anthropic-memory-store"
cat "$MNT/.anthropic-memory-store"
echo
echo
echo "\$ echo '- [x] edited through the mount' >> $MNT/notes/todo.md"
echo '- [x] edited through the mount' >>"$MNT/notes/todo.md"
API=(-s -H 'x-api-key: demo-key' -H 'anthropic-beta: agent-memory-2026-07-22')
echo "(waiting for the next sync, at most 5 s...)"
ID=""
for _ in $(seq 40); do
  ID=$(curl "${API[@]}" "$URL/v1/memory_stores/$STORE/memories?path_prefix=/notes/" |
    python3 -c 'import json,sys
for m in json.load(sys.stdin)["data"]:
    if m.get("path") == "/notes/todo.md": print(m["id"])')
  if [ -n "$ID" ] && curl "${API[@]}" "$URL/v1/memory_stores/$STORE/memories/$ID" |
      grep -q 'edited through the mount'; then
    break
  fi
  sleep 0.5
done
echo "\$ curl ... $URL/v1/memory_stores/$STORE/memories/$ID   (the store's copy, read back)"
curl "${API[@]}" "$URL/v1/memory_stores/$STORE/memories/$ID" |
  python3 -c 'import json,sys; m=json.load(sys.stdin); print("path:", m["path"]); print("content_sha256:", m["content_sha256"]); print(m["content"], end="")'
echo
echo "The demo store is mounted at $MNT (log: $DEMO/memstorefs.log)."
echo "Read it through the API:  curl -s -H 'x-api-key: demo-key' -H 'anthropic-beta: agent-memory-2026-07-22' '$URL/v1/memory_stores/$STORE/memories?depth=1'"
echo "A file's history:         MEMSTOREFS_RUNTIME_DIR=$DEMO/run $MFS log $MNT/notes/todo.md"
echo "                          (then: $MFS show|restore $MNT/notes/todo.md --version ID; docs/history.md)"
echo "Edits the store won over: MEMSTOREFS_RUNTIME_DIR=$DEMO/run $MFS conflicts   (then: conflicts show|diff|restore ID)"
echo "Unmount and stop:         MEMSTOREFS_RUNTIME_DIR=$DEMO/run $MFS unmount --all; kill $(cat "$DEMO/memstored.pid")"
echo "                    or:   contrib/demo.sh stop"
