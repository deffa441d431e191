//! `kresctl convert`: upstream's command line and output conventions, without an API.

use std::path::Path;
use std::process::{Command, Output};

const KRESCTL: &str = env!("CARGO_BIN_EXE_kresctl");

fn kresctl(args: &[&str]) -> Output {
    Command::new(KRESCTL)
        .args(args)
        .output()
        .expect("kresctl runs")
}

fn reference(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/reference-configs")
        .join(name)
        .display()
        .to_string()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kresctl-convert-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

#[test]
fn prints_the_worker_lua_by_default() {
    let out = kresctl(&["convert", &reference("config.dev.yaml")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(
        text.contains("assert(C.kr_rules_init(nil, 0, false) == 0)"),
        "{text}"
    );
    assert!(
        text.contains("net.listen('127.0.0.1',5335,{kind='dns',freebind=false})"),
        "{text}"
    );
    assert!(
        text.ends_with("\n\n"),
        "printed with a final newline like Python's print"
    );
}

#[test]
fn writes_the_policy_loader_lua_to_a_file() {
    let dir = scratch("policy");
    let target = dir.join("policy-loader.lua");
    let out = kresctl(&[
        "convert",
        "--type",
        "policy-loader",
        "-o",
        target.to_str().expect("UTF-8 path"),
        &reference("config.test-local-data.yaml"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "nothing printed when writing a file");
    let text = std::fs::read_to_string(&target).expect("written");
    assert!(
        text.contains("C.kr_rule_local_address('foo.bar', '127.0.0.1'"),
        "{text}"
    );
    assert!(text.ends_with("quit()\n"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn merges_several_files_in_order() {
    let dir = scratch("merge");
    let extra = dir.join("extra.yaml");
    std::fs::write(&extra, "nsid: merged\n").expect("write");
    let out = kresctl(&[
        "convert",
        &reference("config.dev.yaml"),
        extra.to_str().expect("UTF-8 path"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(text.contains("nsid.name('merged' .. worker.id)"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn rejects_an_invalid_configuration_with_upstreams_message() {
    // Upstream refuses authoritative forwarding to a custom port; so do we.
    let dir = scratch("invalid");
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "forward:\n  - subtree: fwd.test\n    servers: ['127.0.0.1@5300']\n    options: {authoritative: true, dnssec: false}\n",
    )
    .expect("write");
    let out = kresctl(&["convert", config.to_str().expect("UTF-8 path")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "Forwarding to authoritative servers on a custom port is currently not supported."
        ),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_unknown_type_is_a_usage_error() {
    let out = kresctl(&[
        "convert",
        "--type",
        "manager",
        &reference("config.dev.yaml"),
    ]);
    assert_eq!(out.status.code(), Some(2));
}
