#!/usr/bin/env bash
# go-install-tool.sh BINARY PACKAGE VERSION: go install PACKAGE@VERSION
# unless $HOME/go/bin/BINARY was built from exactly that version (go
# version -m tells what it was built from).
#
# make run and make test started together on a fresh machine (the README's
# set-up) install the same tools. go install replaces a binary by removing
# and rewriting it, so one make could run a tool the other is rewriting.
# Installs take turns, and the second finds the tool there.
set -euo pipefail
bin=$1 pkg=$2 version=$3
go=${GO:-go}
dir=$HOME/go/bin

built() {
	[ "$("$go" version -m "$dir/$bin" 2>/dev/null | awk '$1 == "mod" { print $3 }')" = "$version" ]
}

built && exit 0
mkdir -p "$dir"
exec 9>"$dir/.hotpath-install.lock"
flock 9
built && exit 0
echo "installing $bin $version"
"$go" install "$pkg@$version"
