#!/usr/bin/env python3
"""Generator of the conformance case files (tests/data/conformance/cases/**).

The generated files are the source of truth; this script only documents how
they were produced and lets one regenerate them (it wipes cases/ first).
Expected validity values here ("exp") are the corpus author's guesses, used only
to spot upstream quirks; labels.json holds upstream's real verdicts.
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")

cases = []  # (section, name, ext, text, exp)


def c(section, name, text, exp=None, ext="yaml", raw=False):
    if not raw and ext == "yaml":
        text = text.strip("\n") + "\n"
    cases.append((section, name, ext, text, exp))


V, I = True, False


def t(section, name, body, exp=None):
    """Top-level section test: body is YAML text placed under `section:`."""
    lines = body.strip("\n").splitlines()
    if len(lines) == 1 and not lines[0].lstrip().startswith("- ") and ":" not in lines[0]:
        text = f"{section}: {lines[0].strip()}"
    else:
        text = f"{section}:\n" + "\n".join("  " + l for l in lines)
    c(section, name, text, exp)


# ----------------------------------------------------------------- version
c("version", "version-1", "version: 1", V)
c("version", "version-2", "version: 2", V)
c("version", "version-0", "version: 0", V)
c("version", "version-negative", "version: -1", V)
c("version", "version-string", 'version: "1"', I)
c("version", "version-bool", "version: true", I)
c("version", "version-null", "version: null", I)
c("version", "version-float", "version: 1.0", I)
c("version", "version-list", "version: [1]", I)
c("version", "version-huge", "version: 99999999999999999999", V)

# ----------------------------------------------------------------- nsid / hostname
for sec in ("nsid", "hostname"):
    c(sec, f"{sec}-plain", f"{sec}: resolver1", V)
    c(sec, f"{sec}-quoted", f'{sec}: "resolver-1.example"', V)
    c(sec, f"{sec}-int", f"{sec}: 42", V)
    c(sec, f"{sec}-float", f"{sec}: 4.5", I)
    c(sec, f"{sec}-bool", f"{sec}: true", I)
    c(sec, f"{sec}-yes", f"{sec}: yes", I)
    c(sec, f"{sec}-no-quoted", f'{sec}: "no"', V)
    c(sec, f"{sec}-null", f"{sec}: null", V)
    c(sec, f"{sec}-empty-string", f'{sec}: ""', V)
    c(sec, f"{sec}-unicode", f'{sec}: "řešitel"', V)
    c(sec, f"{sec}-special-chars", f"{sec}: \"it's a \\\"quote\\\"\\n\"", V)
    c(sec, f"{sec}-list", f"{sec}: [a, b]", I)
    c(sec, f"{sec}-mapping", f"{sec}: {{a: b}}", I)

# ----------------------------------------------------------------- rundir
c("rundir", "rundir-default", "rundir: /run/knot-resolver", V)
c("rundir", "rundir-nonexistent-absolute", "rundir: /nonexistent/knot-resolver-corpus", V)
c("rundir", "rundir-relative", "rundir: relative/run", V)
c("rundir", "rundir-dot", "rundir: .", V)
c("rundir", "rundir-empty-string", 'rundir: ""', V)
c("rundir", "rundir-int", "rundir: 5", I)
c("rundir", "rundir-bool", "rundir: true", I)
c("rundir", "rundir-null", "rundir: null", I)
c("rundir", "rundir-list", "rundir: [/run]", I)

# ----------------------------------------------------------------- workers
c("workers", "workers-1", "workers: 1", V)
c("workers", "workers-2", "workers: 2", V)
c("workers", "workers-0", "workers: 0", I)
c("workers", "workers-negative", "workers: -1", I)
c("workers", "workers-auto", "workers: auto", V)
c("workers", "workers-auto-uppercase", "workers: AUTO", I)
c("workers", "workers-string-int", 'workers: "2"', I)
c("workers", "workers-bool", "workers: true", I)
c("workers", "workers-null", "workers: null", I)
c("workers", "workers-float", "workers: 1.5", I)
c("workers", "workers-list", "workers: [1]", I)
c("workers", "workers-nproc-x10", "workers: 20", V)  # nproc-dependent (max = 10*nproc)
c("workers", "workers-nproc-x10-plus1", "workers: 21", I)  # nproc-dependent
c("workers", "workers-256", "workers: 256", I)  # nproc-dependent (valid iff nproc >= 26)
c("workers", "workers-257", "workers: 257", I)  # nproc-dependent

# ----------------------------------------------------------------- management
M = "management"
t(M, "unix-socket-in-rundir", "unix-socket: /run/knot-resolver/kres-api.sock", V)
t(M, "unix-socket-outside-rundir-warns", "unix-socket: /tmp/kres-api.sock", V)
t(M, "unix-socket-relative", "unix-socket: kres-api.sock", V)
t(M, "unix-socket-int", "unix-socket: 5", I)
t(M, "interface-ipv4-port", "interface: 127.0.0.1@5000", V)
t(M, "interface-ipv6-port", "interface: '::1@5000'", V)
t(M, "interface-no-port", "interface: 127.0.0.1", I)
t(M, "interface-port-0", "interface: 127.0.0.1@0", I)
t(M, "interface-port-1", "interface: 127.0.0.1@1", V)
t(M, "interface-port-65535", "interface: 127.0.0.1@65535", V)
t(M, "interface-port-65536", "interface: 127.0.0.1@65536", I)
t(M, "interface-port-nonnumeric", "interface: 127.0.0.1@http", I)
t(M, "interface-ifname", "interface: eth0@5000", I)
t(M, "interface-bracketed-ipv6", "interface: '[::1]@5000'", I)
t(M, "interface-colon-port", "interface: 127.0.0.1:5000", I)
t(M, "interface-double-at", "interface: 127.0.0.1@53@54", I)
t(M, "interface-list", "interface: [127.0.0.1@5000]", I)
t(M, "both-socket-and-interface", "unix-socket: /run/knot-resolver/kres-api.sock\ninterface: 127.0.0.1@5000", I)
c(M, "empty-mapping", "management: {}", I)
c(M, "null", "management: null", I)
c(M, "string", "management: /run/knot-resolver/kres-api.sock", I)
t(M, "underscore-key", "unix_socket: /run/knot-resolver/kres-api.sock", I)
t(M, "unknown-key", "unix-socket: /run/knot-resolver/kres-api.sock\nport: 5000", I)

# ----------------------------------------------------------------- options
O = "options"
BOOL_OPTS = ["minimize", "query-loopback", "reorder-rrset", "query-case-randomization", "priming",
             "rebinding-protection", "refuse-no-rd", "time-jump-detection", "violators-workarounds", "serve-stale"]
for k in BOOL_OPTS:
    t(O, f"{k}-true", f"{k}: true", V)
    t(O, f"{k}-false", f"{k}: false", V)
    t(O, f"{k}-string-true", f'{k}: "true"', I)
t(O, "minimize-yes", "minimize: yes", V)
t(O, "minimize-no", "minimize: no", V)
t(O, "minimize-on", "minimize: on", V)
t(O, "minimize-True-capital", "minimize: True", V)
t(O, "minimize-int-1", "minimize: 1", I)
t(O, "minimize-int-0", "minimize: 0", I)
t(O, "minimize-null", "minimize: null", I)
t(O, "minimize-quoted-yes", "minimize: 'yes'", I)
for g in ("normal", "strict", "permissive"):
    t(O, f"glue-checking-{g}", f"glue-checking: {g}", V)
t(O, "glue-checking-uppercase", "glue-checking: Normal", I)
t(O, "glue-checking-unknown", "glue-checking: lax", I)
t(O, "glue-checking-bool", "glue-checking: true", I)
t(O, "glue-checking-null", "glue-checking: null", I)
t(O, "underscore-key", "glue_checking: normal", I)
t(O, "unknown-key", "foo: bar", I)
c(O, "empty-mapping", "options: {}", V)
c(O, "null", "options: null", I)
c(O, "list", "options: []", I)

# ----------------------------------------------------------------- network
N = "network"
for k in ("do-ipv4", "do-ipv6", "edns-tcp-keepalive"):
    t(N, f"{k}-false", f"{k}: false", V)
    t(N, f"{k}-string", f'{k}: "false"', I)
t(N, "out-interface-v4-valid", "out-interface-v4: 192.0.2.1", V)
t(N, "out-interface-v4-ipv6", "out-interface-v4: '2001:db8::1'", I)
t(N, "out-interface-v4-octet-256", "out-interface-v4: 192.0.2.256", I)
t(N, "out-interface-v4-leading-zero", "out-interface-v4: 192.0.2.01", I)
t(N, "out-interface-v4-network", "out-interface-v4: 192.0.2.0/24", I)
t(N, "out-interface-v4-int", "out-interface-v4: 3221225985", I)
t(N, "out-interface-v4-null", "out-interface-v4: null", V)
t(N, "out-interface-v6-valid", "out-interface-v6: '2001:db8::1'", V)
t(N, "out-interface-v6-ipv4", "out-interface-v6: 192.0.2.1", I)
t(N, "out-interface-v6-scoped", "out-interface-v6: 'fe80::1%eth0'", V)
t(N, "out-interface-v6-mapped", "out-interface-v6: '::ffff:192.0.2.1'", V)
t(N, "out-interface-v6-garbage", "out-interface-v6: '2001:db8:::1'", I)
for val, e in (("0", V), ("65535", V), ("65536", I), ("-1", I), ('"100"', I), ("100.0", I)):
    t(N, f"tcp-pipeline-{val.strip(chr(34)).replace('.', '_')}{'-string' if chr(34) in val else ''}", f"tcp-pipeline: {val}", e)
# sizes
for val, e in (("1232B", V), ("4K", V), ("1M", V), ("1G", V), ("0B", V), ("10", I), ("10 B", I), ("1.5K", I),
               ("10b", I), ("10k", I), ("-1B", I), ("10KB", I), ("10T", I), ("B", I), ("1232", I)):
    name = val.replace(" ", "_").replace(".", "_")
    t(N, f"edns-buffer-size-upstream-{name}", f"edns-buffer-size:\n  upstream: '{val}'", e)
t(N, "edns-buffer-size-downstream-int", "edns-buffer-size:\n  downstream: 1232", I)
t(N, "edns-buffer-size-downstream-4096B", "edns-buffer-size:\n  downstream: 4096B", V)
t(N, "edns-buffer-size-scalar", "edns-buffer-size: 1232B", I)
t(N, "edns-buffer-size-unknown-key", "edns-buffer-size:\n  both: 1232B", I)
# address renumbering
t(N, "address-renumbering-valid", "address-renumbering:\n  - source: 10.10.10.0/24\n    destination: 192.168.1.0", V)
t(N, "address-renumbering-em", "address-renumbering:\n  - source: 10.10.10.0/24\n    destination: 192.168.1.0!", V)
t(N, "address-renumbering-ipv6", "address-renumbering:\n  - source: '2001:db8::/32'\n    destination: '2001:db9::'", V)
t(N, "address-renumbering-host-bits", "address-renumbering:\n  - source: 10.10.10.1/24\n    destination: 192.168.1.0", I)
t(N, "address-renumbering-em-suffix", "address-renumbering:\n  - source: 10.10.10.0/24\n    destination: 192.168.1.0!x", I)
t(N, "address-renumbering-dest-network", "address-renumbering:\n  - source: 10.10.10.0/24\n    destination: 192.168.1.0/24", I)
t(N, "address-renumbering-source-address", "address-renumbering:\n  - source: 10.10.10.10\n    destination: 192.168.1.0", V)
t(N, "address-renumbering-missing-dest", "address-renumbering:\n  - source: 10.10.10.0/24", I)
t(N, "address-renumbering-empty-list", "address-renumbering: []", I)
t(N, "address-renumbering-item-not-list", "address-renumbering:\n  source: 10.10.10.0/24\n  destination: 192.168.1.0", I)
# tls
for w, e in (("auto", V), ("true", V), ("false", V), ("'yes'", I), ("null", I)):
    t(N, f"tls-watchdog-{w.strip(chr(39))}", f"tls:\n  watchdog: {w}", e)
t(N, "tls-cert-and-key", "tls:\n  cert-file: /etc/knot-resolver/server-cert.pem\n  key-file: /etc/knot-resolver/server-key.pem", V)
t(N, "tls-cert-and-key-watchdog-true", "tls:\n  watchdog: true\n  cert-file: /etc/knot-resolver/server-cert.pem\n  key-file: /etc/knot-resolver/server-key.pem", V)
t(N, "tls-cert-only", "tls:\n  cert-file: /etc/knot-resolver/server-cert.pem", I)
t(N, "tls-key-only", "tls:\n  key-file: /etc/knot-resolver/server-key.pem", I)
t(N, "tls-sticket-secret-32", "tls:\n  sticket-secret: " + "a" * 32, V)
t(N, "tls-sticket-secret-31", "tls:\n  sticket-secret: " + "a" * 31, I)
t(N, "tls-sticket-secret-multibyte", "tls:\n  sticket-secret: " + "ř" * 16, V)
t(N, "tls-sticket-secret-int", "tls:\n  sticket-secret: 12345678901234567890123456789012345", V)
t(N, "tls-sticket-secret-file", "tls:\n  sticket-secret-file: /etc/knot-resolver/sticket", V)
t(N, "tls-sticket-secret-and-file", "tls:\n  sticket-secret: " + "a" * 32 + "\n  sticket-secret-file: /etc/knot-resolver/sticket", I)
for p, e in (("true", V), ("false", V), ("0", V), ("512", V), ("513", I), ("-1", I), ("'true'", I), ("'64'", I)):
    t(N, f"tls-padding-{p.strip(chr(39))}{'-string' if chr(39) in p else ''}", f"tls:\n  padding: {p}", e)
t(N, "tls-unknown-key", "tls:\n  ca-file: /etc/ssl/ca.pem", I)
# quic
for k in ("max-conns", "max-streams"):
    for val, e in (("1", V), ("4096", V), ("0", I), ("4097", I)):
        t(N, f"quic-{k}-{val}", f"quic:\n  {k}: {val}", e)
t(N, "quic-require-retry-true", "quic:\n  require-retry: true", V)
t(N, "quic-require-retry-string", "quic:\n  require-retry: 'true'", I)
# proxy protocol
t(N, "proxy-protocol-enable", "proxy-protocol:\n  enable: true", V)
t(N, "proxy-protocol-allow-mixed", "proxy-protocol:\n  enable: true\n  allow:\n    - 127.0.0.1\n    - 192.0.2.0/24\n    - '2001:db8::/32'\n    - '::1'", V)
t(N, "proxy-protocol-allow-host-bits", "proxy-protocol:\n  allow:\n    - 192.0.2.1/24", I)
t(N, "proxy-protocol-allow-item", "proxy-protocol:\n  allow: 127.0.0.1", I)
t(N, "proxy-protocol-allow-empty", "proxy-protocol:\n  allow: []", I)
t(N, "proxy-protocol-allow-garbage", "proxy-protocol:\n  allow:\n    - localhost", I)
# listen
L = "listen:\n"
t(N, "listen-interface-item", L + "  - interface: 127.0.0.1", V)
t(N, "listen-interface-list", L + "  - interface: [127.0.0.1, '::1']", V)
t(N, "listen-interface-ipv6", L + "  - interface: '::1'", V)
t(N, "listen-interface-ipv6-port", L + "  - interface: '::1@5353'", V)
t(N, "listen-interface-ifname", L + "  - interface: eth0", V)
t(N, "listen-interface-ifname-port", L + "  - interface: eth0@5353", V)
t(N, "listen-interface-ifname-dash", L + "  - interface: br-lan", V)
t(N, "listen-interface-ifname-underscore", L + "  - interface: my_if0", V)
t(N, "listen-interface-ifname-vlan-dot", L + "  - interface: eth0.100", I)
t(N, "listen-interface-ifname-leading-dash", L + "  - interface: -eth0", I)
t(N, "listen-interface-ifname-double-dash", L + "  - interface: eth--0", I)
t(N, "listen-interface-ifname-colon", L + "  - interface: 'eth0:1'", I)
t(N, "listen-interface-port-0", L + "  - interface: 127.0.0.1@0", I)
t(N, "listen-interface-port-65535", L + "  - interface: 127.0.0.1@65535", V)
t(N, "listen-interface-port-65536", L + "  - interface: 127.0.0.1@65536", I)
t(N, "listen-interface-port-nonnumeric", L + "  - interface: 127.0.0.1@dns", I)
t(N, "listen-interface-double-at", L + "  - interface: 127.0.0.1@53@54", I)
t(N, "listen-interface-bracketed-ipv6", L + "  - interface: '[::1]@53'", I)
t(N, "listen-interface-empty-list", L + "  - interface: []", I)
t(N, "listen-interface-int", L + "  - interface: 5", V)
t(N, "listen-interface-bool", L + "  - interface: true", I)
t(N, "listen-interface-network", L + "  - interface: 127.0.0.0/8", I)
t(N, "listen-port-and-at-port", L + "  - interface: 127.0.0.1@5353\n    port: 5353", I)
t(N, "listen-mixed-at-port", L + "  - interface: [127.0.0.1@5353, '::1']", I)
t(N, "listen-all-at-port", L + "  - interface: [127.0.0.1@5353, '::1@5353']", V)
t(N, "listen-port-field", L + "  - interface: 127.0.0.1\n    port: 5353", V)
for val, e in (("1", V), ("65535", V), ("0", I), ("65536", I), ("'53'", I)):
    t(N, f"listen-port-{val.strip(chr(39))}{'-string' if chr(39) in val else ''}", L + f"  - interface: 127.0.0.1\n    port: {val}", e)
t(N, "listen-unix-socket", L + "  - unix-socket: /run/knot-resolver/dns.sock", V)
t(N, "listen-unix-socket-list", L + "  - unix-socket: [/run/knot-resolver/a.sock, /run/knot-resolver/b.sock]", V)
t(N, "listen-unix-socket-and-port", L + "  - unix-socket: /run/knot-resolver/dns.sock\n    port: 53", I)
t(N, "listen-unix-socket-and-interface", L + "  - unix-socket: /run/knot-resolver/dns.sock\n    interface: 127.0.0.1", I)
t(N, "listen-neither", L + "  - kind: dot", I)
t(N, "listen-only-port", L + "  - port: 53", I)
for k in ("dns", "xdp", "dot", "doh-legacy", "doh2", "doh2-insecure", "doq"):
    t(N, f"listen-kind-{k}", L + f"  - interface: 127.0.0.1\n    kind: {k}", V)
t(N, "listen-kind-doh", L + "  - interface: 127.0.0.1\n    kind: doh", I)
t(N, "listen-kind-uppercase", L + "  - interface: 127.0.0.1\n    kind: DoT", I)
t(N, "listen-kind-unix-dot", L + "  - unix-socket: /run/knot-resolver/dot.sock\n    kind: dot", V)
t(N, "listen-freebind-true", L + "  - interface: 127.0.0.1\n    freebind: true", V)
t(N, "listen-freebind-yes", L + "  - interface: 127.0.0.1\n    freebind: yes", V)
t(N, "listen-freebind-string", L + "  - interface: 127.0.0.1\n    freebind: 'yes'", I)
t(N, "listen-empty-list", "listen: []", I)
t(N, "listen-null", "listen: null", I)
t(N, "listen-item-not-list", "listen:\n  interface: 127.0.0.1", I)
t(N, "listen-unknown-key", L + "  - interface: 127.0.0.1\n    protocol: udp", I)
t(N, "listen-underscore-key", L + "  - unix_socket: /run/knot-resolver/dns.sock", I)
t(N, "listen-multiple", L + "  - interface: 127.0.0.1\n  - interface: '::1'\n    kind: dot\n  - unix-socket: /run/knot-resolver/dns.sock", V)
t(N, "listen-second-item-bad", L + "  - interface: 127.0.0.1\n  - interface: 127.0.0.1@99999", I)
t(N, "underscore-key", "do_ipv4: true", I)
t(N, "unknown-key", "do-ipv5: true", I)
c(N, "empty-mapping", "network: {}", V)

# ----------------------------------------------------------------- views
W = "views"
t(W, "answer-allow", "- subnets: [127.0.0.0/8]\n  answer: allow", V)
for a in ("refused", "noanswer"):
    t(W, f"answer-{a}", f"- subnets: [0.0.0.0/0]\n  answer: {a}", V)
t(W, "answer-unknown", "- subnets: [0.0.0.0/0]\n  answer: deny", I)
t(W, "answer-uppercase", "- subnets: [0.0.0.0/0]\n  answer: Allow", I)
t(W, "tags-single", "- subnets: [10.0.0.0/8]\n  tags: [t1]", V)
t(W, "tags-two-unused", "- subnets: [10.0.0.0/8]\n  tags: [t1, t2]", I)
t(W, "tags-and-answer", "- subnets: [10.0.0.0/8]\n  tags: [t1]\n  answer: allow", I)
t(W, "neither-tags-nor-answer", "- subnets: [10.0.0.0/8]", I)
t(W, "tags-empty-list", "- subnets: [10.0.0.0/8]\n  tags: []", I)
for tag, e in (("a-b", V), ("0abc", V), ("-ab", I), ("Abc", I), ("a_b", I), ("ab-", I), ("a.b", I)):
    t(W, f"tag-{tag.replace('.', 'dot').replace('_', 'us')}", f"- subnets: [10.0.0.0/8]\n  tags: ['{tag}']", e)
t(W, "tag-int", "- subnets: [10.0.0.0/8]\n  tags: [1]", V)
t(W, "subnets-ipv6", "- subnets: ['::1/128', '2001:db8::/32']\n  answer: allow", V)
t(W, "subnets-host-bits", "- subnets: [10.0.0.1/8]\n  answer: allow", I)
t(W, "subnets-address-no-prefix", "- subnets: [10.0.0.1]\n  answer: allow", V)
t(W, "subnets-string-not-list", "- subnets: 10.0.0.0/8\n  answer: allow", I)
t(W, "subnets-empty", "- subnets: []\n  answer: allow", I)
t(W, "subnets-missing", "- answer: allow", I)
t(W, "subnets-prefix-33", "- subnets: [10.0.0.0/33]\n  answer: allow", I)
t(W, "dst-subnet", "- subnets: [0.0.0.0/0]\n  dst-subnet: 192.0.2.0/24\n  answer: refused", V)
t(W, "dst-subnet-list", "- subnets: [0.0.0.0/0]\n  dst-subnet: [192.0.2.0/24]\n  answer: refused", I)
t(W, "dst-subnet-host-bits", "- subnets: [0.0.0.0/0]\n  dst-subnet: 192.0.2.1/24\n  answer: refused", I)
for p in ("udp53", "tcp53", "dot", "doh", "doq"):
    t(W, f"protocols-{p}", f"- subnets: [0.0.0.0/0]\n  protocols: [{p}]\n  answer: allow", V)
t(W, "protocols-unknown", "- subnets: [0.0.0.0/0]\n  protocols: [udp]\n  answer: allow", I)
t(W, "protocols-item", "- subnets: [0.0.0.0/0]\n  protocols: udp53\n  answer: allow", I)
t(W, "protocols-empty", "- subnets: [0.0.0.0/0]\n  protocols: []\n  answer: allow", I)
for k in ("minimize", "dns64", "fallback"):
    t(W, f"options-{k}-false", f"- subnets: [0.0.0.0/0]\n  answer: allow\n  options:\n    {k}: false", V)
    t(W, f"options-{k}-string", f"- subnets: [0.0.0.0/0]\n  answer: allow\n  options:\n    {k}: 'false'", I)
for pf, e in (("0", V), ("0.0", V), ("1.5", V), ("65535", V), ("65535.5", I), ("65536", I), ("-0.1", I), ("'1.0'", I), ("true", I)):
    nm = pf.strip("'").replace(".", "_").replace("-", "minus")
    t(W, f"options-price-factor-{nm}{'-string' if chr(39) in pf else ''}", f"- subnets: [0.0.0.0/0]\n  answer: allow\n  options:\n    price-factor: {pf}", e)
t(W, "options-unknown-key", "- subnets: [0.0.0.0/0]\n  answer: allow\n  options:\n    dnssec: false", I)
t(W, "underscore-key", "- subnets: [0.0.0.0/0]\n  dst_subnet: 192.0.2.0/24\n  answer: allow", I)
c(W, "empty-list", "views: []", I)
c(W, "null", "views: null", V)
c(W, "mapping-not-list", "views:\n  subnets: [0.0.0.0/0]\n  answer: allow", I)
t(W, "second-item-bad", "- subnets: [0.0.0.0/0]\n  answer: allow\n- subnets: [bad]\n  answer: allow", I)

# tags cross-checks (views + local-data)
X = "views"
c(X, "tags-used-by-rule", """
views:
  - subnets: [10.0.0.0/8]
    tags: [t1]
