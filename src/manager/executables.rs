//! Where the Knot Resolver programs are, and as whom they run. Upstream fixes the paths at
//! build time under /usr/sbin; we look there first, then on `$PATH`, and accept explicit
//! overrides through `KRES_KRESD_EXECUTABLE` / `KRES_CACHE_GC_EXECUTABLE` (read once at
//! start-up). `run_as` is set by `knot-resolver --worker-user`.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Executables {
    pub kresd: PathBuf,
    pub cache_gc: PathBuf,
    /// The user every child runs as, when the daemon runs as root and was told to drop
    /// them to an unprivileged user; `None` runs them as ourselves.
    pub run_as: Option<supervisor::Credentials>,
}

impl Executables {
    pub fn discover() -> Self {
        Executables {
            kresd: find("KRES_KRESD_EXECUTABLE", "kresd"),
            cache_gc: find("KRES_CACHE_GC_EXECUTABLE", "kres-cache-gc"),
            run_as: None,
        }
    }
}

fn find(override_var: &str, program: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(override_var) {
        return PathBuf::from(p);
    }
    let default = Path::new("/usr/sbin").join(program);
    if default.exists() {
        return default;
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(program);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    default
}
