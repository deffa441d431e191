//! Table-driven tests of types, type strictness and cross-field rules. Every expectation was checked
//! against upstream's validator (`kresctl validate`, Knot Resolver 6.5.0); where upstream reports a
//! value inside a list-or-item as `/` (its own bug), we report the real JSON pointer instead.

use std::path::PathBuf;

use kres_config::{parse_document, validate, KresConfig, ValidationContext, ValidationErrors};

fn ctx() -> ValidationContext {
    ValidationContext {
        resolve_root: PathBuf::from("/etc/knot-resolver"),
        checks: kres_config::PathChecks::Lenient,
        logtarget_arg: Default::default(),
    }
}

fn run(yaml: &str) -> Result<KresConfig, ValidationErrors> {
    let raw =
        parse_document(yaml, std::path::Path::new("test.yaml")).expect("test documents parse");
    validate(&raw, &ctx())
}

/// `Ok` for a valid document, or the expected `(path, message)` of every top-level error.
type Expected<'a> = Result<(), &'a [(&'a str, &'a str)]>;

#[track_caller]
fn check(yaml: &str, expected: Expected<'_>) {
    let got = run(yaml);
    match (got, expected) {
        (Ok(_), Ok(())) => {}
        (Err(e), Ok(())) => panic!("expected valid:\n{yaml}\ngot:\n{e}"),
        (Ok(_), Err(want)) => panic!("expected errors {want:?}:\n{yaml}"),
        (Err(e), Err(want)) => {
            let got: Vec<(String, String)> =
                e.0.iter()
                    .map(|e| (e.path.clone(), e.message.clone()))
                    .collect();
            let want: Vec<(String, String)> = want
                .iter()
                .map(|(p, m)| ((*p).to_owned(), (*m).to_owned()))
                .collect();
            assert_eq!(got, want, "for:\n{yaml}\nfull output:\n{e}");
        }
    }
}

const DOMAIN_PATTERN: &str =
    r"'(?=^.{,253}\.?$)(^(?!-)[^.]{,62}[^.-](\.(?!-)[^.]{,62}[^.-])*\.?$)|^\.$' pattern";

#[test]
fn valid_documents() {
    let cases = [
        "",
        "workers: auto",
        "workers: 20",
        "version: 2",
        "nsid: 123",
        "lua:\n  script: 1.5",
        "forward:\n  - subtree: příklad.cz\n    servers: [1.1.1.1]",
        "forward:\n  - subtree: _sip._tcp.example\n    servers: [1.1.1.1]",
        "forward:\n  - subtree: 123\n    servers: [1.1.1.1]",
        "forward:\n  - subtree: 'a b.c'\n    servers: [1.1.1.1]",
        "forward:\n  - subtree: '.'\n    servers: [1.1.1.1]",
        "views:\n  - subnets: [10.0.0.0/255.0.0.0]\n    answer: allow",
        "views:\n  - subnets: [10.0.0.0/0.255.255.255]\n    answer: allow",
        "views:\n  - subnets: [10.0.0.0/08]\n    answer: allow",
        "network:\n  listen:\n    - interface: '127.0.0.1@ 53'",
        "network:\n  listen:\n    - interface: '127.0.0.1@+53'",
        "network:\n  listen:\n    - interface: '127.0.0.1@5_3'",
        "network:\n  listen:\n    - interface: en-p_1",
        "network:\n  listen:\n    - interface: 'fe80::1%eth0'",
        "network:\n  out-interface-v6: 'fe80::1%eth0'",
        "network:\n  tls:\n    sticket-secret: '12345678901234567890123456789012'",
        "cache:\n  size-max: 0B",
        "cache:\n  ttl-min: 1500ms\n  ttl-max: 1s",
        "network:\n  address-renumbering:\n    - source: 10.0.0.0/8\n      destination: '1.2.3.4!'",
        "local-data:\n  rules:\n    - records: 'a.cz. 3600 A 1.2.3.4'",
        "local-data:\n  addresses:\n    a.cz: 1.2.3.4\n    b.cz: [1.2.3.4, '::1']",
        "forward:\n  - subtree: a.cz\n    servers: [1.1.1.1@53, 2.2.2.2@5353]\n    options:\n      authoritative: true",
        "monitoring:\n  graphite:\n    enable: true\n    host: 127.0.0.1",
        "monitoring:\n  graphite:\n    enable: true\n    host: graphite.example.com",
        "logging:\n  target: syslog",
        "management:\n  interface: '::1@5000'",
        "network:\n  listen:\n    - unix-socket: [/tmp/a.sock, /tmp/b.sock]\n    - interface: [eth0, lo]\n      kind: dot",
        "network:\n  tcp-pipeline: 0x10\n  do-ipv4: off",
        "network:\n  tcp-pipeline: 1:30",
        "nsid: 1e5",
        r#"{"workers": 2, "cache": {"size-max": "10M"}}"#,
    ];
    for yaml in cases {
        check(yaml, Ok(()));
    }
}

