#!/usr/bin/env bash
# Installs a built tree into a scratch prefix and builds two consumers against it: one with
# CMake's find_package(pdkv), one with pkg-config. Proves the installed package is usable.
set -euo pipefail
BUILD=${1:-build/release}
PREFIX=$(mktemp -d)
trap 'rm -rf "$PREFIX"' EXIT
cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
SRC=$PREFIX/consumer
mkdir -p "$SRC"
cat > "$SRC/main.c" <<'C'
#include <pdkv.h>
#include <stdio.h>
int main(void) {
  if (pdkv_version() != ((PDKV_VERSION_MAJOR << 16) | (PDKV_VERSION_MINOR << 8) | PDKV_VERSION_PATCH)) return 1;
  printf("pdkv %s\n", pdkv_version_string());
  return 0;
}
C
cat > "$SRC/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(pdkv REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE pdkv::pdkv)
CM
cmake -S "$SRC" -B "$SRC/build" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null
cmake --build "$SRC/build" >/dev/null
LD_LIBRARY_PATH="$PREFIX/lib" "$SRC/build/consumer"
PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" cc "$SRC/main.c" -o "$SRC/pc_consumer" \
  $(PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --cflags --libs pdkv)
LD_LIBRARY_PATH="$PREFIX/lib" "$SRC/pc_consumer"
echo "install check: find_package and pkg-config consumers OK"
