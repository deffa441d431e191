#!/usr/bin/env python3
"""Label every case file under cases/ by running upstream's real `kresctl validate`.

Runs on the host (as root); every case is copied into the Debian rootfs that has
upstream Knot Resolver installed and validated there with
    chroot ROOTFS env -i PATH=... LANG=C.UTF-8 kresctl validate /tmp/kres-conformance/<rel>
one file per kresctl invocation (exactly what a user would run; non-strict mode).
The environment is cleared so that e.g. KRES_LOGTARGET cannot influence `logging.target`.

Output: labels.json next to this script.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# An error line is "<tabs>[<path>] <message>"; <path> itself may contain "[...]" groups
# (list indexes "[0]", dict keys "[example.com]") and may be empty ("[]" for top-level keys).
ERR_PATH_RE = re.compile(r"^\t*\[((?:[^\[\]]|\[[^\]]*\])*)\] ")
VALIDATION_HEADER = "Configuration validation error"


def error_paths(stderr):
    if not stderr.startswith(VALIDATION_HEADER):
        return []
    return [m.group(1) for m in map(ERR_PATH_RE.match, stderr.splitlines()[1:]) if m]


INNER_DIR = "/tmp/kres-conformance"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rootfs", default=os.environ.get("ROOTFS", "/var/cache/knot-resolver-rs/rootfs-sid"))
    ap.add_argument("--root", default=HERE, help="directory holding cases/ (default: next to this script)")
    ap.add_argument("--out", default=None, help="default: ROOT/labels.json")
    ap.add_argument("only", nargs="*", help="relative case paths to (re)label; default all")
    args = ap.parse_args()

    rootfs = args.rootfs
    root = os.path.abspath(args.root)
    if args.out is None:
        args.out = os.path.join(root, "labels.json")
    # PYTHONHASHSEED=0 makes the order of Python-set-derived text (e.g. several names in
    # "unexpected extra key(s) ...") reproducible between runs; it has no other effect.
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    version = subprocess.run(["chroot", rootfs, "env", "-i", *[f"{k}={v}" for k, v in env.items()],
                              "kresctl", "--version"], capture_output=True, text=True).stdout.strip()
    pkg = subprocess.run(["chroot", rootfs, "dpkg-query", "-W", "-f", "${Version}", "knot-resolver6"],
                         capture_output=True, text=True).stdout.strip()
    nproc = len(os.sched_getaffinity(0))
    inner_nproc = subprocess.run(["chroot", rootfs, "python3", "-c",
                                  "import os; print(len(os.sched_getaffinity(0)))"],
                                 capture_output=True, text=True).stdout.strip()

    rels = []
    for dp, _dn, fn in os.walk(os.path.join(root, "cases")):
        for f in fn:
            if f.endswith((".yaml", ".json")):
                rels.append(os.path.relpath(os.path.join(dp, f), root))
    rels.sort()

    old = {}
    if args.only and os.path.exists(args.out):
        with open(args.out) as f:
            old = json.load(f).get("cases", {})
        todo = set(args.only)
    else:
        todo = set(rels)

    host_inner = os.path.join(rootfs, INNER_DIR.lstrip("/"))
    if os.path.exists(host_inner):
        shutil.rmtree(host_inner)
    try:
        labels = {}
        for i, rel in enumerate(rels):
            if rel not in todo:
                if rel in old:
                    labels[rel] = old[rel]
                continue
            dst = os.path.join(host_inner, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(os.path.join(root, rel), dst)
            p = subprocess.run(["chroot", rootfs, "env", "-i", *[f"{k}={v}" for k, v in env.items()],
                                "kresctl", "validate", f"{INNER_DIR}/{rel}"],
                               capture_output=True)
            stderr = p.stderr.decode("utf-8", "backslashreplace")
            paths = error_paths(stderr)
            labels[rel] = {
                "valid": p.returncode == 0,
                "exit_code": p.returncode,
                "error_paths": paths,
                "stderr": stderr,
            }
            if (i + 1) % 50 == 0:
                print(f"{i + 1}/{len(rels)}", file=sys.stderr)
    finally:
        if os.path.exists(host_inner):
            shutil.rmtree(host_inner)

    meta = {
        "upstream": "Knot Resolver (Python manager) kresctl validate, non-strict",
        "upstream_version": version,
        "upstream_package": f"knot-resolver6 {pkg}",
        "rootfs": rootfs,
        "command": f"chroot ROOTFS env -i PATH=... LANG=C.UTF-8 PYTHONHASHSEED=0 kresctl validate {INNER_DIR}/<case>",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "nproc": nproc,
        "nproc_inside_rootfs": int(inner_nproc) if inner_nproc.isdigit() else inner_nproc,
        # verdict or stderr depends on the CPU count (workers max = 10 * nproc)
        "nproc_dependent_cases": sorted(
            r for r, v in labels.items()
            if ("/workers/" in r and re.search(r"-(auto|nproc-x10.*|256|257)\.yaml$", r))
            or "recommended maximum" in v["stderr"]
        ),
        "case_count": len(labels),
        "valid_count": sum(1 for v in labels.values() if v["valid"]),
        "invalid_count": sum(1 for v in labels.values() if not v["valid"]),
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "cases": labels}, f, indent=1, ensure_ascii=False, sort_keys=False)
        f.write("\n")
    print(f"labelled {len(labels)} cases -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
