#!/usr/bin/env bash
# Builds a second tree with AddressSanitizer (LeakSanitizer included) and
# UndefinedBehaviorSanitizer (clang) and runs the test suite in it: the
# unit tests, the memstored suite and the real-mount tests, with the
# sanitizers' reports written to files (the daemon's stderr is /dev/null
# in the background, so a report on stderr would be lost).  Fails when a
# test fails or when any report file exists, leaks included.
# Usage: contrib/sanitize.sh [extra ctest arguments]
# Environment: SAN_BUILD_DIR (default build-san), SAN_REPORTS (default: a
# fresh directory under /tmp; kept when reports were found), MFS_TEST_JOBS
# (suites run at once, as contrib/test.sh: default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${SAN_BUILD_DIR:-build-san}
REPORTS=${SAN_REPORTS:-$(mktemp -d /tmp/mfs-san-XXXXXX)}
mkdir -p "$REPORTS"
# Tests run the daemon as second local users too: they write reports here.
chmod 1777 "$REPORTS"

echo "sanitize: building $BUILD (clang, -DMFS_ASAN=ON -DMFS_UBSAN=ON)"
CC=clang cmake -S . -B "$BUILD" -DMFS_ASAN=ON -DMFS_UBSAN=ON -DMFS_WERROR=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)"

export ASAN_OPTIONS="log_path=$REPORTS/asan:detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="log_path=$REPORTS/ubsan:print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="log_path=$REPORTS/lsan"

status=0
ctest --test-dir "$BUILD" --output-on-failure --timeout 600 -j"${MFS_TEST_JOBS:-2}" "$@" || status=1

reports=$(find "$REPORTS" -type f | sort)
count=$(printf '%s' "$reports" | grep -c . || true)
echo "sanitize: $count sanitizer report(s) in $REPORTS"
if [ "$count" -gt 0 ]; then
  for f in $reports; do
    echo "==== $f"
    head -n 80 "$f"
  done
  status=1
else
  rm -rf "$REPORTS"
fi
if [ "$status" -ne 0 ]; then
  echo "sanitize: FAILED" >&2
fi
exit "$status"