#[test]
fn type_strictness() {
    check(
        "workers: \"2\"",
        Err(&[("/workers", "could not parse any of the possible variants")]),
    );
    let e = run("workers: true").expect_err("bool is not an int");
    let causes: Vec<&str> = e.0[0].causes.iter().map(|c| c.message.as_str()).collect();
    assert_eq!(
        causes,
        [
            "'True' does not match any of the expected values ('auto',)",
            "Unexpected value for '<class 'knot_resolver.datamodel.types.types.IntPositive'>'. Expected integer, got 'True' with type '<class 'bool'>'",
        ]
    );
    check(
        "version: \"1\"",
        Err(&[("/version", "expected int, found <class 'str'>")]),
    );
    check(
        "dnssec:\n  enable: 1",
        Err(&[("/dnssec/enable", "expected bool, found <class 'int'>")]),
    );
    check(
        "nsid: yes",
        Err(&[(
            "/nsid",
            "Unexpected value for '<class 'knot_resolver.datamodel.types.types.EscapedStr'>'. Expected string, got 'True' with type '<class 'bool'>'",
        )]),
    );
    check(
        "lua:\n  script: true",
        Err(&[(
            "/lua/script",
            "Expected str, found bool. Be careful, that YAML parsers consider even \"no\" and \"yes\" as a bool. Search for the Norway Problem for more details. And please use quotes explicitly.",
        )]),
    );
    check(
        "lua:\n  script: [a]",
        Err(&[(
            "/lua/script",
            "expected str (or number that would be cast to string), but found type <class 'knot_resolver.utils.modeling.renaming.RenamedList'>",
        )]),
    );
    check(
        "nsid: 1.5",
        Err(&[(
            "/nsid",
            "Unexpected value for '<class 'knot_resolver.datamodel.types.types.EscapedStr'>'. Expected string, got '1.5' with type '<class 'float'>'",
        )]),
    );
    check(
        "network:\n  tcp-pipeline: 5.0",
        Err(&[(
            "/network/tcp-pipeline",
            "Unexpected value for '<class 'knot_resolver.datamodel.types.types.Int0_65535'>'. Expected integer, got '5.0' with type '<class 'float'>'",
        )]),
    );
    check(
        "network:\n  listen: []",
        Err(&[("/network/listen", "empty list is not allowed")]),
    );
    check(
        "network:\n  listen: 5",
        Err(&[("/network/listen", "'int' object is not iterable")]),
    );
    check(
        "network:\n  listen:\n    interface: 127.0.0.1",
        Err(&[(
            "/network/listen/0",
            "expected 'dict' or 'NoRenameBaseSchema' object, found '<class 'str'>'",
        )]),
    );
    check(
        "cache: null",
        Err(&[("/cache", "unexpected value 'None' for type <class 'knot_resolver.datamodel.cache_schema.CacheSchema'>")]),
    );
    check(
        "dnssec:\n  trust-anchors: [null]",
        Err(&[(
            "/dnssec/trust-anchors/0",
            "unexpected value 'None' for type <class 'knot_resolver.datamodel.types.types.EscapedStr'>",
        )]),
    );
    check(
        "network:\n  listen:\n    - interface: 127.0.0.1\n      kind: http",
        Err(&[(
            "/network/listen/0/kind",
            "'http' does not match any of the expected values ('dns', 'xdp', 'dot', 'doh-legacy', 'doh2', 'doh2-insecure', 'doq')",
        )]),
    );
    check(
        "network:\n  do_ipv4: true\n  bogus: 1",
        Err(&[("/network", "unexpected extra key(s) 'bogus', 'do_ipv4'")]),
    );
    check(
        "views:\n  - answer: allow",
        Err(&[("/views/0", "missing attribute 'subnets'.")]),
    );
    check(
        "- a\n- b",
        Err(&[("", "expected dict-like object, found '<class 'knot_resolver.utils.modeling.renaming.RenamedList'>'")]),
    );
    check(
        "foo: 1\nbar: 2",
        Err(&[("", "unexpected extra key(s) 'bar', 'foo'")]),
    );
    assert_eq!(
        run("foo: 1").expect_err("unknown key").to_string(),
        "Configuration validation error detected:\n\t[] unexpected extra key(s) 'foo'"
    );
    check(
        "views:\n  - subnets: 10.0.0.0/8\n    answer: allow",
        Err(&[("/views/0/subnets", "expected list, got string")]),
    );
    check(
        "network:\n  out-interface-v4: 5",
        Err(&[(
            "/network/out-interface-v4",
            "Unexpected value for a IPv4 address. Expected string, got '5' with type '<class 'int'>'",
        )]),
    );
    check(
        "network:\n  out-interface-v4: 01.2.3.4",
        Err(&[("/network/out-interface-v4", "failed to parse IPv4 address.")]),
    );
}

