#!/usr/bin/env bash
# Installs the Debian packages that memstorefs needs to build, test and run
# (scdoc: the man pages; dpkg-dev and file: cpack's Debian package with its
# dependencies; man-db: man -l in the package test; systemd: systemd-analyze
# verify of the example units).
# Idempotent: installs only what is missing (CI=true always refreshes the
# package lists and installs, as a fresh machine needs).  Uses sudo when not
# run as root.
set -euo pipefail

PACKAGES=(
  gcc cmake make pkg-config
  libfuse3-dev fuse3
  libcurl4-openssl-dev libcjson-dev libsqlite3-dev libssl-dev libutf8proc-dev
  libmicrohttpd-dev libcriterion-dev
  curl python3 attr
  scdoc man-db bsdextrautils dpkg-dev file systemd
  clang libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ] && [ "${CI:-}" != "true" ]; then
  echo "install-deps: every package is already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]:-${PACKAGES[*]}}"
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
