#!/usr/bin/env bash
# Run the benchmarks against upstream's manager in the same run (as root, for the rootfs).
#   bash bench/run.sh              all of them, with their default run counts
#   bash bench/run.sh NAME [ARGS]  one of: startup ([RUNS] [WORKERS]: READY, first answer and
#                                  the control plane's PSS with the query log off, on, and on with
#                                  its ring full), worker_crash, api, validate, supervisor_scale,
#                                  throughput ([RUNS] [SECONDS]: DNS answers per second and kresd
#                                  CPU per answer, ours with the answer counting against upstream),
#                                  query_log ([RUNS] [SECONDS] [STALLS]: throughput with the query log
#                                  on, off and upstream's, interleaved; the reader's CPU per 100k
#                                  answers, the ring's memory at 10k and 100k entries, kresctl top over
#                                  a full ring; answer latency at 2,000 q/s with the reader running,
#                                  stopped, resumed and killed),
#                                  lossless, scale (--sizes 1000,10000,100000 --runs N --files),
#                                  chaos (--minutes N [--seed S]: a long soak, not in the default list),
#                                  rpz (--sizes 10000,1000000 --runs N: RPZ by zone transfer from knotd
#                                  against file + watchdog; not in the default list),
#                                  lists ([ENTRIES]: a subscribed list of 3,000,000 entries by
#                                  default, time until in force and the manager's peak memory
#                                  growth; ours only, not in the default list),
#                                  fleet (--sizes 5,20,50 --changes N: a record set on one node until
#                                  every node of a fleet on etcd answers it; a node's PSS with and
#                                  without fleet; ours only, not in the default list),
#                                  ui_pages (--pages N --requests N --cpu-seconds S --fill N: the API's
#                                  latency with 0 and N open status pages, the daemon's CPU with one;
#                                  ours only, not in the default list)
#   bash bench/query_log_instructions.sh [RUNS] [ANSWERS]   kresd's instructions per answer with
#                                  the query log off and on, under callgrind (a script of its own)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bins -p knot-resolver -p bench -p supervisor
if [[ $# -gt 0 ]]; then
    which=$1
    shift
    exec "${CARGO_TARGET_DIR:-target}/release/$which" "$@"
fi
for b in startup worker_crash api validate supervisor_scale throughput query_log; do
    echo "== $b"
    "${CARGO_TARGET_DIR:-target}/release/$b"
done