#[test]
fn custom_types() {
    check(
        "cache:\n  size-max: 10X",
        Err(&[(
            "/cache/size-max",
            "Unexpected value for '<class 'knot_resolver.datamodel.types.types.SizeUnit'>'. Expected string that matches pattern '^(\\d+)(B|K|M|G)$'. Positive integer and one of the units ['B', 'K', 'M', 'G'], got '10X'.",
        )]),
    );
    check(
        "cache:\n  size-max: 1024b",
        Err(&[(
            "/cache/size-max",
            "Unexpected value for '<class 'knot_resolver.datamodel.types.types.SizeUnit'>'. Expected string that matches pattern '^(\\d+)(B|K|M|G)$'. Positive integer and one of the units ['B', 'K', 'M', 'G'], got '1024b'.",
        )]),
    );
    check(
        "cache:\n  ttl-min: 5",
        Err(&[(
            "/cache/ttl-min",
            "Unexpected value for '<class 'knot_resolver.datamodel.types.types.TimeUnit'>'. Expected string that matches pattern '^(\\d+)(us|ms|s|m|h|d)$'. Positive integer and one of the units ['us', 'ms', 's', 'm', 'h', 'd'], got '5'.",
        )]),
    );
    check(
        "network:\n  tls:\n    padding: 600",
        Err(&[(
            "/network/tls/padding",
            "could not parse any of the possible variants",
        )]),
    );
    check(
        "network:\n  tls:\n    sticket-secret: short",
        Err(&[(
            "/network/tls/sticket-secret",
            "the string value short is shorter than the minimum 32 bytes.",
        )]),
    );
    check(
        "dns64:\n  prefix: 64:ff9b::/64",
        Err(&[(
            "/dns64/prefix",
            "expected IPv6 network address with /96 prefix length. Got prefix lenght of 64",
        )]),
    );
    check(
        "dns64:\n  prefix: '64:ff9b::'",
        Err(&[("/dns64/prefix", "Expected IPv6 network address with /96 prefix length. Submitted address has been interpreted as /128. Maybe, you forgot to add /96 after the base address?")]),
    );
    for net in ["10.0.0.1/8", "'::1/129'", "10.0.0.0/33"] {
        let yaml = format!("views:\n  - subnets: [{net}]\n    answer: allow");
        check(
            &yaml,
            Err(&[("/views/0/subnets/0", "failed to parse IP network.")]),
        );
    }
    check(
        "views:\n  - subnets: [10.0.0.0/8]\n    answer: allow\n    options:\n      price-factor: -1",
        Err(&[("/views/0/options/price-factor", "value -1.0 is lower than the minimum 0.0.")]),
    );
    check(
        "management:\n  interface: eth0@5000",
        Err(&[(
            "/management/interface",
            "failed to parse IP address 'eth0'.",
        )]),
    );
    check(
        "network:\n  address-renumbering:\n    - source: 10.0.0.0/8\n      destination: '1.2.3.4!!'",
        Err(&[("/network/address-renumbering/0/destination", "could not parse any of the possible variants")]),
    );
    let e =
        run("network:\n  address-renumbering:\n    - source: 10.0.0.0/8\n      destination: bad")
            .expect_err("bad");
    let causes: Vec<&str> = e.0[0].causes.iter().map(|c| c.message.as_str()).collect();
    assert_eq!(
        causes,
        [
            "string does not end with '!'.",
            "failed to parse IPv4 address.",
            "failed to parse IPv6 address."
        ]
    );
}

