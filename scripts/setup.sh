#!/usr/bin/env bash
# Installs the Debian packages pdkv needs to build and test (idempotent).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
PKGS=(build-essential cmake ninja-build pkg-config git
      libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev catch2
      clang-14 libclang-rt-14-dev
      golang-go bindgen python3 python3-pytest python3-numpy
      python3-venv python3-pip python3-setuptools python3-wheel mypy
      libucx-dev ucx-utils libssl-dev iproute2 procps)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
