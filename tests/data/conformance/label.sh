#!/bin/sh
# Re-create labels.json from cases/** using upstream Knot Resolver installed in a rootfs.
# Must run as root (chroot). Idempotent: the scratch dir inside the rootfs is wiped before and after.
#   ROOTFS=/var/cache/knot-resolver-rs/rootfs-sid ./label.sh            # relabel everything
#   ./label.sh cases/network/001-do-ipv4-false.yaml ...                  # relabel only some cases
set -eu
here=$(cd "$(dirname "$0")" && pwd)
: "${ROOTFS:=/var/cache/knot-resolver-rs/rootfs-sid}"
if [ "$(id -u)" != 0 ]; then echo "label.sh: must run as root (uses chroot)" >&2; exit 1; fi
[ -x "$ROOTFS/usr/sbin/kresctl" ] || [ -x "$ROOTFS/usr/bin/kresctl" ] || { echo "label.sh: no kresctl in $ROOTFS" >&2; exit 1; }
exec python3 "$here/label.py" --rootfs "$ROOTFS" "$@"
