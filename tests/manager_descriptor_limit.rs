//! The manager process raises its soft descriptor limit to the hard one at start, whatever
//! it inherited: the API's bound of open connections follows that limit. Its own test binary,
//! because it lowers the soft limit of the whole test process before starting the daemon.

mod common;

use common::Setup;

/// The soft and hard descriptor limits of process `pid`.
fn descriptor_limits(pid: i32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a descriptor limit");
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

#[test]
fn the_manager_raises_its_soft_descriptor_limit_to_the_hard_one() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    // The daemon inherits a soft limit below the hard one, as under systemd (1,024).
    let inherited = hard.min(1024);
    setrlimit(Resource::RLIMIT_NOFILE, inherited, hard).expect("setrlimit");
    let r = common::start(&Setup::new("manager-nofile")).expect("start");
    let managers = r.pids_named("kres-manager");
    assert_eq!(managers.len(), 1, "{managers:?}");
    let (soft, manager_hard) = descriptor_limits(managers[0]);
    eprintln!("inherited soft limit {inherited}; the manager's: soft {soft}, hard {manager_hard}");
    assert_eq!(manager_hard, hard);
    assert_eq!(soft, hard);
    r.stop();
}
