//! The chaos soak (`testbed::chaos`) for minutes on the release build: our resolver with 2-4
//! workers on real kresd under 2,000 UDP queries/s, and every 2 s one fault or change from a
//! seeded schedule. Prints the faults by kind, the queries sent and lost, the root's memory
//! and descriptors before the first fault and after the last, and PASS or FAIL per criterion
//! (exit status 1 when one failed).
//!
//! Usage: bash bench/run.sh chaos --minutes N [--seed S]

use std::time::Duration;

use anyhow::{bail, Context, Result};
use bench::our_binary;
use testbed::chaos::{self, ChaosSpec};

/// Queries per second of the load.
const RATE: u32 = 2000;

/// The command line: `--minutes N [--seed S]`.
struct Args {
    minutes: u64,
    seed: u64,
}

fn parse_args() -> Result<Args> {
    let mut minutes = 10;
    let mut seed = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--minutes" => minutes = value.parse().context("--minutes")?,
            "--seed" => seed = Some(value.parse().context("--seed")?),
            _ => bail!("unknown argument {arg}; usage: chaos --minutes N [--seed S]"),
        }
    }
    let seed = match seed {
        Some(seed) => seed,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs(),
    };
    Ok(Args { minutes, seed })
}

fn main() -> Result<()> {
    let args = parse_args()?;
    println!(
        "chaos soak: {} min, seed {} (replay: --seed {})",
        args.minutes, args.seed, args.seed
    );
    let spec = ChaosSpec {
        daemon: our_binary("knot-resolver")?,
        kresctl: our_binary("kresctl")?,
        build_label_marker: knot_resolver::BUILD_LABEL_MARKER.to_vec(),
        workers: 2,
        scaled_workers: 4,
        rate: RATE,
        duration: Duration::from_secs(args.minutes * 60),
        period: Duration::from_secs(2),
        seed: args.seed,
        effect_timeout: Duration::from_secs(120),
    };
    let report = chaos::run(&spec)?;
    println!("{report}");
    if !report.passed() {
        bail!("the chaos soak failed (seed {})", args.seed);
    }
    Ok(())
}
