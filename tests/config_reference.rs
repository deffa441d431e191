//! Every upstream example configuration is accepted, and validating the largest one is cheap.

use std::path::{Path, PathBuf};
use std::time::Instant;

use kres_config::{load_files, validate, ValidationContext};

fn reference_configs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference-configs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("reference configs directory")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_reference_config_is_accepted() {
    let files = reference_configs();
    assert_eq!(files.len(), 8, "expected the 8 upstream example configs");
    for file in files {
        if let Err(e) = load_files(
            std::slice::from_ref(&file),
            kres_config::PathChecks::Lenient,
            Default::default(),
        ) {
            panic!("{} rejected:\n{e}", file.display());
        }
    }
}

#[test]
fn reference_configs_keep_their_raw_form() {
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference-configs/config.dev.yaml");
    let loaded = load_files(
        &[file],
        kres_config::PathChecks::Lenient,
        Default::default(),
    )
    .expect("valid");
    assert_eq!(loaded.raw["workers"], 1);
    assert!(
        loaded.raw.get("cache").is_none(),
        "defaults must not leak into the raw document"
    );
    let listen = &loaded.model.network.listen[0];
    let interfaces = listen.interface.as_ref().expect("interface");
    assert_eq!(interfaces[0].port(), Some(5335));
    // upstream quirk kept: `port` is filled in from `kind` even when `@port` is used
    assert_eq!(listen.port, Some(53));
}

/// A benchmark-ready function: validates the largest example config `rounds` times and returns the
/// mean time per validation.
pub fn validate_largest_example(rounds: u32) -> std::time::Duration {
    let largest = reference_configs()
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("at least one config");
    let text = std::fs::read_to_string(&largest).expect("readable");
    let raw = kres_config::parse_document(&text, &largest).expect("parses");
    let ctx = ValidationContext {
        resolve_root: largest.parent().expect("has a parent").to_owned(),
        checks: kres_config::PathChecks::Lenient,
        logtarget_arg: Default::default(),
    };
    let start = Instant::now();
    for _ in 0..rounds {
        validate(&raw, &ctx).expect("valid");
    }
    start.elapsed() / rounds.max(1)
}

#[test]
fn validating_the_largest_example_is_timed() {
    let per_run = validate_largest_example(20);
    eprintln!("validation of the largest example: {per_run:?} per run");
}

#[test]
fn validation_is_deterministic_and_models_compare() {
    for file in reference_configs() {
        let a = load_files(
            std::slice::from_ref(&file),
            kres_config::PathChecks::Lenient,
            Default::default(),
        )
        .expect("valid");
        let b = load_files(
            std::slice::from_ref(&file),
            kres_config::PathChecks::Lenient,
            Default::default(),
        )
        .expect("valid");
        assert_eq!(a.model, b.model, "{}", file.display());
    }
}
