//! Finding the processes of a launched tree by the marker in their environment, and killing
//! them. Zombies have no readable environment and count as gone.

use std::path::Path;

use crate::MARKER_VAR;

#[derive(Debug, Clone)]
pub struct ProcInfo {
    pub pid: i32,
    pub ppid: i32,
    /// `comm` (executable name, up to 15 bytes).
    pub comm: String,
    /// Process state letter from /proc/PID/stat.
    pub state: char,
}

/// Live (non-zombie) processes whose environment carries `marker`.
pub fn marked(marker: &str) -> Vec<ProcInfo> {
    let needle = format!("{MARKER_VAR}={marker}");
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
            continue;
        }
        if let Some(info) = info(pid) {
            if info.state != 'Z' {
                out.push(info);
            }
        }
    }
    out
}

/// The stat line of a process.
pub fn info(pid: i32) -> Option<ProcInfo> {
    let stat =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    parse_stat(&stat)
}

/// A `/proc/PID/stat` line (read here or inside a container): pid, comm, state, ppid.
pub fn parse_stat(stat: &str) -> Option<ProcInfo> {
    let pid = stat.split_once(' ')?.0.parse().ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_owned();
    let mut rest = stat[close + 2..].split(' ');
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some(ProcInfo {
        pid,
        ppid,
        comm,
        state,
    })
}

/// Children (direct) of `pid`.
pub fn children(pid: i32) -> Vec<ProcInfo> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter_map(info)
        .filter(|p| p.ppid == pid)
        .collect()
}

/// Resident set size of a process in KiB (VmRSS).
pub fn rss_kib(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The soft and hard limits on open descriptors of `pid` (`Max open files`), if it runs.
pub fn open_files_limit(pid: i32) -> Option<(u64, u64)> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut numbers = line.split_whitespace().filter_map(|w| w.parse().ok());
    Some((numbers.next()?, numbers.next()?))
}

/// How many descriptors `pid` holds (0 once it is gone).
pub fn open_descriptors(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Proportional set size of `pid`, in KiB: its private pages plus its share of pages it
/// shares (the same binary's text in two processes counts once in their sum).
pub fn pss_kib(pid: i32) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Anonymous memory of `pid` (its heap and stacks, no file pages), in KiB.
pub fn anonymous_kib(pid: i32) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    rollup
        .lines()
        .find_map(|l| l.strip_prefix("Anonymous:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// SIGKILL every process carrying `marker`, repeatedly until none is left (forks in flight).
pub fn kill_marked(marker: &str) {
    for _ in 0..20 {
        let procs = marked(marker);
        if procs.is_empty() {
            return;
        }
        for p in procs {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p.pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::yield_now();
    }
}