local-data:
  rules:
    - name: example.com
      address: 192.0.2.1
      tags: [t1]
""", V)
c(X, "tags-one-unused-of-two", """
views:
  - subnets: [10.0.0.0/8]
    tags: [t1, t2]
local-data:
  rules:
    - name: example.com
      address: 192.0.2.1
      tags: [t1]
""", V)
c(X, "tags-two-unused-of-three", """
views:
  - subnets: [10.0.0.0/8]
    tags: [t1, t2, t3]
local-data:
  rules:
    - name: example.com
      address: 192.0.2.1
      tags: [t1]
""", I)
c(X, "tags-unused-across-views", """
views:
  - subnets: [10.0.0.0/8]
    tags: [t1]
  - subnets: [192.168.0.0/16]
    tags: [t2]
""", I)
c(X, "tags-same-tag-two-views", """
views:
  - subnets: [10.0.0.0/8]
    tags: [t1]
  - subnets: [192.168.0.0/16]
    tags: [t1]
""", V)
c(X, "rule-tag-not-in-views", """
local-data:
  rules:
    - name: example.com
      address: 192.0.2.1
      tags: [t1]
""", I)
c(X, "rule-tag-not-in-views-with-views", """
views:
  - subnets: [10.0.0.0/8]
    tags: [t1]
