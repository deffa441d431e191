//! `kresctl migrate` against upstream's `kresctl migrate` (6.5.0, in the test bed) on
//! old-style configurations: the same `removed`/`added` lines in the same order and the same
//! document. Cases where upstream loses information are unit tests in `kresctl::commands::migrate`.

use std::path::Path;
use std::process::Command;

use kres_config::parse_document;
use serde_json::Value;

const KRESCTL: &str = env!("CARGO_BIN_EXE_kresctl");

/// The `removed`/`added` lines and the migrated document of one run.
fn split(stdout: &[u8], format: &str) -> (Vec<String>, Value) {
    let text = String::from_utf8_lossy(stdout).into_owned();
    let (log, doc) = text
        .split_once("\nNew migrated configuration (v")
        .unwrap_or_else(|| panic!("no header in {text}"));
    let doc = doc
        .split_once("\n---\n")
        .unwrap_or_else(|| panic!("no separator in {text}"))
        .1;
    let log = log.lines().map(str::to_owned).collect();
    let name = format!("migrated.{format}");
    let doc = parse_document(doc, Path::new(&name)).unwrap_or_else(|e| panic!("{e}: {doc}"));
    (log, doc)
}

fn check(name: &'static str, old: &str) {
    let bed = testbed::Bed::get().expect("test bed");
    let dir = bed.test_dir(name).expect("test dir");
    let file = dir.host("old.yaml");
    std::fs::write(&file, old).expect("write");
    for format in ["json", "yaml"] {
        let flag = format!("--{format}");
        let theirs = bed
            .run_installed(
                "/usr/bin/kresctl",
                &[
                    "migrate",
                    &flag,
                    dir.bed("old.yaml").to_str().expect("UTF-8"),
                ],
            )
            .expect("upstream kresctl");
        assert!(theirs.status.success(), "{theirs:?}");
        let ours = Command::new(KRESCTL)
            .args(["migrate", &flag, file.to_str().expect("UTF-8")])
            .output()
            .expect("kresctl");
        assert!(ours.status.success(), "{ours:?}");
        // The header names the same version: the configuration's, not the program's.
        let header = |out: &[u8]| {
            String::from_utf8_lossy(out)
                .lines()
                .find(|l| l.starts_with("New migrated configuration"))
                .map(str::to_owned)
        };
        assert_eq!(header(&ours.stdout), header(&theirs.stdout), "{name}");
        let (their_log, their_doc) = split(&theirs.stdout, format);
        let (our_log, our_doc) = split(&ours.stdout, format);
        assert_eq!(our_log, their_log, "{name} {format}");
        assert_eq!(our_doc, their_doc, "{name} {format}");
    }
}

#[test]
fn a_6_0_style_configuration() {
    check(
        "migrate-old",
        "max-workers: 8
workers: 2
webmgmt:
  interface: 127.0.0.1@8453
dnssec:
  refresh-time: 1h
  hold-down-time: 30d
  trust-anchor-sentinel: true
  trust-anchor-signal-query: true
logging:
  level: info
  dnssec-bogus: true
  debugging:
    assertion-abort: true
monitoring:
  enabled: lazy
network:
  listen:
    - interface: 127.0.0.1@5353
  tls:
    auto-discovery: true
    files-watchdog: true
cache:
  size-max: 100M
  garbage-collector:
    interval: 1s
  prefetch:
    prediction:
      window: 15m
dns64:
  prefix: 64:ff9b::/96
  rev-ttl: 60
defer:
  enabled: true
rate-limiting:
  rate-limit: 100
local-data:
  root-fallback-addresses:
    a.root-servers.net.: 198.41.0.4
",
    );
}

#[test]
fn boolean_and_null_sections() {
    check(
        "migrate-bool",
        "cache:
  garbage-collector: false
  prefetch:
    prediction: null
dnssec: false
dns64: true
monitoring:
  graphite: false
logging:
  dnstap: null
network:
  proxy-protocol: null
",
    );
}

#[test]
fn a_current_configuration_only_loses_empty_sections() {
    check(
        "migrate-current",
        "workers: 4
views: []
local-data: {}
forward:
  - subtree: example.com
    servers: [192.0.2.1]
cache:
  garbage-collector:
    enable: true
",
    );
}

#[test]
fn unparsable_input_is_exit_1() {
    let dir = std::env::temp_dir().join(format!("kresctl-migrate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("bad.yaml");
    std::fs::write(&file, "a: [1\n").expect("write");
    let out = Command::new(KRESCTL)
        .args(["migrate", file.to_str().expect("UTF-8")])
        .output()
        .expect("kresctl");
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let missing = Command::new(KRESCTL)
        .args(["migrate", "/nonexistent/config.yaml"])
        .output()
        .expect("kresctl");
    assert_eq!(missing.status.code(), Some(1));
    let usage = Command::new(KRESCTL)
        .args(["migrate", "--json", "--yaml", "x"])
        .output()
        .expect("kresctl");
    assert_eq!(usage.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn completion_scripts_for_three_shells() {
    // bash's asks kresctl for the words, as upstream's does; the others list them.
    for (shell, marker) in [
        ("bash", "kresctl completion --bash --args"),
        ("zsh", "#compdef kresctl"),
        ("fish", "complete -c kresctl"),
    ] {
        let out = Command::new(KRESCTL)
            .args(["completion", shell])
            .output()
            .expect("kresctl");
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(marker), "{shell}: {text}");
        if shell != "bash" {
            assert!(text.contains("migrate"), "{shell}");
        }
    }
    let words = Command::new(KRESCTL)
        .args(["completion", "--bash", "--args", "mig"])
        .output()
        .expect("kresctl");
    assert!(String::from_utf8_lossy(&words.stdout).contains("migrate"));
    let out = Command::new(KRESCTL)
        .args(["completion", "tcsh"])
        .output()
        .expect("kresctl");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn exit_codes_are_in_the_long_help() {
    let out = Command::new(KRESCTL)
        .arg("--help")
        .output()
        .expect("kresctl");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Exit codes:") && text.contains("2  usage error"),
        "{text}"
    );
}