#[test]
fn list_or_item_values() {
    let cases: &[(&str, &str)] = &[
        (
            "'foo bar'",
            "expected IP address or interface name, got 'foo bar'.",
        ),
        (
            "a@b@c",
            "expected '<ip-address|interface-name>[@<port>]', got '['a', 'b', 'c']'.",
        ),
        ("127.0.0.1@abc", "invalid port number abc"),
        ("127.0.0.1@0", "invalid port number 0"),
        ("127.0.0.1@65536", "invalid port number 65536"),
        (
            "eth0.100",
            "expected IP address or interface name, got 'eth0.100'.",
        ),
    ];
    for (iface, message) in cases {
        let yaml = format!("network:\n  listen:\n    - interface: {iface}");
        let e = run(&yaml).expect_err("invalid interface");
        assert_eq!(e.0.len(), 1);
        assert_eq!(e.0[0].path, "/network/listen/0/interface");
        assert_eq!(
            e.0[0].message,
            "could not parse any of the possible variants"
        );
        let causes: Vec<&str> = e.0[0].causes.iter().map(|c| c.message.as_str()).collect();
        assert_eq!(causes, ["expected list, got string", *message], "{iface}");
    }
    let domain_cases: &[(&str, String)] = &[
        ("-bad.example", format!("'-bad.example' represented in punycode '-bad.example' does not match {DOMAIN_PATTERN}")),
        ("x-.cz", format!("'x-.cz' represented in punycode 'x-.cz' does not match {DOMAIN_PATTERN}")),
        ("'a..b'", "conversion of 'a..b' to IDN punycode representation failed".to_owned()),
    ];
    for (subtree, message) in domain_cases {
        let yaml = format!("forward:\n  - subtree: {subtree}\n    servers: [1.1.1.1]");
        let e = run(&yaml).expect_err("invalid domain");
        assert_eq!(e.0[0].path, "/forward/0/subtree");
        assert_eq!(e.0[0].causes[1].message, *message);
    }
    let e = run("forward:\n  - subtree: []\n    servers: [1.1.1.1]").expect_err("empty");
    assert_eq!(e.0[0].causes[0].message, "empty list is not allowed");
    let e =
        run("forward:\n  - subtree: [a.cz, '-b']\n    servers: [1.1.1.1]").expect_err("bad item");
    assert_eq!(e.0[0].causes[0].path, "/forward/0/subtree/1");
}

