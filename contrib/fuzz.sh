#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan+UBSan) in their
# own tree and runs each for a bounded time from its seed corpus
# (tests/fuzz/corpus/<target>; new inputs go to a scratch directory, the
# repository's corpus is only read).  Fails when a target finds a crash, a
# leak, undefined behaviour or a broken invariant; the input that did it
# is kept (its path is printed) to become a regression seed.
# Usage: contrib/fuzz.sh [target...]   (default: every target)
# Environment: FUZZ_SECONDS (default 30 per target), FUZZ_BUILD_DIR
# (default build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-30}
TARGETS=("$@")
if [ "${#TARGETS[@]}" -eq 0 ]; then
  TARGETS=(rules api_parse session msd)
fi

echo "fuzz: building $BUILD (clang, -DMFS_FUZZ=ON)"
CC=clang cmake -S . -B "$BUILD" -DMFS_FUZZ=ON -DMFS_TESTS=OFF -DMFS_WERROR=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target "${TARGETS[@]/#/fuzz_}"

WORK=$(mktemp -d /tmp/mfs-fuzz-XXXXXX)
status=0
for t in "${TARGETS[@]}"; do
  mkdir -p "$WORK/$t"
  echo "fuzz: $t for ${SECONDS_EACH}s"
  if ! "$BUILD/tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=10 \
       -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$WORK/$t-" \
       "$WORK/$t" "tests/fuzz/corpus/$t" >"$WORK/$t.log" 2>&1; then
    status=1
    echo "fuzz: $t FAILED; its log: $WORK/$t.log" >&2
    grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$WORK/$t.log" | head -n 20 >&2 || true
  else
    grep -E "^stat::number_of_executed_units|^#[0-9]+ +DONE" "$WORK/$t.log" | sed "s/^/fuzz: $t: /"
  fi
done
if [ "$status" -eq 0 ]; then
  rm -rf "$WORK"
  echo "fuzz: no finding"
fi
exit "$status"
