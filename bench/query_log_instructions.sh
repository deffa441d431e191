#!/usr/bin/env bash
# Instructions kresd runs per answer with the query log off and on, counted by callgrind: a
# figure that, unlike time on a shared machine, does not move with the neighbours (three runs
# agree within 0.3 %). As root, in a private mount namespace: an overlay on the test bed's
# rootfs (the cached rootfs itself is not changed) gets valgrind from Debian; one kresd runs
# the worker Lua that `kresctl convert` makes (answer counters on in both, as a scraped
# resolver has them), under callgrind, answering distinct names of a local empty subtree, 8
# in flight; after a warm-up the counters are zeroed and each measurement is ANSWERS
# answers. With the log on, a reader takes its datagrams and counts the records.
#   bash bench/query_log_instructions.sh [RUNS] [ANSWERS]     (defaults: 3, 20000)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
answers=${2:-20000}
cargo build --release --bin kresctl
kresctl=${CARGO_TARGET_DIR:-target}/release/kresctl
rootfs=$(bash tests/testbed/provision-rootfs.sh | tail -n 1)
work=$(mktemp -d /tmp/kres-instructions.XXXXXX)
trap 'rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/upper" "$work/work" "$work/root" "$work/vg"

for variant in off on; do
    log=""
    [[ $variant == on ]] && log=$'\n  query-log:\n    enabled: true'
    cat >"$work/vg/$variant.yaml" <<EOF
workers: 1
rundir: /vg/run
cache:
  storage: /vg/cache
  size-max: 10M
network:
  listen:
    - interface: 127.0.0.1@$port
monitoring:
  metrics: always$log
local-data:
  rules:
    - name: [fill.test]
      subtree: empty
EOF
    "$kresctl" convert "$work/vg/$variant.yaml" >"$work/vg/$variant.lua"
done
"$kresctl" convert --type policy-loader "$work/vg/off.yaml" >"$work/vg/loader.lua"

cat >"$work/vg/reader.py" <<'EOF'
import os, socket, sys
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
records = 0
while True:
    d = s.recv(70000)
    records += int.from_bytes(d[8:12], sys.byteorder)
    with open(path + '.count', 'w') as f:
        f.write(str(records))
EOF
cat >"$work/load.py" <<'EOF'
import socket, struct, sys
port, n, first = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect(('127.0.0.1', port))
s.settimeout(timeout)
sent = got = 0
while got < n:
    while sent < n and sent - got < 8:
        name = b''.join(bytes([len(l)]) + l for l in f'f{first + sent}.fill.test'.encode().split(b'.'))
        s.send(struct.pack('>HHHHHH', sent & 0xffff, 0x0100, 1, 0, 0, 0) + name + b'\0\0\1\0\1')
        sent += 1
    try:
        s.recv(4096)
    except socket.timeout:
        sys.exit(f'{got} of {n} answered')
    got += 1
EOF

# shellcheck disable=SC2016
unshare --mount --propagation private -- bash -c '
set -euo pipefail
rootfs=$1 work=$2 port=$3 runs=$4 answers=$5
m=$work/root
mount -t overlay overlay -o "lowerdir=$rootfs,upperdir=$work/upper,workdir=$work/work" "$m"
mount -t proc proc "$m/proc"
mount --rbind /dev "$m/dev"
mkdir -p "$m/vg"
mount --bind "$work/vg" "$m/vg"
cp /etc/resolv.conf "$m/etc/resolv.conf" 2>/dev/null || true
chroot "$m" sh -c "apt-get -qq -o Acquire::Check-Valid-Until=false update &&
    DEBIAN_FRONTEND=noninteractive apt-get -qq -o Acquire::Check-Valid-Until=false install -y valgrind" >/dev/null
answered() { python3 "$work/load.py" "$port" "$@"; }
for variant in off on; do
    rm -rf "$work/vg/run" "$work/vg/cache"
    mkdir -p "$work/vg/run/control" "$work/vg/cache"
    chroot "$m" sh -c "cd /vg/run && kresd -n -c /vg/loader.lua /vg/run" >"$work/vg/loader.log" 2>&1 || true
    chroot "$m" python3 /vg/reader.py /vg/run/query-log.sock & reader=$!
    chroot "$m" env SYSTEMD_INSTANCE=0 valgrind --tool=callgrind \
        --callgrind-out-file=/vg/$variant.cg kresd -n -c /vg/$variant.lua /vg/run \
        >"$work/vg/kresd.$variant.log" 2>&1 & kresd=$!
    for _ in $(seq 1 120); do answered 1 0 1 2>/dev/null && break; sleep 1; done
    answered 3000 1000000
    for run in $(seq 1 "$runs"); do
        chroot "$m" callgrind_control -z >/dev/null 2>&1
        answered "$answers" $((run * 10000000))
        chroot "$m" callgrind_control -d >/dev/null 2>&1
    done
    records=$(cat "$work/vg/run/query-log.sock.count" 2>/dev/null || echo 0)
    kill "$kresd" "$reader" 2>/dev/null || true
    wait "$kresd" "$reader" 2>/dev/null || true
    for dump in "$work/vg/$variant.cg".*; do
        summary=$(sed -n "s/^summary: //p" "$dump")
        echo "$variant $(python3 -c "print(round($summary / $answers))") instructions per answer"
    done
    echo "$variant: the reader counted $records records"
done
' bash "$rootfs" "$work" "$port" "$runs" "$answers" | tee "$work/out"
python3 - "$work/out" <<'EOF'
import statistics, sys
per = {}
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) >= 2 and parts[1].isdigit():
        per.setdefault(parts[0], []).append(int(parts[1]))
off, on = statistics.median(per['off']), statistics.median(per['on'])
print(f"kresd instructions per answer (median): log off {off:.0f}, on {on:.0f}: {100 * (on / off - 1):+.1f} %")
EOF
