//! `kres-dist-gen OUTDIR`: writes the generated manual pages and completions (see the
//! library) below OUTDIR, for the package build (`dist/debian/build-deb.sh`). The pages are
//! dated by `SOURCE_DATE_EPOCH` when set (reproducible builds), else today.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kres-dist-gen: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<()> {
    let mut args = std::env::args_os().skip(1);
    let (Some(outdir), None) = (args.next(), args.next()) else {
        anyhow::bail!("usage: kres-dist-gen OUTDIR");
    };
    let outdir = PathBuf::from(outdir);
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v
            .parse::<u64>()
            .with_context(|| format!("SOURCE_DATE_EPOCH={v:?} is not a number of seconds"))?,
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .context("the clock is before 1970")?
            .as_secs(),
    };
    let date = kres_dist_gen::date_of(epoch);
    for asset in kres_dist_gen::assets(&date).context("rendering")? {
        let path = outdir.join(asset.path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&path, &asset.contents)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
