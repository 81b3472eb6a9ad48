#!/usr/bin/env bash
# cpython-roots.sh DIR: installs Debian's CPython 3.14 and 3.15 (from its
# unstable distribution, sid) and 3.9 (Debian 11, bullseye: a distribution's
# build of a CPython before 3.11, stripped and built with profile guidance
# and link-time optimisation, as Ubuntu's 3.10 and RHEL's 3.9 are) into
# DIR/3.14, DIR/3.15 and DIR/3.9, each a root of its own that
# `chroot DIR/3.14 /usr/bin/python3.14` runs. The receiver's tests walk
# their frames (Debian 12 has 3.11 only). Nothing is installed on the
# machine itself: each interpreter runs with its own distribution's C
# library, as in a container.
#
# Trust: each suite's InRelease is checked with the host's Debian archive
# keyring (gpgv), the package index against InRelease's SHA-256, each
# package against the index's. A root is made whole in DIR/V.new and
# renamed, so a failed or interrupted run leaves none half made; a root
# already there is kept. DEBIAN_MIRROR overrides http://deb.debian.org/debian.
set -euo pipefail

dest=${1:?usage: cpython-roots.sh DIR}
# version:suite
versions=(3.14:sid 3.15:sid 3.9:bullseye)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

ready() { [ -x "$dest/$1/usr/bin/python$1" ] && chroot "$dest/$1" "/usr/bin/python$1" -c 'import json, random, select, zlib' 2>/dev/null; }

missing=()
for vs in "${versions[@]}"; do
	ready "${vs%%:*}" || missing+=("$vs")
done
[ ${#missing[@]} -eq 0 ] && exit 0

mkdir -p "$dest"
exec 9>"$dest/.lock"
flock 9 # make test in two checkouts at once
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# index SUITE: the suite's package index, checked, in $tmp/SUITE/Packages.
index() {
	local suite=$1 want
	[ -s "$tmp/$suite/Packages" ] && return 0
	mkdir -p "$tmp/$suite"
	curl -fsS --retry 3 -o "$tmp/$suite/InRelease" "$mirror/dists/$suite/InRelease"
	gpgv --keyring "$keyring" --output "$tmp/$suite/Release" "$tmp/$suite/InRelease" 2>"$tmp/gpgv.log" || {
		cat "$tmp/gpgv.log" >&2
		echo "cpython-roots: $mirror/dists/$suite/InRelease is not signed by a key in $keyring" >&2
		exit 1
	}
	want=$(awk '/^SHA256:/ { in_sha = 1; next } /^[^ ]/ { in_sha = 0 } in_sha && $3 == "main/binary-amd64/Packages.xz" { print $1 }' "$tmp/$suite/Release")
	[ -n "$want" ] || { echo "cpython-roots: $suite's Release lists no main/binary-amd64/Packages.xz" >&2; exit 1; }
	curl -fsS --retry 3 -o "$tmp/$suite/Packages.xz" "$mirror/dists/$suite/main/binary-amd64/Packages.xz"
	echo "$want  $tmp/$suite/Packages.xz" | sha256sum -c --quiet - || { echo "cpython-roots: Packages.xz does not match $suite's Release" >&2; exit 1; }
	xz -dc "$tmp/$suite/Packages.xz" >"$tmp/$suite/Packages"
}

# fetch SUITE PACKAGE ROOT: downloads PACKAGE (its Filename and SHA256
# from SUITE's index) and unpacks it into ROOT.
fetch() {
	local entry file sum
	entry=$(awk -v p="$2" '$1 == "Package:" { on = ($2 == p) } on && $1 == "Filename:" { f = $2 } on && $1 == "SHA256:" { s = $2 } /^$/ { if (on && f != "") { print f, s; exit } on = 0 }' "$tmp/$1/Packages")
	read -r file sum <<<"$entry"
	[ -n "$file" ] || { echo "cpython-roots: $1 has no package $2" >&2; return 1; }
	curl -fsS --retry 3 -o "$tmp/pkg.deb" "$mirror/$file"
	echo "$sum  $tmp/pkg.deb" | sha256sum -c --quiet - || { echo "cpython-roots: $file does not match $1's index" >&2; return 1; }
	dpkg-deb -x "$tmp/pkg.deb" "$3"
}

echo "cpython-roots: installing CPython ${missing[*]} from Debian into $dest"
for vs in "${missing[@]}"; do
	v=${vs%%:*} suite=${vs#*:}
	index "$suite"
	root=$dest/$v.new
	rm -rf "$root"
	mkdir -p "$root"
	# The interpreter, its minimal standard library and what they link
	# (the packages' Depends, without what only other modules need).
	libs=(libc6 libexpat1 zlib1g libzstd1 libgcc-s1 libssl3t64)
	# bullseye's minimal library has no json.
	[ "$suite" = bullseye ] && libs=("libpython$v-stdlib" libc6 libcrypt1 libexpat1 zlib1g libssl1.1)
	for p in "python$v-minimal" "libpython$v-minimal" "${libs[@]}"; do
		fetch "$suite" "$p" "$root"
	done
	# sid's /bin, /lib and /lib64 are links into /usr (base-files makes
	# them; it is not unpacked here); bullseye's libraries are in /lib.
	for d in bin lib lib64; do
		[ -e "$root/$d" ] || ln -s "usr/$d" "$root/$d"
	done
	mkdir -p "$root/tmp"
	chmod 1777 "$root/tmp"
	rm -rf "${dest:?}/$v"
	mv "$root" "$dest/$v"
	ready "$v" || { echo "cpython-roots: $dest/$v/usr/bin/python$v does not run" >&2; exit 1; }
	echo "cpython-roots: $(chroot "$dest/$v" "/usr/bin/python$v" -c 'import sys; print(sys.version.split()[0])') in $dest/$v"
done