#[test]
fn cross_field_rules() {
    let cases: &[(&str, &str, &str)] = &[
        ("management:\n  interface: 127.0.0.1@5000\n  unix-socket: /tmp/x.sock", "/management", "One of 'interface' or 'unix-socket' must be configured."),
        ("management: {}", "/management", "One of 'interface' or 'unix-socket' must be configured."),
        ("network:\n  listen:\n    - interface: 127.0.0.1\n      unix-socket: /tmp/x.sock", "/network/listen/0", "One of 'interface' or 'unix-socket' must be configured."),
        ("network:\n  listen:\n    - interface: 127.0.0.1@53\n      port: 54", "/network/listen/0", "The port number is defined in two places ('port' option and '@<port>' syntax)."),
        ("network:\n  listen:\n    - interface: ['127.0.0.1@53', '::1']", "/network/listen/0", "The '@<port>' syntax must be used either for all or none of the interface in the list."),
        ("network:\n  listen:\n    - unix-socket: /tmp/x.sock\n      port: 53", "/network/listen/0", "'unix-socket' and 'port' are not compatible options. Port configuration can only be used with 'interface' option."),
        ("network:\n  tls:\n    cert-file: /etc/hosts", "/network/tls", "'cert-file' and 'key-file' must be configured together"),
        ("network:\n  tls:\n    sticket-secret: '12345678901234567890123456789012'\n    sticket-secret-file: /x", "/network/tls", "'sticket_secret' and 'sticket_secret_file' are both defined, only one can be used"),
        ("cache:\n  ttl-min: 2d\n  ttl-max: 1d", "/cache", "'ttl-max' can't be smaller than 'ttl-min'"),
        ("cache:\n  prefill:\n    - origin: example.com\n      url: https://x", "/cache/prefill/0", "cache prefilling is not yet supported for non-root zones"),
        ("forward:\n  - subtree: example.com\n    servers: [127.0.0.1@5353]\n    options:\n      authoritative: true", "/forward/0", "Forwarding to authoritative servers on a custom port is currently not supported."),
        ("forward:\n  - subtree: example.com\n    servers:\n      - address: 1.1.1.1\n        transport: tls\n    options:\n      authoritative: true", "/forward/0", "Forwarding to authoritative servers using TLS protocol is not supported."),
        ("forward:\n  - subtree: a.cz\n    servers:\n      - 1.1.1.1\n      - address: 8.8.8.8\n        transport: tls\n    options:\n      authoritative: true", "/forward/0", "Forwarding to authoritative servers using TLS protocol is not supported."),
        ("forward:\n  - subtree: example.com\n    servers:\n      - address: 1.1.1.1\n        pin-sha256: d6qzRu9zOECb90Uez27xWltNsj0e1Md7GkYYkVoZWmM=\n        hostname: one.one", "/forward/0/servers/0", "could not parse any of the possible variants"),
        ("fallback:\n  enable: true", "/fallback", "Fallback enabled without configuring servers."),
        ("local-data:\n  rules:\n    - name: a.example\n      subtree: nxdomain\n      address: 1.2.3.4", "/local-data/rules/0", "only one of 'address', 'subtree' or 'file' can be configured"),
        ("local-data:\n  rules:\n    - name: a.cz", "/local-data/rules/0", "one of 'address', 'subtree', 'file' or 'records' must be configured"),
        ("local-data:\n  rules:\n    - name: a.cz\n      file: /etc/hosts", "/local-data/rules/0", "one of 'name', 'file or 'records' must be configured"),
        ("local-data:\n  rules:\n    - subtree: empty\n      name: a.cz\n      nodata: true", "/local-data/rules/0", "'nodata' defined but unused with 'subtree'"),
        ("views:\n  - subnets: [10.0.0.0/8]\n    tags: [t1]\n    answer: allow", "/views/0", "exactly one of 'tags' and 'answer' must be configured"),
        ("lua:\n  script: x\n  script-file: /etc/hosts", "/lua", "'lua.script' and 'lua.script-file' are both defined, only one can be used"),
        ("rate-limiting:\n  enable: true", "/rate-limiting", "'rate-limit' has to be configured to enable rate limiting"),
        ("rate-limiting:\n  rate-limit: 100000\n  instant-limit: 10", "/rate-limiting", "'rate-limit' has to be in range 1..(1000 * instant-limit)"),
        ("rate-limiting:\n  instant-limit: 6000000", "/rate-limiting", "'instant-limit' has to be in range 1..5592404"),
        ("logging:\n  dnstap:\n    enable: true", "/logging/dnstap", "DNS queries logging enabled, but 'unix-socket' not specified"),
        ("logging:\n  groups: [manager, manager]", "/logging", "duplicate logging group 'manager' on index 1"),
        ("monitoring:\n  graphite:\n    enable: true", "/monitoring/graphite", "'host' option must be configured to enable graphite bridge"),
        ("views:\n  - subnets: [10.0.0.0/8]\n    tags: [t1]\nlocal-data:\n  rpz:\n    - file: /etc/hosts\n      tags: [zz]", "/local-data/rules/0/tags", "some tags ['zz'] not found in '/views' tags"),
    ];
    for (yaml, path, message) in cases {
        check(yaml, Err(&[(path, message)]));
    }
    let workers = format!("workers: {}", kres_config::workers_max_count() + 1);
    let max = kres_config::workers_max_count();
    let message =
        format!("can't run with more workers than the recommended maximum {max} or hardcoded 256");
    let e = run(&workers).expect_err("too many workers");
    assert_eq!(
        (e.0[0].path.as_str(), e.0[0].message.as_str()),
        ("/", message.as_str())
    );
}