local-data:
  rules:
    - name: example.com
      address: 192.0.2.1
      tags: [t1, t9]
""", I)
c(X, "rpz-tag-not-in-views", """
local-data:
  rpz:
    - file: /etc/knot-resolver/blocklist.rpz
      tags: [t1]
""", I)
c(X, "rpz-tags-used", """
views:
  - subnets: [10.0.0.0/8]
    tags: [t1, t2]
local-data:
  rpz:
    - file: /etc/knot-resolver/blocklist.rpz
      tags: [t1]
  rules:
    - name: example.com
      address: 192.0.2.1
      tags: [t2]
""", V)
c(X, "two-rules-bad-tags", """
views:
  - subnets: [10.0.0.0/8]
    answer: allow
local-data:
  rules:
    - name: a.example.com
      address: 192.0.2.1
      tags: [x1]
    - name: b.example.com
      address: 192.0.2.2
    - name: c.example.com
      address: 192.0.2.3
      tags: [x2]
""", I)
c(X, "rule-and-rpz-bad-tags-plus-unused", """
views:
  - subnets: [10.0.0.0/8]
    tags: [u1, u2]
local-data:
  rules:
    - name: a.example.com
      address: 192.0.2.1
      tags: [x1]
  rpz:
    - file: /etc/knot-resolver/blocklist.rpz
      tags: [x2]
