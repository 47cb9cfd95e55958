#!/usr/bin/env bash
# Builds the Debian package of memstorefs: installs the packages, configures
# and builds (warnings are errors), then `cpack -G DEB`.  Prints the path
# of the .deb (build/memstorefs_<version>_<arch>.deb), which an image
# installs with `apt-get install ./memstorefs_*.deb`.
# Usage: contrib/package.sh   (BUILD_DIR overrides build/)
set -euo pipefail
cd "$(dirname "$0")/.."

contrib/install-deps.sh
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DMFS_WERROR=ON ${CMAKE_ARGS:-}
cmake --build "$BUILD" -j"$(nproc)"
(cd "$BUILD" && cpack -G DEB)
deb=$(ls -t "$BUILD"/memstorefs_*.deb | head -n 1)
echo
echo "package: $deb"
dpkg-deb -f "$deb" Package Version Architecture Depends
echo "install it with: apt-get install ./$deb"