#[test]
fn tags_must_be_defined_and_used() {
    check(
        "views:\n  - subnets: [10.0.0.0/8]\n    tags: [t1, t2, t3]\nlocal-data:\n  rules:\n    - name: a.example\n      address: 1.2.3.4\n      tags: [t1, zz]",
        Err(&[
            ("/local-data/rules/0/tags", "some tags ['zz'] not found in '/views' tags"),
            ("/views", "unused tags ['t2', 't3'] found"),
        ]),
    );
    // a single unused tag is tolerated (upstream quirk)
    check("views:\n  - subnets: [10.0.0.0/8]\n    tags: [t1]", Ok(()));
}

#[test]
fn all_errors_are_reported_with_json_pointers() {
    let e = run("workers: 0\ncache:\n  size-max: 10X\nlogging:\n  level: loud\nnetwork:\n  listen:\n    - interface: 'bad bad'")
        .expect_err("invalid");
    let paths: Vec<&str> = e.0.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/workers",
            "/network/listen/0/interface",
            "/cache/size-max",
            "/logging/level"
        ]
    );
    let shown = e.to_string();
    assert!(shown.starts_with("Configuration validation errors detected:\n\t[/workers] could not parse any of the possible variants\n\t\t[/workers] '0' does not match any of the expected values ('auto',)\n\t\t[/workers] value 0 is lower than the minimum 1.\n"), "{shown}");
    assert!(
        shown.contains("\n\t[/logging/level] 'loud' does not match"),
        "{shown}"
    );
    let single = run("fallback:\n  enable: true").expect_err("invalid");
    assert_eq!(single.to_string(), "Configuration validation error detected:\n\t[/fallback] Fallback enabled without configuring servers.");
}

