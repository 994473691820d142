#!/bin/sh
# Prints, one per line, the packages that own the shared libraries the given
# executables load (as ldd resolves them), so that a runtime image installs
# exactly those and no -dev package. Used by the Dockerfiles' build stages;
# works on Debian and on the Ubuntu of the nvidia/cuda images.
#   runtime-packages.sh build/bin/tagi-coordinator ... > packages.txt
# A library that no package owns is named on stderr (the runtime base image
# must provide it).
#   runtime-packages.sh --missing packages.txt
# prints those of the list that are not installed, for the runtime stage: a
# package the base image already has (libc6, or the CUDA libraries that the
# nvidia/cuda images hold at their version) is left alone.
set -eu
[ "$#" -gt 0 ] || { echo "usage: $0 EXECUTABLE... | $0 --missing FILE" >&2; exit 2; }
if [ "$1" = "--missing" ]; then
  [ "$#" -eq 2 ] || { echo "usage: $0 --missing FILE" >&2; exit 2; }
  while read -r pkg; do
    [ -n "$pkg" ] || continue
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || echo "$pkg"
  done < "$2"
  exit 0
fi
for bin in "$@"; do
  if ! ldd "$bin" >/dev/null 2>&1; then
    echo "runtime-packages: $bin is not a dynamic executable" >&2
    exit 1
  fi
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
  real=$(readlink -f "$lib")
  owner=""
  # With merged /usr a library is registered under /lib or /usr/lib, which
  # ldd does not tell apart: try both spellings of both paths.
  for path in "$lib" "$real" "/usr$lib" "/usr$real" "${lib#/usr}" "${real#/usr}"; do
    if owner=$(dpkg -S "$path" 2>/dev/null | head -n 1 | sed 's/: .*//; s/, .*//'); then
      [ -n "$owner" ] && break
    fi
  done
  if [ -n "$owner" ]; then
    echo "$owner"
  else
    echo "runtime-packages: $lib belongs to no package" >&2
  fi
done | sort -u
