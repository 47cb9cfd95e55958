#!/usr/bin/env bash
# The worker hooks end to end, on this machine, against a local memstored:
# starts memstored with a store seeded from contrib/demo-seed, writes a
# session file as the API returns it, runs session-start (the store is
# mounted), edits a file through the mount, runs session-end (final sync,
# unmount) and reads the edit back from the store.  Needs /dev/fuse and
# root (or fusermount3).  Uses build/ (BUILD_DIR), building it when needed.
# Usage: contrib/sandbox/hooks-demo.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD_DIR:-build}
if [ ! -x "$BUILD/fs/memstorefs" ] || [ ! -x "$BUILD/contrib/memstored/memstored" ]; then
    contrib/install-deps.sh
    cmake -S . -B "$BUILD" -DMFS_WERROR=ON >/dev/null
    cmake --build "$BUILD" -j"$(nproc)" --target memstorefs memstored
fi
MFS=$ROOT/$BUILD/fs/memstorefs
MSD=$ROOT/$BUILD/contrib/memstored/memstored
DIR=$(mktemp -d /tmp/memstorefs-hooks-XXXXXX)
MSD_PID=
cleanup() {
    MEMSTOREFS=$MFS contrib/sandbox/session-end >/dev/null 2>&1 || true
    if [ -n "$MSD_PID" ]; then kill "$MSD_PID" 2>/dev/null || true; wait "$MSD_PID" 2>/dev/null || true; fi
    rm -rf "$DIR"
}
trap cleanup EXIT

"$MSD" --listen 127.0.0.1:0 --db "$DIR/memstored.db" --api-key demo-key \
       --seed "Demo Memory=$ROOT/contrib/demo-seed" > "$DIR/memstored.out" 2> "$DIR/memstored.log" &
MSD_PID=$!
for _ in $(seq 100); do grep -q '^listening' "$DIR/memstored.out" && break; sleep 0.1; done
URL=$(sed -n 's/^listening url=//p' "$DIR/memstored.out")
STORE=$(sed -n 's/^seeded .* id=\([^ ]*\) .*/\1/p' "$DIR/memstored.out")
[ -n "$URL" ] && [ -n "$STORE" ] || { echo "memstored did not start" >&2; cat "$DIR/memstored.log" >&2; exit 1; }

export ANTHROPIC_API_KEY=demo-key ANTHROPIC_BASE_URL=$URL
export MEMSTOREFS=$MFS MEMSTOREFS_RUNTIME_DIR=$DIR/run
export MEMSTOREFS_MOUNT_OPTS="--cache-dir $DIR/cache --log-file $DIR/memstorefs.log"
MNT=$DIR/mnt/memory/demo
cat > "$DIR/session.json" <<JSON
{"id": "sesn_demo", "type": "session", "resources": [
  {"type": "memory_store", "memory_store_id": "$STORE", "name": "Demo Memory",
   "access": "read_write", "mount_path": "$MNT"}]}
JSON

echo "== session-start $DIR/session.json"
contrib/sandbox/session-start "$DIR/session.json"
echo "== the session's memory:"
ls -lt "$MNT" "$MNT/notes"
echo "== the agent appends a line to notes/todo.md"
echo "- run the hooks demo" >> "$MNT/notes/todo.md"
echo "== session-end"
contrib/sandbox/session-end
echo "== the store's copy of /notes/todo.md:"
ID=$(curl -sf -H "x-api-key: demo-key" -H "anthropic-beta: agent-memory-2026-07-22" \
     "$URL/v1/memory_stores/$STORE/memories?path_prefix=/notes/" |
     python3 -c 'import json,sys; print(next(m["id"] for m in json.load(sys.stdin)["data"] if m.get("path") == "/notes/todo.md"))')
curl -sf -H "x-api-key: demo-key" -H "anthropic-beta: agent-memory-2026-07-22" \
     "$URL/v1/memory_stores/$STORE/memories/$ID" |
     python3 -c 'import json,sys; print(json.load(sys.stdin)["content"], end="")'
