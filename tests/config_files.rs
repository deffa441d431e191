//! Loading configuration files: formats, merging several files, relative paths, strict-mode path
//! checks, and `kresctl validate` exit codes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use kres_config::{
    load_files, parse_document, validate_command, ConfigError, LogTargetArg, ParseError, PathChecks,
};

/// A scratch directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("kres-config-test-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write scratch file");
        path
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn several_files_are_deep_merged() {
    let dir = Scratch::new();
    let a = dir.write("a.yaml", "cache:\n  size-max: 10M\nworkers: 2\n");
    let b = dir.write(
        "b.json",
        r#"{"cache": {"ttl-min": "1s"}, "logging": {"level": "debug"}}"#,
    );
    let loaded = load_files(
        &[a, b],
        kres_config::PathChecks::Lenient,
        Default::default(),
    )
    .expect("valid");
    assert_eq!(loaded.model.cache.size_max.bytes(), 10 * 1024 * 1024);
    assert_eq!(loaded.model.cache.ttl_min.seconds(), 1);
    assert_eq!(loaded.model.workers, 2);
    assert_eq!(loaded.model.logging.level.as_str(), "debug");
    assert_eq!(
        loaded.raw,
        serde_json::json!({"cache": {"size-max": "10M", "ttl-min": "1s"}, "workers": 2, "logging": {"level": "debug"}})
    );
}

#[test]
fn merge_collisions_are_errors() {
    let dir = Scratch::new();
    let a = dir.write("a.yaml", "cache:\n  size-max: 10M\n");
    let b = dir.write("b.yaml", "cache:\n  size-max: 20M\n");
    match load_files(
        &[a, b],
        kres_config::PathChecks::Lenient,
        Default::default(),
    ) {
        Err(ConfigError::Parse {
            source: ParseError::Duplicity { path, key },
            ..
        }) => {
            assert_eq!((path.as_str(), key.as_str()), ("/cache", "size-max"));
        }
        other => panic!("expected a merge error, got {other:?}"),
    }
}

#[test]
fn toml_files_are_supported() {
    let dir = Scratch::new();
    let t = dir.write(
        "c.toml",
        "workers = 3\n[network]\ndo-ipv6 = false\n[[network.listen]]\ninterface = '::1@5353'\n",
    );
    let loaded =
        load_files(&[t], kres_config::PathChecks::Lenient, Default::default()).expect("valid");
    assert_eq!(loaded.model.workers, 3);
    assert!(!loaded.model.network.do_ipv6);
    let listen = &loaded.model.network.listen[0];
    assert_eq!(
        listen.interface.as_ref().map(|i| i[0].port()),
        Some(Some(5353))
    );
}

#[test]
fn relative_paths_resolve_against_the_first_file() {
    let dir = Scratch::new();
    let sub = dir.path().join("sub");
    std::fs::create_dir_all(&sub).expect("mkdir");
    let first = dir.write("sub/first.yaml", "lua:\n  script-file: scripts/x.lua\n");
    let second = dir.write("second.yaml", "local-data:\n  addresses-files: [hosts]\n");
    let loaded = load_files(
        &[first, second],
        kres_config::PathChecks::Lenient,
        Default::default(),
    )
    .expect("valid without strict checks");
    assert_eq!(
        loaded.model.lua.script_file,
        Some(sub.join("scripts/x.lua"))
    );
    assert_eq!(
        loaded.model.local_data.addresses_files,
        Some(vec![sub.join("hosts")])
    );
    assert_eq!(
        loaded.raw["lua"]["script-file"], "scripts/x.lua",
        "the raw document keeps what was written"
    );
}

