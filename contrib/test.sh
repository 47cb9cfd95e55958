#!/usr/bin/env bash
# Sets up everything and runs the whole test suite: installs the packages,
# configures and builds (warnings are errors), then runs ctest.  Real FUSE
# mounts need /dev/fuse and root (or a user allowed to mount with
# fusermount3).  Usage: contrib/test.sh [extra ctest arguments]
# Environment: MFS_TEST_JOBS, how many suites run at once (default 2; each
# suite runs its own tests one at a time; 1 runs everything in turn).
set -euo pipefail
cd "$(dirname "$0")/.."

contrib/install-deps.sh
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DMFS_WERROR=ON ${CMAKE_ARGS:-}
cmake --build "$BUILD" -j"$(nproc)"
ctest --test-dir "$BUILD" --output-on-failure --timeout 600 -j"${MFS_TEST_JOBS:-2}" "$@"
