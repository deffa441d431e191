#!/usr/bin/env bash
# Run the whole test suite: formatting, lints, unit tests, and integration tests on real
# kresd 6 (natively if installed, otherwise in the Debian sid rootfs, provisioned on first use).
# Needs root for the rootfs (debootstrap, chroot, mount namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."

# Reuse a cargo target directory outside the clone when one is given or cached.
if [[ -z "${CARGO_TARGET_DIR:-}" && -d /var/cache/knot-resolver-rs ]]; then
    export CARGO_TARGET_DIR=/var/cache/knot-resolver-rs/target
fi

echo "== provisioning the test bed"
# Tests generate TLS certificates with the host's openssl.
if ! command -v openssl >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl
fi
# The systemd bed boots the rootfs with systemd-nspawn (tests/systemd.rs).
if ! command -v systemd-nspawn >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd-container
fi
# The container bed runs podman with runc (tests/container.rs; crun refuses hybrid cgroups).
if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc
fi
# The fleet's store is tested against a real three-member etcd on loopback
# (fleet/tests/store.rs, tests/testbed/src/etcd.rs): etcd and etcdctl from Debian.
if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client
fi
# The status page is tested in headless Chromium over WebDriver (tests/ui_browser.rs).
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver
fi
# The package test (tests/package.rs) builds a .deb: cargo-deb, installed once into a cache
# outside the clone (dist/debian/cargo-deb.sh), and dpkg-shlibdeps for its dependencies.
if ! command -v dpkg-shlibdeps >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dpkg-dev
fi
bash dist/debian/cargo-deb.sh >/dev/null
# tests/api_openapi.rs checks the API's OpenAPI document with a real validator (and answers
# with jsonschema, which it brings); the test fails, never skips, without it.
if ! python3 -c "import openapi_spec_validator, jsonschema, referencing" 2>/dev/null; then
    if ! python3 -m pip --version >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip
    fi
    python3 -m pip install --quiet "openapi-spec-validator==0.9.0" \
        || python3 -m pip install --quiet --break-system-packages "openapi-spec-validator==0.9.0"
fi
# tests/api_conformance.rs runs schemathesis, a property-based tester driven by the API's
# OpenAPI document, against a running resolver; the test fails, never skips, without it.
if ! python3 -c "import schemathesis" 2>/dev/null; then
    if ! python3 -m pip --version >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip
    fi
    python3 -m pip install --quiet "schemathesis==4.32.5" \
        || python3 -m pip install --quiet --break-system-packages "schemathesis==4.32.5"
fi
if ! command -v kresd >/dev/null || ! kresd --version 2>/dev/null | grep -q 'version 6\.'; then
    bash tests/testbed/provision-rootfs.sh
fi
# Helm and the Kubernetes checkers (tests/helm_chart.rs), cached outside the clone: fetched
# here, because the tests below run without a network.
bash tests/testbed/provision-helm-tools.sh >/dev/null
# The tests bring loopback up in a network namespace of their own.
if ! command -v ip >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
# Every test bed is loopback-only. The tests run in a network namespace of their own in which
# only loopback is up, so whatever a program under test tries to reach elsewhere (kresd primes
# the root servers at start, and validation asks them for keys) fails at once, the same way on
# every machine, instead of depending on what the host's network answers, drops or delays.
cargo test --workspace --locked --no-run
if ! unshare --net -- true; then
    echo "the tests need a network namespace of their own (unshare --net): run as root" >&2
    exit 1
fi
exec unshare --net -- sh -c 'ip link set lo up && exec cargo test --workspace --locked --offline'
