//! The chaos soak (`testbed::chaos`) for minutes on the release build: our resolver with 2-4
//! workers on real kresd under 2,000 UDP queries/s, and every 2 s one fault or change from a
//! seeded schedule. Prints the faults by kind, the queries sent and lost, the root's memory
//! and descriptors before the first fault and after the last, and PASS or FAIL per criterion
//! (exit status 1 when one failed). Then upstream's manager goes through the faults that apply
//! to it (worker and manager kills, reloads, scaling) on the same load, and its lost queries
//! are printed beside ours.
//!
//! Usage: bash bench/run.sh chaos --minutes N [--seed S] [--upstream-minutes M (0: none)]

use std::time::Duration;

use anyhow::{bail, Context, Result};
use bench::our_binary;
use testbed::chaos::{self, ChaosReport, ChaosSpec, ControlPlane};

/// Queries per second of the load.
const RATE: u32 = 2000;

/// The command line: `--minutes N [--seed S] [--upstream-minutes M]`.
struct Args {
    /// How long ours is put through the chaos.
    minutes: u64,
    /// How long upstream's manager is (its subset of faults); as long as ours by default.
    upstream_minutes: u64,
    seed: u64,
}

fn parse_args() -> Result<Args> {
    let mut minutes = 10;
    let mut seed = None;
    let mut upstream_minutes = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--minutes" => minutes = value.parse().context("--minutes")?,
            "--seed" => seed = Some(value.parse().context("--seed")?),
            "--upstream-minutes" => {
                upstream_minutes = Some(value.parse().context("--upstream-minutes")?)
            }
            _ => bail!(
                "unknown argument {arg}; usage: chaos --minutes N [--seed S] [--upstream-minutes M]"
            ),
        }
    }
    let seed = match seed {
        Some(seed) => seed,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs(),
    };
    Ok(Args {
        minutes,
        upstream_minutes: upstream_minutes.unwrap_or(minutes),
        seed,
    })
}

fn spec(control_plane: ControlPlane, minutes: u64, seed: u64) -> Result<ChaosSpec> {
    Ok(ChaosSpec {
        control_plane,
        daemon: our_binary("knot-resolver")?,
        kresctl: our_binary("kresctl")?,
        build_label_marker: kres_daemon::BUILD_LABEL_MARKER.to_vec(),
        workers: 2,
        scaled_workers: 4,
        rate: RATE,
        duration: Duration::from_secs(minutes * 60),
        period: Duration::from_secs(2),
        seed,
        effect_timeout: Duration::from_secs(120),
    })
}

/// Lost queries by fault kind, ours beside upstream's.
fn print_comparison(ours: &ChaosReport, upstream: &ChaosReport) {
    println!("lost queries, ours beside upstream's (upstream: its subset of faults)");
    println!("{:<48} {:>12} {:>12}", "", "ours", "upstream");
    let row = |name: &str, o: String, u: String| println!("{name:<48} {o:>12} {u:>12}");
    row(
        "queries sent",
        ours.load.sent.to_string(),
        upstream.load.sent.to_string(),
    );
    row(
        "queries lost",
        ours.load.lost.to_string(),
        upstream.load.lost.to_string(),
    );
    for kind in ControlPlane::Upstream.kinds() {
        let count = |r: &ChaosReport| r.faults.iter().filter(|f| f.kind == *kind).count();
        let lost = |r: &ChaosReport| {
            r.losses_by_kind()
                .iter()
                .find(|(k, _)| *k == Some(*kind))
                .map_or(0, |(_, n)| *n)
        };
        row(
            &format!("lost in {} (count)", kind.label()),
            format!("{} ({})", lost(ours), count(ours)),
            format!("{} ({})", lost(upstream), count(upstream)),
        );
    }
}

fn main() -> Result<()> {
    let args = parse_args()?;
    println!(
        "chaos soak: {} min, seed {} (replay: --seed {})",
        args.minutes, args.seed, args.seed
    );
    let ours = chaos::run(&spec(ControlPlane::Ours, args.minutes, args.seed)?)?;
    println!("{ours}");
    if args.upstream_minutes > 0 {
        let upstream = spec(ControlPlane::Upstream, args.upstream_minutes, args.seed)?;
        match chaos::run(&upstream) {
            Ok(upstream) => {
                println!("{upstream}");
                print_comparison(&ours, &upstream);
            }
            Err(e) => println!("upstream's manager did not get through its chaos: {e:#}"),
        }
    }
    if !ours.passed() {
        bail!("the chaos soak failed (seed {})", args.seed);
    }
    Ok(())
}