""", I)

# ----------------------------------------------------------------- local-data
D = "local-data"
for val, e in (("1s", V), ("0s", V), ("10", I), ("null", V)):
    t(D, f"ttl-{val}", f"ttl: {val}", e)
t(D, "nodata-false", "nodata: false", V)
t(D, "nodata-null", "nodata: null", I)
t(D, "addresses-item", "addresses:\n  example.com: 192.0.2.1", V)
t(D, "addresses-list", "addresses:\n  example.com: [192.0.2.1, '2001:db8::1']", V)
t(D, "addresses-empty-list", "addresses:\n  example.com: []", I)
t(D, "addresses-bad-ip", "addresses:\n  example.com: 192.0.2.300", I)
t(D, "addresses-network", "addresses:\n  example.com: 192.0.2.0/24", I)
t(D, "addresses-idn", "addresses:\n  příklad.cz: 192.0.2.1", V)
t(D, "addresses-root", "addresses:\n  '.': 192.0.2.1", V)
t(D, "addresses-trailing-dot", "addresses:\n  example.com.: 192.0.2.1", V)
t(D, "addresses-label-63", f"addresses:\n  {'a' * 63}.com: 192.0.2.1", V)
t(D, "addresses-label-64", f"addresses:\n  {'a' * 64}.com: 192.0.2.1", I)
t(D, "addresses-leading-hyphen", "addresses:\n  -example.com: 192.0.2.1", I)
t(D, "addresses-trailing-hyphen", "addresses:\n  example-.com: 192.0.2.1", I)
t(D, "addresses-empty-label", "addresses:\n  a..com: 192.0.2.1", I)
t(D, "addresses-underscore", "addresses:\n  _srv.example.com: 192.0.2.1", V)
t(D, "addresses-int-key", "addresses:\n  1234: 192.0.2.1", V)
t(D, "addresses-empty-map", "addresses: {}", V)
t(D, "addresses-files", "addresses-files:\n  - /etc/hosts", V)
t(D, "addresses-files-item", "addresses-files: /etc/hosts", I)
t(D, "addresses-files-empty", "addresses-files: []", I)
t(D, "records", "records: |\n  example.net. 300 IN A 192.0.2.5\n  www.example.net. 300 IN CNAME example.net.", V)
t(D, "records-int", "records: 5", V)
t(D, "records-bool", "records: false", I)
R_ = "rules:\n  - "
t(D, "rule-name-address", R_ + "name: example.com\n    address: 192.0.2.1", V)
t(D, "rule-name-list-address-list", R_ + "name: [a.example.com, b.example.com]\n    address: [192.0.2.1, '2001:db8::1']", V)
t(D, "rule-subtree-empty", R_ + "name: example.com\n    subtree: empty", V)
t(D, "rule-subtree-nxdomain", R_ + "name: example.com\n    subtree: nxdomain", V)
t(D, "rule-subtree-redirect", R_ + "name: example.com\n    subtree: redirect", V)
t(D, "rule-subtree-unknown", R_ + "name: example.com\n    subtree: refused", I)
t(D, "rule-subtree-empty-with-address", R_ + "name: example.com\n    subtree: empty\n    address: 192.0.2.1", V)
t(D, "rule-subtree-redirect-with-address", R_ + "name: example.com\n    subtree: redirect\n    address: 192.0.2.1", V)
t(D, "rule-subtree-nxdomain-with-address", R_ + "name: example.com\n    subtree: nxdomain\n    address: 192.0.2.1", I)
t(D, "rule-address-and-records", R_ + "name: example.com\n    address: 192.0.2.1\n    records: 'example.com. A 192.0.2.2'", I)
t(D, "rule-name-only", R_ + "name: example.com", I)
t(D, "rule-file", R_ + "file: /etc/hosts", V)
t(D, "rule-file-list", R_ + "file: [/etc/hosts, /etc/hosts.extra]", V)
t(D, "rule-file-and-name", R_ + "file: /etc/hosts\n    name: example.com", I)
t(D, "rule-file-and-address", R_ + "file: /etc/hosts\n    address: 192.0.2.1", I)
t(D, "rule-records", R_ + "records: 'example.com. 300 A 192.0.2.1'", V)
t(D, "rule-records-and-name", R_ + "records: 'example.com. 300 A 192.0.2.1'\n    name: example.com", I)
t(D, "rule-address-no-name", R_ + "address: 192.0.2.1", I)
t(D, "rule-nodata-with-subtree-no-address", R_ + "name: example.com\n    subtree: empty\n    nodata: true", I)
t(D, "rule-nodata-false-with-subtree", R_ + "name: example.com\n    subtree: empty\n    nodata: false", V)
t(D, "rule-nodata-with-subtree-and-address", R_ + "name: example.com\n    subtree: redirect\n    address: 192.0.2.1\n    nodata: true", V)
t(D, "rule-nodata-with-address", R_ + "name: example.com\n    address: 192.0.2.1\n    nodata: true", V)
t(D, "rule-ttl", R_ + "name: example.com\n    address: 192.0.2.1\n    ttl: 5m", V)
t(D, "rule-ttl-bad", R_ + "name: example.com\n    address: 192.0.2.1\n    ttl: 5 m", I)
t(D, "rule-bad-name", R_ + "name: -example.com\n    address: 192.0.2.1", I)
t(D, "rule-bad-address", R_ + "name: example.com\n    address: example.org", I)
t(D, "rule-empty", R_.rstrip(" ").rstrip("- ") + "  - {}", I)
t(D, "rule-unknown-key", R_ + "name: example.com\n    address: 192.0.2.1\n    action: deny", I)
t(D, "rules-empty", "rules: []", I)
t(D, "rpz-file", "rpz:\n  - file: /etc/knot-resolver/blocklist.rpz", V)
for w, e in (("true", V), ("false", V), ("auto", V), ("'true'", I)):
    t(D, f"rpz-watchdog-{w.strip(chr(39))}{'-string' if chr(39) in w else ''}", f"rpz:\n  - file: /etc/knot-resolver/blocklist.rpz\n    watchdog: {w}", e)
t(D, "rpz-log-ip-name", "rpz:\n  - file: /etc/knot-resolver/blocklist.rpz\n    log: [ip, name]", V)
t(D, "rpz-log-unknown", "rpz:\n  - file: /etc/knot-resolver/blocklist.rpz\n    log: [qname]", I)
t(D, "rpz-log-item", "rpz:\n  - file: /etc/knot-resolver/blocklist.rpz\n    log: ip", I)
t(D, "rpz-missing-file", "rpz:\n  - watchdog: false", I)
t(D, "rpz-file-list", "rpz:\n  - file: [/a.rpz, /b.rpz]", I)
t(D, "underscore-key", "addresses_files: [/etc/hosts]", I)
t(D, "unknown-key", "hosts: [/etc/hosts]", I)
c(D, "empty-mapping", "local-data: {}", V)

# ----------------------------------------------------------------- forward
F = "forward"
t(F, "ip-server", "- subtree: example.com\n  servers: [192.0.2.1]", V)
t(F, "ip-port-server", "- subtree: example.com\n  servers: [192.0.2.1@5353]", V)
t(F, "ipv6-port-server", "- subtree: example.com\n  servers: ['2001:db8::1@5353']", V)
t(F, "subtree-list", "- subtree: [example.com, example.net]\n  servers: [192.0.2.1]", V)
t(F, "subtree-root", "- subtree: '.'\n  servers: [192.0.2.1]", V)
t(F, "subtree-trailing-dot", "- subtree: example.com.\n  servers: [192.0.2.1]", V)
t(F, "subtree-idn", "- subtree: příklad.cz\n  servers: [192.0.2.1]", V)
t(F, "subtree-punycode", "- subtree: xn--pklad-zsa96e.cz\n  servers: [192.0.2.1]", V)
t(F, "subtree-uppercase", "- subtree: EXAMPLE.COM\n  servers: [192.0.2.1]", V)
t(F, "subtree-label-63", f"- subtree: {'a' * 63}.com\n  servers: [192.0.2.1]", V)
t(F, "subtree-label-64", f"- subtree: {'a' * 64}.com\n  servers: [192.0.2.1]", I)
t(F, "subtree-total-253", "- subtree: " + ".".join(["a" * 63] * 3 + ["a" * 61]) + "\n  servers: [192.0.2.1]", V)
t(F, "subtree-total-254", "- subtree: " + ".".join(["a" * 63] * 3 + ["a" * 62]) + "\n  servers: [192.0.2.1]", I)
t(F, "subtree-total-253-trailing-dot", "- subtree: " + ".".join(["a" * 63] * 3 + ["a" * 61]) + ".\n  servers: [192.0.2.1]", V)
t(F, "subtree-leading-hyphen", "- subtree: -example.com\n  servers: [192.0.2.1]", I)
t(F, "subtree-trailing-hyphen", "- subtree: example-.com\n  servers: [192.0.2.1]", I)
t(F, "subtree-leading-dot", "- subtree: .example.com\n  servers: [192.0.2.1]", I)
t(F, "subtree-double-dot", "- subtree: example..com\n  servers: [192.0.2.1]", I)
t(F, "subtree-two-dots-only", "- subtree: '..'\n  servers: [192.0.2.1]", I)
t(F, "subtree-space", "- subtree: 'exa mple.com'\n  servers: [192.0.2.1]", V)
t(F, "subtree-wildcard", "- subtree: '*.example.com'\n  servers: [192.0.2.1]", V)
t(F, "subtree-empty-string", "- subtree: ''\n  servers: [192.0.2.1]", I)
t(F, "subtree-int", "- subtree: 123\n  servers: [192.0.2.1]", V)
t(F, "subtree-bool", "- subtree: true\n  servers: [192.0.2.1]", I)
t(F, "subtree-empty-list", "- subtree: []\n  servers: [192.0.2.1]", I)
t(F, "subtree-missing", "- servers: [192.0.2.1]", I)
t(F, "servers-missing", "- subtree: example.com", I)
t(F, "servers-empty", "- subtree: example.com\n  servers: []", I)
t(F, "servers-item-not-list", "- subtree: example.com\n  servers: 192.0.2.1", I)
t(F, "server-hostname-string", "- subtree: example.com\n  servers: [dns.example.net]", I)
t(F, "server-port-0", "- subtree: example.com\n  servers: [192.0.2.1@0]", I)
t(F, "server-port-65536", "- subtree: example.com\n  servers: [192.0.2.1@65536]", I)
t(F, "server-double-at", "- subtree: example.com\n  servers: [192.0.2.1@53@53]", I)
t(F, "server-ifname", "- subtree: example.com\n  servers: [eth0@53]", I)
t(F, "server-object", "- subtree: example.com\n  servers:\n    - address: 192.0.2.1", V)
t(F, "server-object-address-list", "- subtree: example.com\n  servers:\n    - address: [192.0.2.1, '2001:db8::1@5353']", V)
t(F, "server-object-tls-hostname", "- subtree: '.'\n  servers:\n    - address: 192.0.2.1@853\n      transport: tls\n      hostname: dns.example.net", V)
t(F, "server-object-tls-ca-file", "- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      transport: tls\n      hostname: dns.example.net\n      ca-file: /etc/ssl/certs/ca-certificates.crt", V)
PIN = "d6qzRu9zOECb90Uez27xWltNsj0e1Md7GkYYkVoZWmM="
t(F, "server-object-pin", f"- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      transport: tls\n      pin-sha256: {PIN}", V)
t(F, "server-object-pin-list", f"- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      transport: tls\n      pin-sha256: [{PIN}, {PIN}]", V)
t(F, "server-object-pin-short", f"- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      transport: tls\n      pin-sha256: {PIN[1:]}", I)
t(F, "server-object-pin-no-padding", f"- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      transport: tls\n      pin-sha256: {PIN[:-1]}A", I)
t(F, "server-object-pin-urlsafe", f"- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      transport: tls\n      pin-sha256: {PIN.replace('d', '-', 1)}", I)
t(F, "server-object-pin-and-hostname", f"- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      transport: tls\n      pin-sha256: {PIN}\n      hostname: dns.example.net", I)
t(F, "server-object-pin-and-ca-file", f"- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      transport: tls\n      pin-sha256: {PIN}\n      ca-file: /etc/ssl/ca.pem", I)
t(F, "server-object-pin-without-tls", f"- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      pin-sha256: {PIN}", V)
t(F, "server-object-transport-udp", "- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      transport: udp", I)
t(F, "server-object-transport-TLS", "- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      transport: TLS", I)
t(F, "server-object-hostname-bad", "- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      transport: tls\n      hostname: -dns.example.net", I)
t(F, "server-object-missing-address", "- subtree: '.'\n  servers:\n    - transport: tls\n      hostname: dns.example.net", I)
t(F, "server-object-unknown-key", "- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      port: 53", I)
t(F, "server-object-underscore-key", "- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      ca_file: /etc/ssl/ca.pem", I)
t(F, "mixed-servers", "- subtree: '.'\n  servers:\n    - 192.0.2.1\n    - address: 192.0.2.2@853\n      transport: tls\n      hostname: dns.example.net", V)
t(F, "authoritative", "- subtree: example.com\n  servers: [192.0.2.1]\n  options:\n    authoritative: true", V)
t(F, "authoritative-port-53", "- subtree: example.com\n  servers: [192.0.2.1@53]\n  options:\n    authoritative: true", V)
t(F, "authoritative-custom-port", "- subtree: example.com\n  servers: [192.0.2.1@5353]\n  options:\n    authoritative: true", I)
t(F, "authoritative-custom-port-second-server", "- subtree: example.com\n  servers: [192.0.2.1, 192.0.2.2@5353]\n  options:\n    authoritative: true", I)
t(F, "authoritative-custom-port-object", "- subtree: example.com\n  servers:\n    - address: 192.0.2.1@5353\n  options:\n    authoritative: true", I)
t(F, "authoritative-custom-port-object-second-address", "- subtree: example.com\n  servers:\n    - address: [192.0.2.1, 192.0.2.2@5353]\n  options:\n    authoritative: true", I)
t(F, "authoritative-tls", "- subtree: example.com\n  servers:\n    - address: 192.0.2.1\n      transport: tls\n      hostname: dns.example.net\n  options:\n    authoritative: true", I)
t(F, "authoritative-tls-second-server", "- subtree: example.com\n  servers:\n    - address: 192.0.2.1\n    - address: 192.0.2.2\n      transport: tls\n      hostname: dns.example.net\n  options:\n    authoritative: true", I)
t(F, "authoritative-tls-after-plain-string", "- subtree: example.com\n  servers:\n    - 192.0.2.1\n    - address: 192.0.2.2\n      transport: tls\n      hostname: dns.example.net\n  options:\n    authoritative: true", I)
t(F, "authoritative-custom-port-not-authoritative", "- subtree: example.com\n  servers: [192.0.2.1@5353]\n  options:\n    authoritative: false", V)
t(F, "options-dnssec-false", "- subtree: example.com\n  servers: [192.0.2.1]\n  options:\n    dnssec: false", V)
t(F, "options-dnssec-string", "- subtree: example.com\n  servers: [192.0.2.1]\n  options:\n    dnssec: 'no'", I)
t(F, "options-unknown", "- subtree: example.com\n  servers: [192.0.2.1]\n  options:\n    tcp: true", I)
c(F, "empty-list", "forward: []", I)
c(F, "null", "forward: null", V)
c(F, "mapping-not-list", "forward:\n  subtree: example.com\n  servers: [192.0.2.1]", I)

# ----------------------------------------------------------------- fallback
B = "fallback"
t(B, "enable-with-servers", "enable: true\nservers: [192.0.2.1]", V)
t(B, "enable-without-servers", "enable: true", I)
t(B, "enable-with-null-servers", "enable: true\nservers: null", I)
t(B, "servers-without-enable", "servers: [192.0.2.1]", V)
t(B, "disabled", "enable: false", V)
t(B, "servers-empty", "enable: true\nservers: []", I)
t(B, "servers-objects", "enable: true\nservers:\n  - address: 192.0.2.1@853\n    transport: tls\n    hostname: dns.example.net", V)
t(B, "servers-bad-ip", "enable: true\nservers: [192.0.2]", I)
t(B, "servers-item", "enable: true\nservers: 192.0.2.1", I)
t(B, "enable-string", "enable: 'true'\nservers: [192.0.2.1]", I)
t(B, "unknown-key", "subtree: '.'", I)
c(B, "empty-mapping", "fallback: {}", V)

# ----------------------------------------------------------------- cache
K = "cache"
t(K, "storage-absolute", "storage: /var/cache/knot-resolver", V)
t(K, "storage-relative", "storage: cache", V)
t(K, "storage-int", "storage: 1", I)
for val, e in (("100M", V), ("1G", V), ("500K", V), ("1048576B", V), ("0M", V), ("100", I), ("100MB", I), ("100 M", I), ("1.5G", I), ("100m", I), ("-1M", I)):
    t(K, f"size-max-{val.replace(' ', '_').replace('.', '_')}", f"size-max: '{val}'", e)
t(K, "size-max-int", "size-max: 104857600", I)
# time units on ttl-max / ttl-min / ns-timeout
for val, e in (("1us", V), ("1ms", V), ("1s", V), ("1m", V), ("1h", V), ("1d", V), ("10", I), ("10 s", I), ("1.5s", I),
               ("10S", I), ("-1s", I), ("10sec", I), ("1w", I), ("1m30s", I), ("", I), ("s", I), (" 10s", I), ("10s ", I)):
    nm = val.strip().replace(" ", "_").replace(".", "_") or "empty"
    if val.startswith(" "):
        nm = "leading-space"
    if val.endswith(" ") and val.strip():
        nm = "trailing-space"
    t(K, f"ns-timeout-{nm}", f"ns-timeout: '{val}'", e)
t(K, "ns-timeout-int", "ns-timeout: 1000", I)
t(K, "ttl-min-lt-max", "ttl-min: 1s\nttl-max: 1h", V)
t(K, "ttl-min-eq-max", "ttl-min: 1h\nttl-max: 1h", V)
t(K, "ttl-min-eq-max-units", "ttl-min: 60m\nttl-max: 1h", V)
t(K, "ttl-min-gt-max", "ttl-min: 2h\nttl-max: 1h", I)
t(K, "ttl-min-gt-default-max", "ttl-min: 2d", I)
t(K, "ttl-max-lt-default-min", "ttl-max: 1s", I)
t(K, "ttl-min-subsecond-gt-max", "ttl-min: 1500ms\nttl-max: 1s", V)
t(K, "ttl-min-0", "ttl-min: 0s", V)
# garbage collector
G = "garbage-collector:\n  "
t(K, "gc-enable-false", G + "enable: false", V)
t(K, "gc-interval", G + "interval: 100ms", V)
t(K, "gc-interval-bad", G + "interval: 1", I)
for k in ("threshold", "release"):
    for val, e in (("0", V), ("100", V), ("101", I), ("-1", I), ("'50'", I)):
        t(K, f"gc-{k}-{val.strip(chr(39))}{'-string' if chr(39) in val else ''}", G + f"{k}: {val}", e)
t(K, "gc-temp-keys-space", G + "temp-keys-space: 1G", V)
t(K, "gc-temp-keys-space-bad", G + "temp-keys-space: 1GB", I)
for k in ("rw-deletes", "rw-reads"):
    for val, e in (("0", V), ("-1", I), ("1000000", V)):
        t(K, f"gc-{k}-{val}", G + f"{k}: {val}", e)
t(K, "gc-rw-duration", G + "rw-duration: 10us", V)
t(K, "gc-rw-delay", G + "rw-delay: 10ms", V)
t(K, "gc-rw-delay-bad", G + "rw-delay: 10", I)
t(K, "gc-dry-run", G + "dry-run: true", V)
t(K, "gc-unknown", G + "period: 1s", I)
t(K, "gc-null", "garbage-collector: null", I)
# prefill
t(K, "prefill-root", "prefill:\n  - origin: '.'\n    url: https://www.internic.net/domain/root.zone\n    refresh-interval: 12h\n    ca-file: /etc/ssl/certs/ca-certificates.crt", V)
t(K, "prefill-non-root", "prefill:\n  - origin: example.com\n    url: https://example.com/zone", I)
t(K, "prefill-root-no-quote-dot", "prefill:\n  - origin: .\n    url: https://www.internic.net/domain/root.zone", V)
t(K, "prefill-missing-url", "prefill:\n  - origin: '.'", I)
t(K, "prefill-missing-origin", "prefill:\n  - url: https://www.internic.net/domain/root.zone", I)
t(K, "prefill-bad-interval", "prefill:\n  - origin: '.'\n    url: https://www.internic.net/domain/root.zone\n    refresh-interval: 1 d", I)
t(K, "prefill-empty", "prefill: []", I)
t(K, "prefill-bad-origin", "prefill:\n  - origin: '-bad'\n    url: https://www.internic.net/domain/root.zone", I)
# prefetch
t(K, "prefetch-expiring", "prefetch:\n  expiring: true", V)
t(K, "prefetch-prediction", "prefetch:\n  prediction:\n    enable: true\n    window: 30m\n    period: 48", V)
t(K, "prefetch-prediction-period-0", "prefetch:\n  prediction:\n    period: 0", I)
t(K, "prefetch-prediction-period-1", "prefetch:\n  prediction:\n    period: 1", V)
t(K, "prefetch-prediction-window-bad", "prefetch:\n  prediction:\n    window: 15", I)
t(K, "prefetch-prediction-bool", "prefetch:\n  prediction: true", I)
t(K, "underscore-key", "size_max: 100M", I)
t(K, "unknown-key", "size: 100M", I)
c(K, "empty-mapping", "cache: {}", V)
c(K, "null", "cache: null", I)

# ----------------------------------------------------------------- dnssec
S = "dnssec"
for k in ("enable", "log-bogus", "sentinel", "signal-query"):
    t(S, f"{k}-toggle", f"{k}: {'false' if k in ('enable', 'sentinel', 'signal-query') else 'true'}", V)
    t(S, f"{k}-string", f"{k}: 'false'", I)
t(S, "trust-anchors", "trust-anchors:\n  - '. 3600 IN DS 20326 8 2 E06D44B80B8F1D39A95C0B0D7C65D08458E880409BBC683457104237C7F8EC8D'", V)
t(S, "trust-anchors-item", "trust-anchors: '. 3600 IN DS 20326 8 2 E06D44B80B8F1D39A95C0B0D7C65D08458E880409BBC683457104237C7F8EC8D'", I)
t(S, "trust-anchors-empty", "trust-anchors: []", I)
t(S, "trust-anchors-int-item", "trust-anchors: [5]", V)
t(S, "trust-anchors-files", "trust-anchors-files:\n  - file: /etc/knot-resolver/root.keys\n    read-only: true", V)
t(S, "trust-anchors-files-missing-file", "trust-anchors-files:\n  - read-only: true", I)
t(S, "trust-anchors-files-string-item", "trust-anchors-files:\n  - /etc/knot-resolver/root.keys", I)
t(S, "negative-trust-anchors", "negative-trust-anchors: [bad.boy, example.com.]", V)
t(S, "negative-trust-anchors-bad", "negative-trust-anchors: [bad..boy]", I)
t(S, "negative-trust-anchors-item", "negative-trust-anchors: bad.boy", I)
t(S, "negative-trust-anchors-root", "negative-trust-anchors: ['.']", V)
t(S, "negative-trust-anchors-idn-invalid", "negative-trust-anchors: ['xn--a.cz']", V)
t(S, "negative-trust-anchors-idn-unencodable", "negative-trust-anchors: ['a\u200db.cz']", I)
t(S, "underscore-key", "log_bogus: true", I)
t(S, "unknown-key", "validate: true", I)
c(S, "bool", "dnssec: false", I)
c(S, "empty-mapping", "dnssec: {}", V)

# ----------------------------------------------------------------- dns64
S = "dns64"
t(S, "enable", "enable: true", V)
t(S, "prefix-96", "prefix: '2001:db8:64::/96'", V)
t(S, "prefix-64", "prefix: '2001:db8:64::/64'", I)
t(S, "prefix-128", "prefix: '2001:db8:64::/128'", I)
t(S, "prefix-no-length", "prefix: '2001:db8:64::'", I)
t(S, "prefix-host-bits", "prefix: '2001:db8:64::1/96'", I)
t(S, "prefix-ipv4", "prefix: 192.0.2.0/24", I)
t(S, "prefix-int", "prefix: 96", I)
t(S, "reverse-ttl", "reverse-ttl: 1h", V)
t(S, "reverse-ttl-bad", "reverse-ttl: 3600", I)
t(S, "exclude-subnets", "exclude-subnets: ['64:ff9b::/96', '2001:db8::/32']", V)
t(S, "exclude-subnets-ipv4", "exclude-subnets: [192.0.2.0/24]", I)
t(S, "exclude-subnets-host-bits", "exclude-subnets: ['2001:db8::1/32']", I)
t(S, "exclude-subnets-empty", "exclude-subnets: []", I)
t(S, "exclude-subnets-item", "exclude-subnets: '2001:db8::/32'", I)
t(S, "enable-yes", "enable: yes", V)
t(S, "unknown-key", "prefix-length: 96", I)
c(S, "bool", "dns64: true", I)

# ----------------------------------------------------------------- logging
S = "logging"
for lv in ("crit", "err", "warning", "notice", "info", "debug"):
    t(S, f"level-{lv}", f"level: {lv}", V)
for lv in ("warn", "error", "DEBUG", "critical"):
    t(S, f"level-bad-{lv}", f"level: {lv}", I)
t(S, "level-int", "level: 7", I)
for tg in ("syslog", "stderr", "stdout", "from-arg"):
    t(S, f"target-{tg}", f"target: {tg}", V)
for tg in ("from-env", "file", "journal"):
    t(S, f"target-bad-{tg}", f"target: {tg}", I)
t(S, "groups", "groups: [manager, cache, io, tls_cl, files, policy-loader]", V)
t(S, "groups-all-processes", "groups: [manager, supervisord, policy-loader, kresd, cache-gc]", V)
t(S, "groups-manager", "groups: [files, metrics, server]", V)
t(S, "groups-kresd", "groups: [system, cache, io, net, ta, tasent, tasign, taupd, tls, gnutls, tls_cl, xdp, doh, dnssec, hint, plan, iterat, valdtr, resolv, select, zoncut, cookie, statis, rebind, worker, policy, daf, timejm, timesk, graphi, prefil, primin, srvstl, wtchdg, nsid, dnstap, tests, dotaut, http, contrl, module, devel, renum, exterr, rules, prlayr, defer, doq, ngtcp2]", V)
t(S, "groups-duplicate", "groups: [cache, io, cache]", I)
t(S, "groups-unknown", "groups: [iterator]", I)
t(S, "groups-empty", "groups: []", I)
t(S, "groups-item", "groups: cache", I)
t(S, "dnstap-enable-with-socket", "dnstap:\n  enable: true\n  unix-socket: /run/knot-resolver/dnstap.sock\n  log-queries: true\n  log-responses: true\n  log-tcp-rtt: true", V)
t(S, "dnstap-enable-without-socket", "dnstap:\n  enable: true", I)
t(S, "dnstap-socket-without-enable", "dnstap:\n  unix-socket: /run/knot-resolver/dnstap.sock", V)
t(S, "dnstap-log-queries-string", "dnstap:\n  log-queries: 'true'", I)
t(S, "dnstap-unknown", "dnstap:\n  log-all: true", I)
t(S, "underscore-key", "dnstap:\n  unix_socket: /run/knot-resolver/dnstap.sock", I)
t(S, "unknown-key", "file: /var/log/kres.log", I)

# ----------------------------------------------------------------- monitoring
S = "monitoring"
for m in ("manager-only", "lazy", "always"):
    t(S, f"metrics-{m}", f"metrics: {m}", V)
t(S, "metrics-bad", "metrics: never", I)
t(S, "metrics-bool", "metrics: true", I)
GR = "graphite:\n  "
t(S, "graphite-enable-ip", GR + "enable: true\n  host: 192.0.2.10", V)
t(S, "graphite-enable-ipv6", GR + "enable: true\n  host: '2001:db8::10'", V)
t(S, "graphite-enable-domain", GR + "enable: true\n  host: graphite.example.com", V)
t(S, "graphite-enable-no-host", GR + "enable: true", I)
t(S, "graphite-host-bad", GR + "enable: true\n  host: -graphite", I)
t(S, "graphite-host-without-enable", GR + "host: 192.0.2.10", V)
for val, e in (("1", V), ("65535", V), ("0", I), ("65536", I), ("'2003'", I)):
    t(S, f"graphite-port-{val.strip(chr(39))}{'-string' if chr(39) in val else ''}", GR + f"enable: true\n  host: 192.0.2.10\n  port: {val}", e)
t(S, "graphite-prefix", GR + "enable: true\n  host: 192.0.2.10\n  prefix: kres.node1", V)
t(S, "graphite-prefix-int", GR + "enable: true\n  host: 192.0.2.10\n  prefix: 1", V)
t(S, "graphite-interval", GR + "enable: true\n  host: 192.0.2.10\n  interval: 10s", V)
t(S, "graphite-interval-bad", GR + "enable: true\n  host: 192.0.2.10\n  interval: 10", I)
t(S, "graphite-tcp", GR + "enable: true\n  host: 192.0.2.10\n  tcp: true", V)
t(S, "graphite-unknown", GR + "enable: true\n  host: 192.0.2.10\n  protocol: tcp", I)
t(S, "unknown-key", "prometheus: true", I)

# ----------------------------------------------------------------- rate-limiting
S = "rate-limiting"
t(S, "enable-with-rate-limit", "enable: true\nrate-limit: 100", V)
t(S, "enable-without-rate-limit", "enable: true", I)
t(S, "rate-limit-without-enable", "rate-limit: 100", V)
t(S, "rate-limit-0", "rate-limit: 0", I)
t(S, "rate-limit-max-default-instant", "rate-limit: 50000", V)
t(S, "rate-limit-max-plus1-default-instant", "rate-limit: 50001", I)
t(S, "rate-limit-max-custom-instant", "instant-limit: 10\nrate-limit: 10000", V)
t(S, "rate-limit-max-plus1-custom-instant", "instant-limit: 10\nrate-limit: 10001", I)
t(S, "instant-limit-max", "instant-limit: 5592404", V)
t(S, "instant-limit-max-plus1", "instant-limit: 5592405", I)
t(S, "instant-limit-0", "instant-limit: 0", I)
t(S, "instant-limit-1", "instant-limit: 1", V)
t(S, "capacity-0", "capacity: 0", I)
t(S, "capacity-1", "capacity: 1", V)
t(S, "capacity-string", "capacity: '1000'", I)
for val, e in (("0", V), ("32", V), ("33", I), ("-1", I)):
    t(S, f"slip-{val}", f"slip: {val}", e)
t(S, "log-period", "log-period: 1m", V)
t(S, "log-period-bad", "log-period: 60", I)
t(S, "dry-run", "dry-run: true", V)
t(S, "enable-string", "enable: 'yes'\nrate-limit: 100", I)
t(S, "enable-rate-limit-null", "enable: true\nrate-limit: null", I)
t(S, "rate-limit-and-instant-both-bad", "instant-limit: 5592405\nrate-limit: 0", I)
t(S, "underscore-key", "rate_limit: 100", I)
t(S, "unknown-key", "burst: 100", I)

# ----------------------------------------------------------------- defer
S = "defer"
t(S, "enable-false", "enable: false", V)
t(S, "enable-string", "enable: 'false'", I)
for val, e in (("0s", V), ("100ms", V), ("1h", V), ("1d", V), ("10", I), ("10 s", I), ("1.5s", I), ("10S", I), ("-1s", I)):
    t(S, f"log-period-{val.replace(' ', '_').replace('.', '_')}", f"log-period: '{val}'", e)
t(S, "underscore-key", "log_period: 1s", I)
t(S, "unknown-key", "priority: 1", I)
c(S, "empty-mapping", "defer: {}", V)
c(S, "null", "defer: null", I)

# ----------------------------------------------------------------- lua
S = "lua"
t(S, "script", "script: |\n  log_info(ffi.C.LOG_GRP_DEVEL, 'hello')", V)
t(S, "script-only", "script-only: true\nscript: 'modules.load(\"stats\")'", V)
t(S, "script-only-without-script", "script-only: true", V)
t(S, "script-file", "script-file: /etc/knot-resolver/custom.lua", V)
t(S, "script-and-file", "script: 'print(1)'\nscript-file: /etc/knot-resolver/custom.lua", I)
t(S, "policy-script", "policy-script: 'policy.add(policy.all(policy.PASS))'", V)
t(S, "policy-script-file", "policy-script-file: /etc/knot-resolver/policy.lua", V)
t(S, "policy-script-and-file", "policy-script: 'x = 1'\npolicy-script-file: /etc/knot-resolver/policy.lua", I)
t(S, "policy-script-only", "policy-script-only: true", V)
t(S, "script-int", "script: 5", I)
t(S, "script-bool", "script: true", I)
t(S, "script-empty", "script: ''", V)
t(S, "script-only-string", "script-only: 'true'", I)
t(S, "script-and-policy-script", "script: 'x = 1'\npolicy-script: 'y = 2'", V)
t(S, "script-file-int", "script-file: 5", I)
t(S, "underscore-key", "script_only: true", I)
t(S, "unknown-key", "modules: [stats]", I)

# ----------------------------------------------------------------- whole-config / multi-error
S = "multi"
c(S, "three-sections-bad", """
workers: 0
cache:
  size-max: 100MB