#[test]
fn defaults_and_auto_are_resolved() {
    let cfg = run("").expect("empty is valid");
    assert_eq!(cfg.workers, 1);
    assert_eq!(cfg.rundir, PathBuf::from("/run/knot-resolver"));
    assert_eq!(
        cfg.management.unix_socket,
        Some(PathBuf::from("/run/knot-resolver/kres-api.sock"))
    );
    assert!(cfg.management.interface.is_none());
    assert_eq!(cfg.cache.storage, PathBuf::from("/var/cache/knot-resolver"));
    assert_eq!(cfg.cache.size_max.bytes(), 100 * 1024 * 1024);
    let gc = &cfg.cache.garbage_collector;
    assert!(gc.enable);
    assert_eq!(
        (gc.interval.millis(), gc.threshold, gc.release),
        (1000, 80, 10)
    );
    assert_eq!(
        (gc.temp_keys_space.bytes(), gc.rw_deletes, gc.rw_reads),
        (0, 100, 200)
    );
    assert_eq!(
        (gc.rw_duration.micros(), gc.rw_delay.micros(), gc.dry_run),
        (0, 0, false)
    );
    assert_eq!(cfg.cache.ttl_max.seconds(), 86400);
    assert_eq!(cfg.logging.level.as_str(), "notice");
    assert!(!cfg.hostname.is_empty());
    assert!(cfg.nsid.is_none());
    assert!(cfg.local_data.records.is_none());
    assert!(cfg.network.tls.watchdog);
    assert_eq!(cfg.network.listen.len(), 2);
    let first = &cfg.network.listen[0];
    assert_eq!(
        first.interface.as_ref().map(|i| i[0].addr()),
        Some(Some("127.0.0.1".parse().expect("ip")))
    );
    assert_eq!(first.port, Some(53));
    assert!(!first.freebind);
    assert!(cfg.network.listen[1].freebind);
    assert_eq!(cfg.dns64.prefix.to_string(), "64:ff9b::/96");

    let cfg = run("workers: auto").expect("valid");
    assert_eq!(Some(cfg.workers), kres_config::usable_cpus());

    let ports = run("network:\n  listen:\n    - interface: 127.0.0.1\n      kind: dot\n    - interface: ::1\n      kind: doh2\n    - interface: lo\n      kind: doh2-insecure\n    - unix-socket: x.sock")
        .expect("valid");
    let got: Vec<Option<u16>> = ports.network.listen.iter().map(|l| l.port).collect();
    assert_eq!(got, [Some(853), Some(443), Some(80), None]);
    assert_eq!(
        ports.network.listen[3].unix_socket,
        Some(vec![PathBuf::from("/etc/knot-resolver/x.sock")])
    );

    let cfg = run("management:\n  interface: 127.0.0.1@5000\nlocal-data:\n  records: 'x'")
        .expect("valid");
    let iface = cfg.management.interface.expect("interface");
    assert_eq!(
        (iface.addr().to_string(), iface.port()),
        ("127.0.0.1".to_owned(), 5000)
    );
    assert_eq!(cfg.local_data.records.as_deref(), Some("x"));
}

