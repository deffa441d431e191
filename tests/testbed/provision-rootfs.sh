#!/usr/bin/env bash
# Provision, idempotently, a Debian sid root filesystem holding the real Knot Resolver 6
# (kresd, kres-cache-gc, upstream's Python manager with supervisord), knot-dnsutils (kdig),
# knot (an authoritative server for forwarding and zone-transfer tests) and prometheus
# (promtool and a real scraper for the metrics tests).
#
# The rootfs is cached outside the clone so CI runs and re-runs reuse it:
#   KRES_ROOTFS (default /var/cache/knot-resolver-rs/rootfs-sid)
# A finished rootfs carries the marker file .provisioned listing the packages; a partial one
# (interrupted debootstrap) is removed and made again. Needs root and debootstrap, which it
# installs through apt-get when missing. Prints the rootfs path on its last line.
set -euo pipefail

rootfs=${KRES_ROOTFS:-/var/cache/knot-resolver-rs/rootfs-sid}
mirror=${KRES_DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages="knot-resolver6,knot-dnsutils,python3-prometheus-client,python3-watchdog,knot,prometheus"
marker="$rootfs/.provisioned"
# Packages added after the base list: installed into an existing rootfs with apt-get (no new
# debootstrap, since a running test may be using the rootfs), recorded by a marker of their own.
# A fresh rootfs gets them from debootstrap with the rest.
extra_packages="knot-resolver6-module-dnstap"

# Installs the extra packages into the finished rootfs $1 unless its extra marker lists them.
install_extra_packages() {
    local root=$1
    if [[ -f "$root/.provisioned-extra" && "$(cat "$root/.provisioned-extra")" == "$extra_packages" ]]; then
        return 0
    fi
    if [[ $(id -u) -ne 0 ]]; then
        echo "provision-rootfs: must run as root to install $extra_packages into $root" >&2
        exit 1
    fi
    echo "provision-rootfs: installing $extra_packages into $root" >&2
    local mounted_proc=0
    if ! mountpoint -q "$root/proc"; then
        mount -t proc proc "$root/proc"
        mounted_proc=1
    fi
    local status=0
    chroot "$root" sh -c "apt-get -o Acquire::Check-Valid-Until=false update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${extra_packages//,/ }" >&2 || status=$?
    if [[ $mounted_proc -eq 1 ]]; then umount -l "$root/proc"; fi
    if [[ $status -ne 0 ]]; then
        echo "provision-rootfs: installing $extra_packages failed" >&2
        exit 1
    fi
    rm -rf "$root/var/cache/apt/archives/"*.deb
    echo "$extra_packages" >"$root/.provisioned-extra"
}

if [[ -f "$marker" && "$(cat "$marker")" == "$packages" ]]; then
    install_extra_packages "$rootfs"
    echo "$rootfs"
    exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
    echo "provision-rootfs: must run as root to debootstrap $rootfs" >&2
    exit 1
fi

if ! command -v debootstrap >/dev/null; then
    echo "provision-rootfs: installing debootstrap" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap debian-archive-keyring >&2
fi

# Never leave mounts of an earlier broken run behind before deleting.
for m in proc dev/pts dev sys; do
    if mountpoint -q "$rootfs/$m" 2>/dev/null; then umount -l "$rootfs/$m"; fi
done
rm -rf "$rootfs"
tmp="$rootfs.tmp.$$"
rm -rf "$tmp"
mkdir -p "$(dirname "$rootfs")"
trap 'rm -rf "$tmp"' EXIT

echo "provision-rootfs: debootstrap sid into $tmp (about a minute)" >&2
keyring_args=()
if [[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]]; then
    keyring_args=(--keyring=/usr/share/keyrings/debian-archive-keyring.gpg)
fi
if ! debootstrap --variant=minbase "${keyring_args[@]}" --include="$packages,$extra_packages" sid "$tmp" "$mirror" >&2; then
    echo "provision-rootfs: debootstrap with signature check failed; retrying without it" >&2
    rm -rf "$tmp"
    debootstrap --variant=minbase --no-check-gpg --include="$packages,$extra_packages" sid "$tmp" "$mirror" >&2
fi

# The packages' postinst scripts may start nothing inside a chroot; make sure the runtime
# directories that the upstream manager expects exist.
mkdir -p "$tmp/run/knot-resolver" "$tmp/var/cache/knot-resolver"
chroot "$tmp" sh -c 'chown knot-resolver:knot-resolver /run/knot-resolver /var/cache/knot-resolver 2>/dev/null || true'
rm -rf "$tmp/var/cache/apt/archives/"*.deb

echo "$packages" >"$tmp/.provisioned"
echo "$extra_packages" >"$tmp/.provisioned-extra"
mv "$tmp" "$rootfs"
trap - EXIT
echo "$rootfs"