logging:
  level: verbose
""", I)
c(S, "nested-errors-everywhere", """
network:
  tcp-pipeline: -1
  listen:
    - interface: 127.0.0.1@0
    - unix-socket: /run/knot-resolver/a.sock
      port: 53
dns64:
  prefix: '64:ff9b::/64'
rate-limiting:
  slip: 40
""", I)
c(S, "unknown-and-underscore-top-level", """
local_data:
  ttl: 1s
foo: bar
""", I)
c(S, "cross-rules-several", """
lua:
  script: a
  script-file: /x.lua
fallback:
  enable: true
cache:
  ttl-min: 2d
monitoring:
  graphite:
    enable: true
""", I)
c(S, "full-valid", """
version: 1
nsid: node1
hostname: resolver.example
rundir: /run/knot-resolver
workers: 2
management:
  interface: 127.0.0.1@5000
options:
  glue-checking: strict
  serve-stale: true
network:
  listen:
    - interface: [127.0.0.1, '::1']
      kind: dns
    - interface: eth0
      kind: dot
    - unix-socket: /run/knot-resolver/dns.sock
  tls:
    cert-file: /etc/knot-resolver/cert.pem
    key-file: /etc/knot-resolver/key.pem
views:
  - subnets: [10.0.0.0/8]
    tags: [internal]
  - subnets: [0.0.0.0/0]
    answer: refused
