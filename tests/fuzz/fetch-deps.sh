#!/usr/bin/env bash
# Fetches the sources of jansson and inih that the fuzz build compiles in,
# instrumented (tests/fuzz/README.md), and unpacks them with Debian's patches.
#
#   tests/fuzz/fetch-deps.sh DIR    leaves DIR/jansson and DIR/inih (sources, patched)
#
# The files are pinned: Debian source packages (the .orig tarball and the
# .debian tarball) from Debian's archive, each checked against its SHA-256
# from the package's .dsc. Downloads are kept in DIR/downloads, so a second
# run needs no network; NW_FUZZ_DEPS_CACHE names another folder to keep them
# in (shared between build trees). jansson is bookworm's 2.14-2, the version
# the daemon links. inih is trixie's 59-1: bookworm's 55-1 has no source in
# the archive mirror this project reaches. Both carry Debian's patches; inih's
# add the runtime options (ini_allow_multiline, ...) that config.c sets.
set -euo pipefail

readonly ARCHIVE=${NW_DEBIAN_ARCHIVE:-http://deb.debian.org/debian}
readonly FETCH_TIMEOUT=120 # seconds per file

# name  pool path  sha256 (from the .dsc)
readonly FILES=(
	"jansson_2.14.orig.tar.gz pool/main/j/jansson c739578bf6b764aa0752db9a2fdadcfe921c78f1228c7ec0bb47fa804c55d17b"
	"jansson_2.14-2.debian.tar.xz pool/main/j/jansson e89fe4fd8221f6934ddb50f2e7f8404311928d0e23e49a5599f3d3d14ee8cb88"
	"libinih_59.orig.tar.gz pool/main/libi/libinih 062279922805f5e9a369551a08d5ddb506140fe50774183ffdbb7c22bb97e3f4"
	"libinih_59-1.debian.tar.xz pool/main/libi/libinih 1271db2900148296fd5b9ea1518947458d26957b737b07042422023b362fc353"
)

die() {
	printf 'fetch-deps: %s\n' "$*" >&2
	exit 1
}

(($# == 1)) || die "usage: $0 DIR"
dir=$1
cache=${NW_FUZZ_DEPS_CACHE:-$dir/downloads}
mkdir -p "$dir" "$cache"

for cmd in curl sha256sum tar xz patch; do
	command -v "$cmd" >/dev/null || die "'$cmd' not found (scripts/deps installs it)"
done

# fetch NAME POOL SHA256: DIR/downloads/NAME, downloaded once and checked every time.
fetch() {
	local name=$1 pool=$2 sum=$3 file=$cache/$1
	if [[ ! -f $file ]]; then
		curl -fsSL --retry 3 --max-time "$FETCH_TIMEOUT" -o "$file.part" "$ARCHIVE/$pool/$name" ||
			die "cannot download '$ARCHIVE/$pool/$name'"
		mv "$file.part" "$file"
	fi
	if ! echo "$sum  $file" | sha256sum --check --status; then
		rm -f "$file"
		die "'$name' does not match its pinned SHA-256 $sum (removed; run again to download it again)"
	fi
}

# unpack NAME ORIG DEBIAN: DIR/NAME from the orig tarball with the patches of debian/patches/series.
unpack() {
	local name=$1 orig=$cache/$2 debian=$cache/$3 stamp=$dir/$1/.numwatch-unpacked
	local want="$2 $3"
	if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
		return 0
	fi
	rm -rf "${dir:?}/$name" "$dir/$name.tmp"
	mkdir -p "$dir/$name.tmp"
	tar -xzf "$orig" -C "$dir/$name.tmp" --strip-components=1
	tar -xJf "$debian" -C "$dir/$name.tmp"
	if [[ -f $dir/$name.tmp/debian/patches/series ]]; then
		while read -r patch _; do
			[[ -z $patch || $patch == \#* ]] && continue
			patch -s -p1 -d "$dir/$name.tmp" <"$dir/$name.tmp/debian/patches/$patch" ||
				die "$name: patch '$patch' does not apply"
		done <"$dir/$name.tmp/debian/patches/series"
	fi
	echo "$want" >"$dir/$name.tmp/.numwatch-unpacked"
	mv "$dir/$name.tmp" "$dir/$name"
}

for entry in "${FILES[@]}"; do
	# shellcheck disable=SC2086 # the entry is three words
	fetch $entry
done
unpack jansson jansson_2.14.orig.tar.gz jansson_2.14-2.debian.tar.xz
unpack inih libinih_59.orig.tar.gz libinih_59-1.debian.tar.xz
echo "fetch-deps: jansson 2.14-2 and inih 59-1 in $dir"
