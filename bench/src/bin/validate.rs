//! Validating the largest example configuration: in-process (parse + validate, ours only:
//! upstream has no library entry point we can time fairly) and whole-process `kresctl validate`,
//! ours against upstream's, alternating runs. Prints medians.
//!
//! Usage: cargo build --release --bins && target/release/validate [RUNS]

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{ensure, Result};
use bench::{median, print_header, print_row};
use kres_config::ValidationContext;
use testbed::Bed;

/// The largest configuration among the reference examples.
fn largest_example() -> Result<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/reference-configs");
    let mut best: Option<(u64, PathBuf)> = None;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let len = std::fs::metadata(&path)?.len();
        if best.as_ref().is_none_or(|(l, _)| len > *l) {
            best = Some((len, path));
        }
    }
    best.map(|(_, p)| p)
        .ok_or_else(|| anyhow::anyhow!("no reference configs"))
}

fn main() -> Result<()> {
    let runs: usize = bench::positional(&mut std::env::args().skip(1), "RUNS", 10)?;
    let file = largest_example()?;
    let text = std::fs::read_to_string(&file)?;
    let ctx = ValidationContext {
        resolve_root: file.parent().unwrap_or(Path::new(".")).to_owned(),
        checks: kres_config::PathChecks::Lenient,
        logtarget_arg: Default::default(),
    };

    // In process: many rounds per sample, so the clock's resolution does not matter.
    const ROUNDS: u32 = 2000;
    let mut in_process = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        for _ in 0..ROUNDS {
            let raw = kres_config::parse_document(&text, &file)?;
            ensure!(
                kres_config::validate(&raw, &ctx).is_ok(),
                "example must be valid"
            );
        }
        in_process.push(t0.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS));
    }

    // Whole process: our kresctl on the host, upstream's in the rootfs, alternating.
    let bed = Bed::get()?;
    let dir = bed.test_dir("bench-validate")?;
    let (host_copy, bed_copy) = dir.join("config.yaml");
    std::fs::copy(&file, &host_copy)?;
    let ours_bin = bench::our_binary("kresctl")?;
    let (mut ours, mut upstream) = (Vec::new(), Vec::new());
    for i in 0..runs {
        for which in if i % 2 == 0 { [0, 1] } else { [1, 0] } {
            let t0 = Instant::now();
            let out = if which == 0 {
                std::process::Command::new(&ours_bin)
                    .arg("validate")
                    .arg(&host_copy)
                    .output()?
            } else {
                bed.run_installed(
                    "/usr/bin/kresctl",
                    &["validate", &bed_copy.to_string_lossy()],
                )?
            };
            let ms = t0.elapsed().as_secs_f64() * 1000.0;
            ensure!(
                out.status.success(),
                "validate failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            if which == 0 {
                ours.push(ms)
            } else {
                upstream.push(ms)
            }
        }
    }
    println!(
        "validation benchmark: {} ({} bytes), {runs} runs",
        file.display(),
        text.len()
    );
    println!(
        "in-process parse + validate (ours): median {:.1} µs",
        median(in_process)
    );
    print_header();
    print_row("kresctl validate, whole process", "ms", &ours, &upstream);
    Ok(())
}
