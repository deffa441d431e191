#!/usr/bin/env bash
# Print the path of a cargo-deb binary, installing it on first use into a cache that outlives
# the clone: KRES_CARGO_TOOLS when set, else /var/cache/knot-resolver-rs/cargo-tools where it
# can be written (CI, as root), else ~/.cache/knot-resolver-rs/cargo-tools. The install
# (`cargo install --locked`, a pinned version) takes a minute or two, once; one already on
# PATH is used as it is.
set -euo pipefail

version=3.8.0

if command -v cargo-deb >/dev/null; then
    command -v cargo-deb
    exit 0
fi
tools=${KRES_CARGO_TOOLS:-}
if [[ -z $tools ]]; then
    tools=/var/cache/knot-resolver-rs/cargo-tools
    if ! mkdir -p "$tools" 2>/dev/null || [[ ! -w $tools ]]; then
        tools=${XDG_CACHE_HOME:-$HOME/.cache}/knot-resolver-rs/cargo-tools
    fi
fi
if [[ ! -x $tools/bin/cargo-deb ]]; then
    echo "installing cargo-deb $version into $tools (once)" >&2
    mkdir -p "$tools"
    # Its own build directory, not the project's target directory.
    env -u CARGO_TARGET_DIR cargo install cargo-deb --locked --version "$version" \
        --root "$tools" --quiet >&2
fi
echo "$tools/bin/cargo-deb"
