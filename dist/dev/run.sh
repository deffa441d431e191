#!/usr/bin/env bash
# Build and run the resolver with the development configuration (dist/dev/config.yaml) on
# 127.0.0.1:5335. Its rundir and cache live in .dev/ of the clone. Uses kresd 6 from $PATH if
# installed; otherwise runs inside the Debian sid rootfs of the test bed (provisioned on first
# use, needs root). Stop it with Ctrl-C. Talk to it with:
#   target/release/kresctl -s .dev/run/kres-api.sock config get
#   kdig @127.0.0.1 -p 5335 resolver.test
set -euo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
cargo build --release --bins
dev="$top/.dev"
mkdir -p "$dev/run" "$dev/cache"
cp dist/dev/config.yaml "$dev/config.yaml"

if command -v kresd >/dev/null && kresd --version 2>/dev/null | grep -q 'version 6\.'; then
    exec "$top/target/release/knot-resolver" -c "$dev/config.yaml"
fi

rootfs=$(bash tests/testbed/provision-rootfs.sh | tail -n 1)
mkdir -p "$rootfs/opt/kr-bin" "$rootfs/opt/kr-dev"
# A private mount namespace: the mounts vanish with the resolver.
exec unshare --mount --propagation private -- sh -c '
    set -e
    mount -t proc proc "$1/proc"
    mount --rbind /dev "$1/dev"
    mount --bind "$2" "$1/opt/kr-bin"
    mount --bind "$3" "$1/opt/kr-dev"
    exec chroot "$1" /opt/kr-bin/knot-resolver -c /opt/kr-dev/config.yaml
' sh "$rootfs" "$top/target/release" "$dev"
