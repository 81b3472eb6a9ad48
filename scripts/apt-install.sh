#!/usr/bin/env bash
# apt-install.sh PACKAGE...: installs those of the Debian packages that are
# missing (as root).
#
# `make run` and `make test` both install their packages on first use, and
# the README has users start them side by side on a fresh machine: two
# apt-gets at once fail on dpkg's lock ("Could not get lock
# /var/lib/dpkg/lock-frontend"). So hotpath's installs take turns on a lock
# of their own, and the second one finds the packages already there. Against
# other users of apt (unattended-upgrades on a freshly booted VM), install
# waits for dpkg's lock, and update, which does not wait for its lists lock
# whatever the options, is tried again while that lock is held.
set -euo pipefail

lock=/run/lock/hotpath-apt.lock
[ -d /run/lock ] || lock=${TMPDIR:-/tmp}/hotpath-apt.lock
exec 9>"$lock"
if ! flock -n 9; then
	echo "apt-install: waiting for another hotpath install to finish (lock $lock)"
	flock 9
fi

# Installed means dpkg's status "installed": a package removed but not
# purged still answers dpkg -s, with status "deinstall ok config-files".
missing=()
for p in "$@"; do
	[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"

wait_secs=600
for ((waited = 0; ; waited += 5)); do
	if out=$(apt-get update -qq 2>&1); then
		break
	fi
	if ! grep -q "Could not get lock" <<<"$out" || [ "$waited" -ge "$wait_secs" ]; then
		echo "$out" >&2
		echo "apt-install: apt-get update failed" >&2
		exit 1
	fi
	[ "$waited" -eq 0 ] && echo "apt-install: another apt holds the package lists' lock; waiting up to ${wait_secs}s"
	sleep 5
done
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout="$wait_secs" "${missing[@]}"
