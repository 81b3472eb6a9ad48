#!/usr/bin/env bash
# cpython-roots.sh DIR: installs Debian's CPython 3.14 and 3.15 (from its
# unstable distribution, sid) into DIR/3.14 and DIR/3.15, each a root of its
# own that `chroot DIR/3.14 /usr/bin/python3.14` runs. The receiver's tests
# walk their frames (Debian 12 has 3.11 only). Nothing is installed on the
# machine itself: sid's C library is newer than the host's, so each
# interpreter runs with its own, as in a container.
#
# Trust: sid's InRelease is checked with the host's Debian archive keyring
# (gpgv), the package index against InRelease's SHA-256, each package
# against the index's. A root is made whole in DIR/V.new and renamed, so a
# failed or interrupted run leaves none half made; a root already there is
# kept. DEBIAN_MIRROR overrides http://deb.debian.org/debian.
set -euo pipefail

dest=${1:?usage: cpython-roots.sh DIR}
versions=(3.14 3.15)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

ready() { [ -x "$dest/$1/usr/bin/python$1" ] && chroot "$dest/$1" "/usr/bin/python$1" -c 'import json, random, select, zlib' 2>/dev/null; }

missing=()
for v in "${versions[@]}"; do
	ready "$v" || missing+=("$v")
done
[ ${#missing[@]} -eq 0 ] && exit 0

mkdir -p "$dest"
exec 9>"$dest/.lock"
flock 9 # make test in two checkouts at once
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "cpython-roots: installing CPython ${missing[*]} from Debian sid into $dest"
curl -fsS --retry 3 -o "$tmp/InRelease" "$mirror/dists/sid/InRelease"
gpgv --keyring "$keyring" --output "$tmp/Release" "$tmp/InRelease" 2>"$tmp/gpgv.log" || {
	cat "$tmp/gpgv.log" >&2
	echo "cpython-roots: $mirror/dists/sid/InRelease is not signed by a key in $keyring" >&2
	exit 1
}
want=$(awk '/^SHA256:/ { in_sha = 1; next } /^[^ ]/ { in_sha = 0 } in_sha && $3 == "main/binary-amd64/Packages.xz" { print $1 }' "$tmp/Release")
[ -n "$want" ] || { echo "cpython-roots: sid's Release lists no main/binary-amd64/Packages.xz" >&2; exit 1; }
curl -fsS --retry 3 -o "$tmp/Packages.xz" "$mirror/dists/sid/main/binary-amd64/Packages.xz"
echo "$want  $tmp/Packages.xz" | sha256sum -c --quiet - || { echo "cpython-roots: Packages.xz does not match sid's Release" >&2; exit 1; }
xz -dc "$tmp/Packages.xz" >"$tmp/Packages"

# fetch PACKAGE ROOT: downloads PACKAGE (its Filename and SHA256 from the
# index) and unpacks it into ROOT.
fetch() {
	local entry file sum
	entry=$(awk -v p="$1" '$1 == "Package:" { on = ($2 == p) } on && $1 == "Filename:" { f = $2 } on && $1 == "SHA256:" { s = $2 } /^$/ { if (on && f != "") { print f, s; exit } on = 0 }' "$tmp/Packages")
	read -r file sum <<<"$entry"
	[ -n "$file" ] || { echo "cpython-roots: sid has no package $1" >&2; return 1; }
	curl -fsS --retry 3 -o "$tmp/pkg.deb" "$mirror/$file"
	echo "$sum  $tmp/pkg.deb" | sha256sum -c --quiet - || { echo "cpython-roots: $file does not match sid's index" >&2; return 1; }
	dpkg-deb -x "$tmp/pkg.deb" "$2"
}

for v in "${missing[@]}"; do
	root=$dest/$v.new
	rm -rf "$root"
	mkdir -p "$root"
	# The interpreter, its minimal standard library and what they link
	# (the packages' Depends, without what only other modules need).
	for p in "python$v-minimal" "libpython$v-minimal" libc6 libexpat1 zlib1g libzstd1 libgcc-s1 libssl3t64; do
		fetch "$p" "$root"
	done
	# sid's /bin, /lib and /lib64 are links into /usr (base-files makes
	# them; it is not unpacked here).
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