#[test]
fn strict_mode_checks_paths() {
    let dir = Scratch::new();
    let root = dir.path().display().to_string();
    let ok = dir.write(
        "ok.yaml",
        &format!("rundir: {root}\ncache:\n  storage: {root}\nmanagement:\n  unix-socket: {root}/api.sock\n"),
    );
    load_files(&[ok], kres_config::PathChecks::Strict, Default::default())
        .expect("existing paths pass strict validation");

    let bad = dir.write(
        "bad.yaml",
        &format!(
            "rundir: /nonexistent-dir\ncache:\n  storage: {root}\nmanagement:\n  unix-socket: /nope/api.sock\n\
             lua:\n  script-file: script.lua\nnetwork:\n  tls:\n    cert-file: {root}\n    key-file: {root}/ok.yaml\n"
        ),
    );
    let errors = match load_files(
        std::slice::from_ref(&bad),
        kres_config::PathChecks::Strict,
        Default::default(),
    ) {
        Err(ConfigError::Invalid(e)) => e,
        other => panic!("expected validation errors, got {other:?}"),
    };
    let got: Vec<(String, String)> = errors
        .0
        .iter()
        .map(|e| (e.path.clone(), e.message.clone()))
        .collect();
    let want = vec![
        (
            "/rundir".to_owned(),
            "path '/nonexistent-dir' does not point to an existing directory".to_owned(),
        ),
        (
            "/management/unix-socket".to_owned(),
            "path '/nope/api.sock' does not point inside an existing directory".to_owned(),
        ),
        (
            "/network/tls/cert-file".to_owned(),
            format!("path '{root}' is not a file"),
        ),
        (
            "/lua/script-file".to_owned(),
            format!("file '{root}/script.lua' does not exist"),
        ),
    ];
    assert_eq!(got, want);
    // the same document is fine without strict checks
    load_files(&[bad], kres_config::PathChecks::Lenient, Default::default())
        .expect("non-strict validation ignores the file system");
}

#[test]
fn validate_command_exit_codes() {
    let dir = Scratch::new();
    let good = dir.write("good.yaml", "workers: 1\n");
    let bad = dir.write("bad.yaml", "workers: 0\n");
    let garbage = dir.write("garbage.yaml", "a: [1, 2\n");
    assert_eq!(
        validate_command(
            std::slice::from_ref(&good),
            PathChecks::Lenient,
            LogTargetArg::default()
        ),
        0
    );
    assert_eq!(
        validate_command(&[bad], PathChecks::Lenient, LogTargetArg::default()),
        1
    );
    assert_eq!(
        validate_command(&[garbage], PathChecks::Lenient, LogTargetArg::default()),
        1
    );
    assert_eq!(
        validate_command(
            &[dir.path().join("missing.yaml")],
            PathChecks::Lenient,
            LogTargetArg::default()
        ),
        1
    );
    assert_eq!(
        validate_command(
            &[good.clone(), good],
            PathChecks::Lenient,
            LogTargetArg::default()
        ),
        1,
        "merging a file with itself collides"
    );
}

#[test]
fn parse_document_reports_formats() {
    assert!(matches!(
        parse_document("a: 1\na: 2\n", Path::new("x.yaml")),
        Err(ConfigError::Parse {
            source: ParseError::YamlDuplicateKey {
                line: 2,
                column: 1,
                ..
            },
            ..
        })
    ));
    let err = parse_document("a: 1\na: 2\n", Path::new("x.yaml")).expect_err("duplicate");
    assert!(
        err.to_string().contains(
            "duplicate key detected:   in \"<unicode string>\", line 2, column 1:\n    a: 2\n    ^"
        ),
        "{err}"
    );
    assert!(parse_document("workers = [", Path::new("x.toml")).is_err());
    assert_eq!(
        parse_document("", Path::new("x.yaml")).expect("empty"),
        serde_json::Value::Null
    );
}

#[test]
fn an_endless_or_oversize_file_is_refused_not_read_without_end() {
    // A watched configuration file (`--watch-config`) replaced by an endless one.
    let err = load_files(
        &[PathBuf::from("/dev/zero")],
        PathChecks::Lenient,
        Default::default(),
    )
    .expect_err("an endless file is refused");
    match &err {
        ConfigError::Read { path, source } => {
            assert_eq!(path, Path::new("/dev/zero"));
            assert!(source.to_string().contains("larger than"), "{source}");
        }
        other => panic!("unexpected error: {other}"),
    }
}