/// The listen cases of upstream's `test_network_schema.py`.
#[test]
fn upstream_listen_tables() {
    let listen = |entry: &str| run(&format!(r#"{{"network": {{"listen": [{entry}]}}}}"#));
    let valid = [
        r#"{"unix-socket": "/tmp/kresd-socket"}"#,
        r#"{"unix-socket": ["/tmp/kresd-socket", "/tmp/kresd-socket2"]}"#,
        r#"{"interface": "::1"}"#,
        r#"{"interface": "::1@5335"}"#,
        r#"{"interface": "::1", "port": 5335}"#,
        r#"{"interface": ["127.0.0.1", "::1"]}"#,
        r#"{"interface": ["127.0.0.1@5335", "::1@5335"]}"#,
        r#"{"interface": ["127.0.0.1", "::1"], "port": 5335}"#,
        r#"{"interface": "lo"}"#,
        r#"{"interface": "lo@5335"}"#,
        r#"{"interface": "lo", "port": 5335}"#,
        r#"{"interface": ["lo", "eth0"]}"#,
        r#"{"interface": ["lo@5335", "eth0@5335"]}"#,
        r#"{"interface": ["lo", "eth0"], "port": 5335}"#,
    ];
    for entry in valid {
        if let Err(e) = listen(entry) {
            panic!("{entry} should be valid:\n{e}");
        }
    }
    let invalid = [
        r#"{"unix-socket": "/tmp/kresd-socket", "port": "53"}"#,
        r#"{"interface": "::1", "unix-socket": "/tmp/kresd-socket"}"#,
        r#"{"interface": "::1@5335", "port": 5335}"#,
        r#"{"interface": ["127.0.0.1", "::1@5335"]}"#,
        r#"{"interface": ["127.0.0.1@5335", "::1@5335"], "port": 5335}"#,
        r#"{"interface": "lo@5335", "port": 5335}"#,
        r#"{"interface": ["lo", "eth0@5335"]}"#,
        r#"{"interface": ["lo@5335", "eth0@5335"], "port": 5335}"#,
    ];
    for entry in invalid {
        assert!(listen(entry).is_err(), "{entry} should be invalid");
    }
    let ports = [
        (r#"{"unix-socket": ["/tmp/kresd-socket"]}"#, None),
        (r#"{"interface": ["::1"]}"#, Some(53)),
        (r#"{"interface": ["::1"], "kind": "dot"}"#, Some(853)),
        (r#"{"interface": ["::1"], "kind": "doh-legacy"}"#, Some(443)),
        (r#"{"interface": ["::1"], "kind": "doh2"}"#, Some(443)),
        (r#"{"interface": ["::1"], "kind": "doq"}"#, Some(853)),
    ];
    for (entry, port) in ports {
        let cfg = listen(entry).expect("valid");
        assert_eq!(cfg.network.listen[0].port, port, "{entry}");
    }
    for (watchdog, expected) in [(r#""auto""#, true), ("true", true), ("false", false)] {
        let cfg = run(&format!(
            r#"{{"network": {{"tls": {{"watchdog": {watchdog}}}}}}}"#
        ))
        .expect("valid");
        assert_eq!(cfg.network.tls.watchdog, expected);
    }
}

/// Python-only values from PyYAML (big ints, dates, sets) and the `-`/`_` key renaming, checked
/// with upstream's `kresctl validate`.
#[test]
fn python_values_and_renamed_keys_behave_like_upstream() {
    check("version: 99999999999999999999\n", Ok(()));
    check(
        "network:\n  tls:\n    sticket-secret: 12345678901234567890123456789012\n",
        Ok(()),
    );
    check(
        "network:\n  tcp-pipeline: 99999999999999999999\n",
        Err(&[(
            "/network/tcp-pipeline",
            "value 99999999999999999999 is higher than the maximum 65535",
        )]),
    );
    check(
        "network:\n  tcp-pipeline: -99999999999999999999\n",
        Err(&[(
            "/network/tcp-pipeline",
            "value -99999999999999999999 is lower than the minimum 0.",
        )]),
    );
    check(
        "nsid: 2001-12-14\n",
        Err(&[("/nsid", "Unexpected value for '<class 'knot_resolver.datamodel.types.types.EscapedStr'>'. Expected string, got '2001-12-14' with type '<class 'datetime.date'>'")]),
    );
    check(
        "nsid: 2001-12-14 10:00:00\n",
        Err(&[("/nsid", "Unexpected value for '<class 'knot_resolver.datamodel.types.types.EscapedStr'>'. Expected string, got '2001-12-14 10:00:00' with type '<class 'datetime.datetime'>'")]),
    );
    check(
        "views:\n  - subnets: !!set {10.0.0.0/8}\n    answer: allow\n",
        Ok(()),
    );
    // the `_` spelling next to the `-` one is ignored; alone, it is an unexpected key
    check("cache:\n  size-max: 100M\n  size_max: 1G\n", Ok(()));
    check(
        "cache:\n  size_max: 1G\n",
        Err(&[("/cache", "unexpected extra key(s) 'size_max'")]),
    );
    // Python's `\d` and `int()` take any Unicode decimal digit
    check("cache:\n  size-max: '١٠٠M'\n", Ok(()));
    check("management:\n  interface: '127.0.0.1@٥٠٠٠'\n", Ok(()));
}