local-data:
  ttl: 5m
  addresses:
    router.lan: 192.168.1.1
  rules:
    - name: intranet.example
      subtree: redirect
      address: 10.0.0.1
      tags: [internal]
forward:
  - subtree: example.com
    servers: [192.0.2.1, 192.0.2.2@5353]
fallback:
  enable: true
  servers: [9.9.9.9]
cache:
  size-max: 1G
  ttl-min: 1s
  ttl-max: 1h
dnssec:
  negative-trust-anchors: [test.]
dns64:
  enable: true
logging:
  level: info
  groups: [manager]
monitoring:
  metrics: always
rate-limiting:
  enable: true
  rate-limit: 200
defer:
  enable: false
lua:
  script: 'x = 1'
""", V)
c(S, "top-level-null-values", """
nsid: null
views: null
forward: null
""", V)

# ----------------------------------------------------------------- YAML-level
S = "yaml"
c(S, "empty-file", "", I, raw=True)
c(S, "whitespace-only", "\n\n   \n", I, raw=True)
c(S, "comment-only", "# nothing here\n", I, raw=True)
c(S, "explicit-null-document", "~\n", I, raw=True)
c(S, "empty-mapping", "{}\n", V, raw=True)
c(S, "top-level-list", "- workers: 1\n", I)
c(S, "top-level-scalar", "workers\n", I)
c(S, "top-level-int", "42\n", I)
c(S, "duplicate-top-level-key", "workers: 1\nworkers: 2\n", I)
c(S, "duplicate-nested-key", "cache:\n  size-max: 100M\n  size-max: 200M\n", I)
c(S, "duplicate-key-dash-and-underscore-nested", "cache:\n  size-max: 100M\n  size_max: 200M\n", I)
c(S, "misplaced-nested-key-at-top-level", "cache:\n  storage: /var/cache/knot-resolver\nsize-max: 200M\n", I)
c(S, "duplicate-key-quoted-and-plain", "cache:\n  size-max: 100M\n  \"size-max\": 200M\n", I)
c(S, "duplicate-section-via-underscore", "local-data:\n  ttl: 1s\nlocal_data:\n  ttl: 2s\n", I)
c(S, "anchor-alias", """
forward:
  - subtree: a.example
    servers: &srv [192.0.2.1, 192.0.2.2]
  - subtree: b.example
    servers: *srv
