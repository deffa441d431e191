#!/usr/bin/env bash
# Build the Debian package knot-resolver-rs: our knot-resolver and kresctl installed on top of
# knot-resolver6 (>= 6.5). Its preinst diverts upstream's binaries, unit, kresctl(8) and bash
# completion to `.upstream` names, its postrm puts them back (dist/debian/); the unit shipped
# is dist/systemd/knot-resolver.service; the manual pages and the bash, zsh and fish
# completions are generated from the command-line definitions by kres-dist-gen (dist/gen).
#
#   dist/debian/build-deb.sh [--fast] OUTDIR
#       builds knot-resolver, kresctl and kres-dist-gen with `cargo build --release --locked`
#       (in CARGO_TARGET_DIR, or target/), generates the pages and completions, and packages.
#   dist/debian/build-deb.sh [--fast] --prebuilt DIR OUTDIR
#       packages what DIR already holds: the binaries knot-resolver and kresctl, and
#       kres-dist-gen's output (man/*.8, completions/*). tests/package.rs packages the test
#       build's own binaries this way.
#
# --fast compresses less (a quicker build, a larger file). Prints the path of the .deb
# (OUTDIR/knot-resolver-rs_VERSION-1_ARCH.deb). Binaries are stripped. Needs cargo-deb (found
# or installed once by dist/debian/cargo-deb.sh) and gzip; works offline once the crates are
# in cargo's cache. SOURCE_DATE_EPOCH dates the manual pages (default: the last commit).
set -euo pipefail

usage() {
    echo "usage: $0 [--fast] [--prebuilt DIR] OUTDIR" >&2
    exit 2
}

fast=()
prebuilt=
while [[ $# -gt 1 ]]; do
    case $1 in
        --fast) fast=(--fast); shift ;;
        --prebuilt) prebuilt=$(realpath "$2"); shift 2 ;;
        *) usage ;;
    esac
done
[[ $# -eq 1 && $1 != -* ]] || usage
mkdir -p "$1"
outdir=$(realpath "$1")

repo=$(realpath "$(dirname "$0")/../..")
cd "$repo"
cargo_deb=$(bash dist/debian/cargo-deb.sh)

stage=$(mktemp -d "${TMPDIR:-/tmp}/knot-resolver-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT

if [[ -z $prebuilt ]]; then
    target=${CARGO_TARGET_DIR:-$repo/target}
    cargo build --release --locked -p knot-resolver -p kres-dist-gen --bins >&2
    if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
        SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
        export SOURCE_DATE_EPOCH
    fi
    prebuilt=$stage/built
    mkdir -p "$prebuilt"
    cp "$target/release/knot-resolver" "$target/release/kresctl" "$prebuilt/"
    "$target/release/kres-dist-gen" "$prebuilt"
fi

# cargo-deb takes the assets named `target/release/...` in [package.metadata.deb] from
# CARGO_TARGET_DIR/release/: the stage plays that directory, so the package is made of
# exactly what was built or given, whatever profile built it.
release=$stage/target/release
mkdir -p "$release/dist"
cp "$prebuilt/knot-resolver" "$prebuilt/kresctl" "$release/"
cp -r "$prebuilt/man" "$prebuilt/completions" "$release/dist/"
gzip -9n "$release"/dist/man/*.8

CARGO_TARGET_DIR=$stage/target "$cargo_deb" --no-build --strip --no-dbgsym \
    --no-separate-debug-symbols "${fast[@]}" --output "$outdir" | tail -n 1
