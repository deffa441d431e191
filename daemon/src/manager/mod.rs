//! The manager: turns a validated configuration into running processes, and is the only owner
//! of the running configuration. A change comes in through a [`ManagerHandle`], is served one
//! at a time by the manager task (`task`), planned by the pure planner (`plan`: what a change
//! needs) and carried out by the executor (`executor::Manager`: the canary, the
//! policy-loader, a rolling restart, a rules reset or a live logging change, the cache GC).
//!
//! Submodules, in the order a change walks them: `handle` (how others ask for changes),
//! `task` (the loop that serves them, one at a time), `plan` (what a change needs),
//! `executor` (carries a plan out), `processes` (its steps on processes, through the
//! supervisor), `worker_control` (its commands to running workers), `error` (why a change
//! was not applied). Beside them: `repairs` (the task's bounded fix attempts of failed
//! processes), `liveness` (hung workers found and killed), `rpz_loads` (the RPZ zones kept by
//! zone transfer the policy-loader could not load), and what the steps use: `specs`
//! (command lines of Knot Resolver's programs), `rundir` (the files it writes), `listen`
//! (the listening sockets), `executables` (where the programs are).

mod error;
pub mod executables;
mod executor;
pub mod handle;
pub mod listen;
pub mod liveness;
pub mod plan;
mod processes;
mod repairs;
pub mod rpz_loads;
pub mod rundir;
pub mod specs;
pub mod task;
mod worker_control;

pub use error::{ApplyError, PolicyLoaderFailure};
pub use executables::Executables;
pub use executor::Manager;
pub use handle::{ChangeError, ManagerHandle, Reloaded};
pub use processes::{
    policy_loader_timeout, ProcessesSetup, POLICY_LOADER_TIMEOUT, POLICY_LOADER_TIMEOUT_VAR,
};

/// Run CPU-heavy work (reading and validating files, rendering Lua) on the blocking pool and
/// wait for it: the runtime's one thread keeps serving the API meanwhile. A panic of the work
/// is the caller's panic (the manager task is restarted as for any other).
pub(crate) async fn off_thread<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => panic!("the blocking pool is gone: {e}"),
        },
    }
}
