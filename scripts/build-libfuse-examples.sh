#!/usr/bin/env bash
# Builds libfuse's passthrough_hp and passthrough_ll examples, the reference FUSE file
# systems of `vdrive-bench drive`, from Debian's own fuse3 source package (the same
# version as the installed libfuse3-dev), into a cache folder. Prints the folder.
#
#   scripts/build-libfuse-examples.sh [CACHE_DIR]   # default ${XDG_CACHE_HOME:-~/.cache}/vdrive-bench/libfuse
#
# The deb-src entry is private to the cache folder: it is derived from this machine's
# own apt sources (same mirror, "deb" -> "deb-src") and handed to apt-get with -o
# options, so /etc/apt is left as it is. Needs dpkg-dev, g++, gcc, libfuse3-dev.
set -euo pipefail
cache="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/vdrive-bench/libfuse}"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"
if [ -x "$cache/bin/passthrough_hp" ] && [ -x "$cache/bin/passthrough_ll" ]; then
    echo "$cache/bin"; exit 0
fi

missing=()
for p in dpkg-dev g++ gcc libfuse3-dev pkg-config; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "Installing ${missing[*]}" >&2
    if [ "$(id -u)" -eq 0 ]; then apt-get install -y -qq "${missing[@]}" >/dev/null; else sudo apt-get install -y -qq "${missing[@]}" >/dev/null; fi
fi

# A private apt configuration: this machine's sources, as deb-src.
apt_dir="$cache/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/sources.list.d"
: > "$apt_dir/sources.list"
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && sed -n 's/^deb \(.*\)$/deb-src \1/p' "$f" >> "$apt_dir/sources.list"
done
for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && sed 's/^Types:.*deb\b.*$/Types: deb-src/' "$f" > "$apt_dir/sources.list.d/$(basename "$f")"
done
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
          -o "Dir::State::Lists=$apt_dir/lists" -o "APT::Get::Only-Source=true")
echo "Fetching Debian's fuse3 source package into $cache/src ..." >&2
apt-get "${apt_opts[@]}" update -qq >&2
version="$(dpkg-query -W -f='${Version}' libfuse3-dev)"
rm -rf "$cache/src" && mkdir -p "$cache/src"
(cd "$cache/src" && apt-get "${apt_opts[@]}" source -qq "fuse3=$version" >&2 \
    || apt-get "${apt_opts[@]}" source -qq fuse3 >&2)
src="$(find "$cache/src" -maxdepth 1 -mindepth 1 -type d -name 'fuse3-*' | head -n 1)"
[ -n "$src" ] && [ -f "$src/example/passthrough_hp.cc" ] || { echo "error: no example/passthrough_hp.cc in the fuse3 source under $cache/src" >&2; exit 66; }

mkdir -p "$cache/bin"
flags="$(pkg-config fuse3 --cflags --libs)"
echo "Compiling passthrough_hp and passthrough_ll from $src/example ..." >&2
# shellcheck disable=SC2086
g++ -std=c++17 -O2 -Wall -Wno-sign-compare -I"$src/example" "$src/example/passthrough_hp.cc" -o "$cache/bin/passthrough_hp" $flags -lpthread
# shellcheck disable=SC2086
gcc -O2 -Wall -I"$src/example" "$src/example/passthrough_ll.c" -o "$cache/bin/passthrough_ll" $flags -lpthread
echo "$src" > "$cache/bin/SOURCE"
echo "$cache/bin"
