//! Where the Knot Resolver programs are, and which kresd they are. Upstream fixes the paths
//! at build time under /usr/sbin; we look there first, then on `$PATH`, and accept explicit
//! overrides through `KRES_KRESD_EXECUTABLE` / `KRES_CACHE_GC_EXECUTABLE` (read once at
//! start-up). The daemon runs them, `kresctl -V` asks kresd its version.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::environment::Environment;

/// The kresd `env` names, else /usr/sbin's, else the one on `env`'s `PATH`.
pub fn kresd(env: &Environment) -> PathBuf {
    find(
        env.kresd_executable.as_deref(),
        "kresd",
        env.path.as_deref(),
    )
}

/// The kres-cache-gc `env` names, found as [`kresd`] is.
pub fn cache_gc(env: &Environment) -> PathBuf {
    find(
        env.cache_gc_executable.as_deref(),
        "kres-cache-gc",
        env.path.as_deref(),
    )
}

/// `given`, else `program` in /usr/sbin, else on `path`, else where /usr/sbin would have it.
fn find(given: Option<&Path>, program: &str, path: Option<&OsStr>) -> PathBuf {
    if let Some(p) = given {
        return p.to_owned();
    }
    let default = Path::new("/usr/sbin").join(program);
    if default.exists() {
        return default;
    }
    if let Some(path) = path {
        for dir in std::env::split_paths(path) {
            let candidate = dir.join(program);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    default
}

/// How long `kresd --version` may take.
pub const VERSION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The most of `kresd --version`'s output that is read.
const VERSION_OUTPUT: u64 = 4096;

/// The longest version kept.
const VERSION_LENGTH: usize = 64;

/// Why the version of kresd is not known.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error("cannot run {}: {source}", .program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} --version did not answer within {} s", .program.display(), VERSION_TIMEOUT.as_secs())]
    TimedOut { program: PathBuf },
    #[error("{} --version said no version", .program.display())]
    NoVersion { program: PathBuf },
}

/// The version of the kresd at `program`, from `kresd --version` (`Knot Resolver, version
/// 6.5.0` → `6.5.0`): run once by the caller, within [`VERSION_TIMEOUT`] (then killed),
/// reading at most 4 KiB of its output. Blocks: call it from a thread of its own. The
/// program is waited for by its own pid, with nothing else of ours reaping in the process
/// that calls it (kresctl, or the manager process, whose supervised children the root
/// reaps).
pub fn kresd_version(program: &Path) -> Result<String, VersionError> {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let mut child = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|source| VersionError::Spawn {
            program: program.to_owned(),
            source,
        })?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(VersionError::NoVersion {
            program: program.to_owned(),
        });
    };
    let (tx, rx) = std::sync::mpsc::channel();
    // The reading thread ends when the output closes: at the exit, or at the kill below.
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stdout.take(VERSION_OUTPUT).read_to_end(&mut text);
        let _ = tx.send(text);
    });
    let text = rx.recv_timeout(VERSION_TIMEOUT);
    if text.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    let _ = reader.join();
    let text = text.map_err(|_| VersionError::TimedOut {
        program: program.to_owned(),
    })?;
    version_of(&String::from_utf8_lossy(&text)).ok_or_else(|| VersionError::NoVersion {
        program: program.to_owned(),
    })
}

/// The version in `kresd --version`'s output: the last word of its first line, when it is
/// made of the characters of a version (also how a version kept in the fd store is read
/// back).
pub fn version_of(output: &str) -> Option<String> {
    let word = output.lines().next()?.split_whitespace().last()?;
    let is_version_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '~');
    (word.len() <= VERSION_LENGTH
        && word.starts_with(|c: char| c.is_ascii_digit())
        && word.chars().all(is_version_char))
    .then(|| word.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_first_lines_last_word() {
        assert_eq!(
            version_of("Knot Resolver, version 6.5.0\n").as_deref(),
            Some("6.5.0")
        );
        assert_eq!(
            version_of("Knot Resolver, version 6.0.17-1~bpo\nmore\n").as_deref(),
            Some("6.0.17-1~bpo")
        );
        for odd in [
            "",
            "\n",
            "Knot Resolver, version\n",
            "version 6.5.0;rm\n",
            "v6",
        ] {
            assert_eq!(version_of(odd), None, "{odd:?}");
        }
        assert_eq!(version_of(&format!("x {}", "6".repeat(65))), None);
    }
}
