//! Conformance: the recorded outputs of upstream's `kresctl validate` (see
//! `tests/data/oracle/README.md`) are reproduced exactly.

use std::path::{Path, PathBuf};

use kres_config::{load_files, ConfigError};

/// What `kresctl validate` prints (minus the success notice) and its exit code.
fn transcript(file: &Path) -> String {
    match load_files(
        &[file.to_owned()],
        kres_config::PathChecks::Lenient,
        Default::default(),
    ) {
        Ok(_) => "rc=0".to_owned(),
        Err(ConfigError::Invalid(e)) => format!("{e}\nrc=1"),
        Err(ConfigError::Parse { source, .. }) => format!("{source}\nrc=1"),
        Err(e) => format!("{e}\nrc=1"),
    }
}

#[test]
fn upstream_transcripts_are_reproduced() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/oracle");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("oracle directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    cases.sort();
    assert!(
        cases.len() > 100,
        "expected the recorded transcripts, found {}",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let expected =
            std::fs::read_to_string(case.with_extension("expected")).expect("expected output");
        let got = transcript(case);
        if got.trim_end() != expected.trim_end() {
            failures.push(format!(
                "{}:\n--- expected\n{expected}\n--- got\n{got}\n",
                case.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