""", V)
c(S, "anchor-alias-mapping", """
views:
  - &v
    subnets: [10.0.0.0/8]
    answer: allow
  - *v
""", V)
c(S, "merge-key", """
x-defaults: &defaults
  authoritative: false
forward:
  - subtree: example.com
    servers: [192.0.2.1]
    options:
      <<: *defaults
      dnssec: false
""", I)
c(S, "merge-key-only", """
forward:
  - subtree: example.com
    servers: [192.0.2.1]
    options:
      <<: {dnssec: false}
""", I)
c(S, "undefined-alias", "workers: *nope\n", I)
c(S, "tab-indentation", "cache:\n\tsize-max: 100M\n", I, raw=True)
c(S, "tab-after-value", "workers: 1\t\n", V, raw=True)
c(S, "tab-in-flow", "forward:\n  - {subtree: example.com,\tservers: [192.0.2.1]}\n", V, raw=True)
c(S, "invalid-yaml-unclosed-bracket", "workers: [1\n", I)
c(S, "invalid-yaml-bad-indent", "cache:\n  size-max: 100M\n    ttl-min: 1s\n", I)
c(S, "invalid-yaml-colon-in-plain", "workers: a: b\n", I)
c(S, "multi-document", "workers: 1\n---\nworkers: 2\n", I)
c(S, "single-document-with-markers", "---\nworkers: 1\n...\n", V)
c(S, "flow-mapping", "{workers: 1, cache: {size-max: 100M}}\n", V)
c(S, "yaml11-octal", "workers: 010\n", V)
c(S, "yaml11-sexagesimal", "workers: 1:30\n", I)
c(S, "yaml11-bool-off", "options:\n  priming: off\n", V)
c(S, "yaml11-bool-y", "options:\n  priming: y\n", I)
c(S, "yaml-tag-str", "workers: !!str 1\n", I)
c(S, "yaml-tag-int", "version: !!int '1'\n", V)
c(S, "yaml-null-tilde-key", "~: 1\n", I)
c(S, "yaml-int-key", "1: 1\n", I)
c(S, "yaml-hex-int", "workers: 0x2\n", V)
c(S, "yaml-underscore-int", "workers: 1_0\n", V)
c(S, "utf8-bom", "\ufeffworkers: 1\n", V, raw=True)
c(S, "crlf-line-endings", "workers: 1\r\ncache:\r\n  size-max: 100M\r\n", V, raw=True)
c(S, "json-valid", '{"workers": 1, "cache": {"size-max": "100M"}}\n', V, ext="json")
c(S, "json-invalid-value", '{"workers": 0}\n', I, ext="json")
c(S, "json-duplicate-key", '{"workers": 1, "workers": 2}\n', I, ext="json")
c(S, "json-nested-duplicate-key", '{"cache": {"size-max": "1M", "size-max": "2M"}}\n', I, ext="json")
c(S, "json-trailing-comma", '{"workers": 1,}\n', V, ext="json")
c(S, "json-array", '[{"workers": 1}]\n', I, ext="json")
c(S, "json-bool-string", '{"options": {"minimize": "true"}}\n', I, ext="json")
c(S, "json-empty-object", "{}\n", V, ext="json")
c(S, "json-null", "null\n", I, ext="json")
c(S, "json-with-comment", '// comment\n{"workers": 1}\n', I, ext="json")
c(S, "json-nan", '{"views": [{"subnets": ["0.0.0.0/0"], "answer": "allow", "options": {"price-factor": NaN}}]}\n', I, ext="json")
c(S, "json-float-int", '{"workers": 1.0}\n', I, ext="json")

# ----------------------------------------------------------------- round 2: probes of quirks seen while labelling
S = "multi"
c(S, "top-level-unknown-key", "foo: bar", I)
c(S, "top-level-capitalised-key", "Workers: 1", I)
c(S, "two-unknown-keys-same-level", "cache:\n  size: 1M\n  ttl: 1s", I)  # key order in the message is Python set order
c(S, "top-level-underscore-rate-limiting", "rate_limiting:\n  enable: false", I)
c(S, "top-level-underscore-local-data-alone", "local_data:\n  ttl: 1s", I)
c(S, "top-level-dash-and-underscore-conflicting", "rate-limiting:\n  enable: true\n  rate-limit: 100\nrate_limiting:\n  enable: true", I)
c(S, "two-listen-items-two-errors", "network:\n  listen:\n    - interface: 127.0.0.1@53\n      port: 53\n    - interface: 127.0.0.1\n      port: 0", I)
c(S, "errors-in-three-list-items", "views:\n  - subnets: [bad]\n    answer: allow\n  - subnets: [10.0.0.0/8]\n    answer: nope\n  - subnets: [10.0.0.0/8]", I)
c(S, "rules-tags-index-skips-untagged", """
views:
  - subnets: [10.0.0.0/8]
    tags: [t1]
local-data:
  rules:
    - name: a.example
      address: 192.0.2.1
    - name: b.example
      address: 192.0.2.2
    - name: c.example
      address: 192.0.2.3
      tags: [t1, zz]
""", I)
c(S, "rpz-second-bad-tags", """
views:
  - subnets: [10.0.0.0/8]
    tags: [t1]
local-data:
  rpz:
    - file: /a.rpz
      tags: [t1]
    - file: /b.rpz
      tags: [t2]
""", I)
c(S, "tags-unused-only-in-views-no-local-data", """
views:
  - subnets: [10.0.0.0/8]
    tags: [t1]
""", V)
S = "forward"
t(S, "authoritative-port-53-then-custom", "- subtree: example.com\n  servers: [192.0.2.1@53, 192.0.2.2@5353]\n  options:\n    authoritative: true", V)
t(S, "authoritative-object-port-53-then-custom-string", "- subtree: example.com\n  servers:\n    - address: 192.0.2.1@53\n    - 192.0.2.2@5353\n  options:\n    authoritative: true", V)
t(S, "authoritative-plain-object-then-tls", "- subtree: example.com\n  servers:\n    - address: 192.0.2.1@53\n    - address: 192.0.2.2\n      transport: tls\n  options:\n    authoritative: true", V)
t(S, "server-scoped-ipv6", "- subtree: example.com\n  servers: ['fe80::1%eth0']", V)
t(S, "server-scoped-ipv6-port", "- subtree: example.com\n  servers: ['fe80::1%eth0@53']", V)
t(S, "subtree-emoji-idn", "- subtree: '☃.example'\n  servers: [192.0.2.1]", V)
t(S, "subtree-idn-uppercase", "- subtree: PŘÍKLAD.cz\n  servers: [192.0.2.1]", V)
t(S, "subtree-dollar", "- subtree: 'exa$mple.com'\n  servers: [192.0.2.1]", V)
t(S, "subtree-numeric-label", "- subtree: 10.in-addr.arpa\n  servers: [192.0.2.1]", V)
t(S, "subtree-single-label-63", "- subtree: " + "a" * 63 + "\n  servers: [192.0.2.1]", V)
t(S, "subtree-single-label-64", "- subtree: " + "a" * 64 + "\n  servers: [192.0.2.1]", I)
t(S, "subtree-idn-label-too-long-after-punycode", "- subtree: " + "ř" * 40 + ".cz\n  servers: [192.0.2.1]", I)
t(S, "subtree-float", "- subtree: 1.5\n  servers: [192.0.2.1]", I)
t(S, "pin-sha256-not-tls-hostname-null", f"- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      pin-sha256: {PIN}\n      hostname: null", V)
S = "local-data"
t(S, "addresses-key-dash", "addresses:\n  my-host.example: 192.0.2.1", V)
t(S, "addresses-key-underscore", "addresses:\n  my_host.example: 192.0.2.1", V)
t(S, "addresses-keys-dash-and-underscore-collide", "addresses:\n  a-b.example: 192.0.2.1\n  a_b.example: 192.0.2.2", V)
t(S, "addresses-bad-key-with-dashes", "addresses:\n  -bad-host.example: 192.0.2.1", I)
t(S, "addresses-scoped-ipv6", "addresses:\n  a.example: 'fe80::1%eth0'", V)
t(S, "rule-tags-empty", "rules:\n  - name: example.com\n    address: 192.0.2.1\n    tags: []", I)
t(S, "rule-records-with-subtree", "rules:\n  - records: 'example.com. 300 A 192.0.2.1'\n    subtree: empty", I)
t(S, "rule-file-with-subtree", "rules:\n  - file: /etc/hosts\n    subtree: empty", I)
t(S, "rule-address-subtree-empty-nodata", "rules:\n  - name: example.com\n    subtree: empty\n    address: 192.0.2.1\n    nodata: false", V)
S = "network"
t(S, "listen-interface-any-v4", "listen:\n  - interface: 0.0.0.0", V)
t(S, "listen-interface-any-v6", "listen:\n  - interface: '::'", V)
t(S, "listen-interface-scoped-ipv6", "listen:\n  - interface: 'fe80::1%eth0'", V)
t(S, "listen-interface-scoped-ipv6-port", "listen:\n  - interface: 'fe80::1%eth0@53'", V)
t(S, "listen-interface-ifname-long", "listen:\n  - interface: averyveryverylonginterfacename0", V)
t(S, "listen-interface-ifname-trailing-underscore", "listen:\n  - interface: eth0_", I)
t(S, "listen-port-with-interface-list", "listen:\n  - interface: [127.0.0.1, '::1']\n    port: 5353", V)
t(S, "listen-kind-xdp-ifname", "listen:\n  - interface: eth0\n    kind: xdp", V)
t(S, "listen-unix-socket-empty-list", "listen:\n  - unix-socket: []", I)
t(S, "listen-unix-socket-int", "listen:\n  - unix-socket: 5", I)
t(S, "tls-padding-float", "tls:\n  padding: 1.5", I)
t(S, "tls-sticket-secret-with-quotes", "tls:\n  sticket-secret: \"abc'def\\\"ghijklmnopqrstuvwxyz0123456\"", V)
S = "management"
t(S, "interface-scoped-ipv6", "interface: 'fe80::1%eth0@5000'", V)
t(S, "interface-any", "interface: 0.0.0.0@5000", V)
S = "cache"
t(S, "ns-timeout-leading-zeros", "ns-timeout: 010s", V)
t(S, "ns-timeout-huge", "ns-timeout: 99999999999999999999d", V)
t(S, "ttl-max-huge-vs-min", "ttl-min: 99999999999999999999d", I)
t(S, "size-max-huge", "size-max: 99999999999999G", V)
t(S, "size-max-unicode-digits", "size-max: '١٠٠M'", V)
t(S, "ns-timeout-unicode-digits", "ns-timeout: '١s'", V)
S = "views"
t(S, "price-factor-huge-int", "- subnets: [0.0.0.0/0]\n  answer: allow\n  options:\n    price-factor: 100000000000000000000", I)
t(S, "subnets-ipv6-host-bits", "- subnets: ['2001:db8::1/32']\n  answer: allow", I)
t(S, "subnets-scoped-ipv6", "- subnets: ['fe80::%eth0/64']\n  answer: allow", V)
S = "lua"
t(S, "script-float", "script: 1.5", I)
t(S, "script-list", "script: [a]", I)
t(S, "policy-script-int", "policy-script: 5", V)
S = "monitoring"
t(S, "graphite-host-idn", "graphite:\n  enable: true\n  host: příklad.cz", V)
t(S, "graphite-host-trailing-dot", "graphite:\n  enable: true\n  host: graphite.example.", V)
t(S, "graphite-host-int", "graphite:\n  enable: true\n  host: 5", V)
S = "rate-limiting"
t(S, "rate-limit-max-with-max-instant", "instant-limit: 5592404\nrate-limit: 5592404000", V)
t(S, "rate-limit-over-max-with-max-instant", "instant-limit: 5592404\nrate-limit: 5592404001", I)
t(S, "enable-false-rate-limit-over", "enable: false\nrate-limit: 60000", I)
S = "dns64"
t(S, "prefix-all-zero-96", "prefix: '::/96'", V)
t(S, "prefix-ipv4-mapped", "prefix: '::ffff:0:0/96'", V)
S = "yaml"
c(S, "json-infinity", '{"views": [{"subnets": ["0.0.0.0/0"], "answer": "allow", "options": {"price-factor": Infinity}}]}\n', I, ext="json")
c(S, "json-negative-zero", '{"views": [{"subnets": ["0.0.0.0/0"], "answer": "allow", "options": {"price-factor": -0.0}}]}\n', V, ext="json")
c(S, "yaml-nan", "views:\n  - subnets: [0.0.0.0/0]\n    answer: allow\n    options:\n      price-factor: .nan\n", V)
c(S, "yaml-inf", "views:\n  - subnets: [0.0.0.0/0]\n    answer: allow\n    options:\n      price-factor: .inf\n", I)
c(S, "json-big-exponent-int", '{"workers": 1e0}\n', I, ext="json")
c(S, "json-top-level-string", '"workers"\n', I, ext="json")
c(S, "json-unicode-escape-key", '{"work\\u0065rs": 1}\n', V, ext="json")
c(S, "yaml-explicit-key", "? workers\n: 1\n", V)
c(S, "yaml-complex-key", "? [a, b]\n: 1\n", I)
c(S, "yaml-binary-tag", "nsid: !!binary aGVsbG8=\n", I)
c(S, "yaml-timestamp", "nsid: 2001-12-14\n", I)
c(S, "yaml-set-tag", "nsid: !!set {a}\n", I)
c(S, "yaml-python-tag", "nsid: !!python/str abc\n", I)
c(S, "yaml-custom-tag", "nsid: !foo abc\n", I)
c(S, "yaml-literal-block-nsid", "nsid: |\n  line1\n  line2\n", V)
c(S, "yaml-folded-block-nsid", "nsid: >\n  line1\n  line2\n", V)
c(S, "yaml-anchor-on-key", "&k workers: 1\n", V)
c(S, "latin1-bytes", b"nsid: caf\xe9\n", None, raw=True)
c(S, "yaml-null-key-in-section", "cache:\n  ~: 1\n", I)
c(S, "yaml-bool-key-in-section", "options:\n  true: 1\n", I)

# ----------------------------------------------------------------- round 3: trailing newline vs Python's `$`
t("cache", "ns-timeout-trailing-newline", 'ns-timeout: "10s\\n"', I)
t("cache", "size-max-trailing-newline", 'size-max: "100M\\n"', I)
t("views", "tag-trailing-newline", '- subnets: [10.0.0.0/8]\n  tags: ["t1\\n"]', I)
t("network", "listen-interface-ifname-trailing-newline", 'listen:\n  - interface: "eth0\\n"', I)
t("forward", "server-object-pin-trailing-newline", f"- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      transport: tls\n      pin-sha256: \"{PIN}\\n\"", I)
t("forward", "subtree-trailing-newline", '- subtree: "example.com\\n"\n  servers: [192.0.2.1]', I)
t("management", "interface-port-trailing-newline", 'interface: "127.0.0.1@5000\\n"', I)
t("management", "interface-port-leading-plus", "interface: 127.0.0.1@+5000", I)
t("management", "interface-port-leading-zero", "interface: 127.0.0.1@05000", V)

# ----------------------------------------------------------------- round 4: port numbers go through Python int()
t("management", "interface-port-inner-space", "interface: '127.0.0.1@ 5000'", I)
t("management", "interface-port-underscore", "interface: 127.0.0.1@5_000", I)
t("management", "interface-port-unicode-digits", "interface: '127.0.0.1@٥٠٠٠'", I)
t("network", "listen-interface-port-underscore", "listen:\n  - interface: 127.0.0.1@5_353", I)
t("network", "listen-interface-port-plus", "listen:\n  - interface: 127.0.0.1@+53", I)
t("forward", "server-port-underscore", "- subtree: example.com\n  servers: [192.0.2.1@5_353]", I)
t("forward", "server-port-trailing-space", "- subtree: example.com\n  servers: ['192.0.2.1@53 ']", I)

# ----------------------------------------------------------------- round 5: nulls/wrong shapes per section, leftovers, upstream example configs
for sec in ("network", "local-data", "fallback", "logging", "monitoring", "rate-limiting", "lua", "dns64", "management"):
    c(sec, "section-null", f"{sec}: null", I)
    c(sec, "section-list", f"{sec}: []", I)
    c(sec, "section-string", f"{sec}: 'yes'", I)
t("dnssec", "trust-anchors-files-read-only-string", "trust-anchors-files:\n  - file: /etc/knot-resolver/root.keys\n    read-only: 'yes'", I)
t("dnssec", "trust-anchors-files-unknown-key", "trust-anchors-files:\n  - file: /etc/knot-resolver/root.keys\n    readonly: true", I)
t("dnssec", "negative-trust-anchors-empty", "negative-trust-anchors: []", I)
t("logging", "dnstap-log-responses-string", "dnstap:\n  log-responses: 'no'", I)
t("logging", "dnstap-log-tcp-rtt-yes", "dnstap:\n  log-tcp-rtt: yes", V)
t("logging", "dnstap-unix-socket-int", "dnstap:\n  unix-socket: 5", I)
t("logging", "groups-with-null", "groups: [cache, null]", I)
t("local-data", "rpz-tags-bad-pattern", "rpz:\n  - file: /etc/knot-resolver/blocklist.rpz\n    tags: [Bad]", I)
t("local-data", "rpz-unknown-key", "rpz:\n  - file: /etc/knot-resolver/blocklist.rpz\n    action: deny", I)
t("local-data", "addresses-files-int-item", "addresses-files: [5]", I)
t("local-data", "ttl-int", "ttl: 60", I)
t("forward", "server-object-hostname-idn", "- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      transport: tls\n      hostname: dns.příklad.cz", V)
t("forward", "server-object-ca-file-int", "- subtree: '.'\n  servers:\n    - address: 192.0.2.1\n      transport: tls\n      ca-file: 5", I)
t("forward", "server-object-address-empty-list", "- subtree: '.'\n  servers:\n    - address: []", I)
t("network", "edns-buffer-size-downstream-bad", "edns-buffer-size:\n  downstream: 1232 B", I)
t("network", "proxy-protocol-enable-string", "proxy-protocol:\n  enable: 'true'", I)
t("network", "proxy-protocol-unknown-key", "proxy-protocol:\n  allowed: [127.0.0.1]", I)
t("network", "quic-unknown-key", "quic:\n  max-connections: 10", I)
t("network", "tls-cert-file-int", "tls:\n  cert-file: 5\n  key-file: /etc/knot-resolver/server-key.pem", I)
t("network", "address-renumbering-dest-ipv6-em", "address-renumbering:\n  - source: '2001:db8::/32'\n    destination: '2001:db9::!'", V)
t("cache", "prefill-url-int", "prefill:\n  - origin: '.'\n    url: 5", V)
t("cache", "prefill-unknown-key", "prefill:\n  - origin: '.'\n    url: https://www.internic.net/domain/root.zone\n    interval: 1d", I)
t("cache", "prefetch-unknown-key", "prefetch:\n  expire: true", I)
t("cache", "gc-threshold-float", "garbage-collector:\n  threshold: 50.0", I)
t("monitoring", "graphite-null", "graphite: null", I)
t("monitoring", "graphite-enable-string", "graphite:\n  enable: 'true'\n  host: 192.0.2.10", I)
t("monitoring", "graphite-tcp-string", "graphite:\n  host: 192.0.2.10\n  tcp: 'yes'", I)
t("views", "options-null", "- subnets: [0.0.0.0/0]\n  answer: allow\n  options: null", I)
t("views", "item-null", "- null", I)
t("defer", "log-period-int", "log-period: 0", I)
t("rate-limiting", "rate-limit-string", "rate-limit: '100'", I)
t("rate-limiting", "dry-run-string", "dry-run: 'false'", I)
t("rate-limiting", "log-period-0s", "log-period: 0s", V)
for fn in sorted(os.listdir("/work/shared/reference/configs")) if os.path.isdir("/work/shared/reference/configs") else []:
    with open(os.path.join("/work/shared/reference/configs", fn), encoding="utf-8") as f:
        c("examples", fn[:-5] if fn.endswith(".yaml") else fn, f.read(), None, raw=True)


def main():
    if os.path.isdir(CASES):
        shutil.rmtree(CASES)
    counters = {}
    expectations = {}
    seen = set()
    for section, name, ext, text, exp in cases:
        n = counters.get(section, 0) + 1
        counters[section] = n
        rel = f"cases/{section}/{n:03d}-{name}.{ext}"
        assert rel not in seen, rel
        seen.add(rel)
        p = os.path.join(HERE, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        if isinstance(text, bytes):
            with open(p, "wb") as f:
                f.write(text)
        else:
            with open(p, "w", encoding="utf-8", newline="") as f:
                f.write(text)
        expectations[rel] = exp
    with open(os.path.join(HERE, "author-expectations.json"), "w") as f:
        json.dump(expectations, f, indent=1, sort_keys=True)
    print(f"{len(cases)} cases written", file=sys.stderr)


if __name__ == "__main__":
    main()
