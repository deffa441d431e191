//! The manager process's life as one state machine: a closed set of events (signals, the
//! manager task's progress, the API's `/stop`, the root's end of the link), one pure
//! transition function ([`Lifecycle::on`]: phase and event → actions) and one loop
//! ([`serve`]) that feeds it a stream of events and has the actions carried out. Signals are
//! one source of events among others ([`signal_events`]), so a test drives the loop with a
//! channel and a recording stand-in for the process.

use futures_util::{Stream, StreamExt};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook_tokio::Signals;

use crate::manager::task::ManagerExit;

/// Manager-task failures (panics, errors) before its first start completed after which this
/// process gives up and the resolver stops: nothing runs yet that could be kept. Once the
/// start completed, the task is restarted whatever happens (backing off), never given up.
pub const START_MAX_FAILURES: u32 = 5;

/// What happens to the manager process, from every source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManagerEvent {
    /// SIGHUP: re-read the configuration files.
    ReloadRequested,
    /// SIGINT or SIGTERM: the root stops us.
    StopRequested,
    /// The link to the root closed: the root died or let us go.
    RootGone,
    /// The manager task completed its first start (at once for an incarnation that adopts).
    TaskStarted,
    /// The manager task failed this many times ([`START_MAX_FAILURES`] or more) before its
    /// first start completed.
    StartGivenUp { failures: u32 },
    /// The manager task's supervision ended.
    TaskEnded(TaskEnd),
    /// `POST /stop` (the process's stop token fired): the resolver stops, us first.
    StopAsked,
    /// Serving could not begin (the API socket is missing or unusable).
    ServingFailed,
}

/// How the manager task's supervision ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskEnd {
    /// On a stop (or cancelled): nothing to report.
    Stopped,
    /// Its first start failed: the resolver cannot run this configuration.
    StartFailed(String),
    /// Processes kept failing after the allowed fix attempts.
    Unstable { failed: Vec<String> },
    /// The supervision itself failed.
    SupervisionFailed(String),
}

impl TaskEnd {
    /// The end the supervision's outcome describes.
    pub fn of(outcome: Result<Option<ManagerExit>, tokio::task::JoinError>) -> TaskEnd {
        match outcome {
            Ok(Some(ManagerExit::StartFailed(e))) => TaskEnd::StartFailed(e.to_string()),
            Ok(Some(ManagerExit::Unstable { failed })) => TaskEnd::Unstable { failed },
            Ok(Some(ManagerExit::Stopped) | None) => TaskEnd::Stopped,
            Err(e) => TaskEnd::SupervisionFailed(e.to_string()),
        }
    }

    /// The exit code the resolver should stop with.
    pub fn exit_code(&self) -> u8 {
        match self {
            TaskEnd::Stopped => 0,
            TaskEnd::StartFailed(_) | TaskEnd::Unstable { .. } | TaskEnd::SupervisionFailed(_) => 1,
        }
    }
}

/// What comes after the manager task's first start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterStart {
    /// Serve.
    Serve,
    /// Serve and reload: a SIGHUP came during the start (the files may have changed since
    /// they were read), and is never a reason to stop.
    ServeAndReload,
}

/// Where the manager process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The manager task's first start is under way.
    Starting { then: AfterStart },
    /// The API, the file watchdog and the helpers run.
    Serving,
    /// We asked the root to stop everything with `code`; it stops us next.
    Leaving { code: u8 },
    /// Nothing more to serve: stop, and exit with `exit`.
    Done { exit: u8 },
}

/// What the process does for a transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Log what happened.
    Tell(Notice),
    /// Queue a reload of the configuration files.
    Reload,
    /// Begin serving: the API, the file watchdog, the helpers following the configuration.
    /// Its failure comes back as [`ManagerEvent::ServingFailed`].
    BeginServing,
    /// Give up the manager task (cancel its supervision): it cannot start.
    GiveUpTask,
    /// Ask the root to stop everything with this exit code.
    AskRootToStop { code: u8 },
}

/// What is logged on a transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A SIGHUP during start-up: the reload waits for the start to complete.
    ReloadAfterStart,
    /// A SIGHUP: the configuration files are read again.
    Reloading,
    /// A stop signal during start-up.
    StopDuringStart,
    /// The manager task failed too often before it completed its start.
    StartGivenUp { failures: u32 },
    /// How the manager task ended.
    TaskEnded(TaskEnd),
}

impl Notice {
    /// Write the notice to the log.
    pub fn log(&self) {
        match self {
            Notice::ReloadAfterStart => {
                tracing::info!("SIGHUP received during start-up; reloading once started");
            }
            Notice::Reloading => {
                tracing::info!("SIGHUP received; reloading the configuration files");
            }
            Notice::StopDuringStart => {
                tracing::warn!("stop signal received during start-up; stopping");
            }
            Notice::StartGivenUp { failures } => tracing::error!(
                "the manager task failed {failures} times before it completed the start; stopping"
            ),
            Notice::TaskEnded(TaskEnd::Stopped) => {}
            Notice::TaskEnded(TaskEnd::StartFailed(e)) => tracing::error!("start-up failed: {e}"),
            Notice::TaskEnded(TaskEnd::Unstable { failed }) => tracing::error!(
                "the resolver is unstable ({} failed); stopping",
                failed.join(", ")
            ),
            Notice::TaskEnded(TaskEnd::SupervisionFailed(e)) => {
                tracing::error!("manager supervision failed: {e}");
            }
        }
    }
}

/// The manager process's state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifecycle {
    /// Where the process is.
    pub phase: Phase,
}

impl Default for Lifecycle {
    fn default() -> Lifecycle {
        Lifecycle {
            phase: Phase::Starting {
                then: AfterStart::Serve,
            },
        }
    }
}

impl Lifecycle {
    /// The transition for `event`: the next phase, and what to do. Pure.
    pub fn on(&mut self, event: ManagerEvent) -> Vec<Action> {
        use ManagerEvent as E;
        match (self.phase, event) {
            (Phase::Done { .. }, _) => Vec::new(),
            (Phase::Starting { .. }, E::ReloadRequested) => {
                self.phase = Phase::Starting {
                    then: AfterStart::ServeAndReload,
                };
                vec![Action::Tell(Notice::ReloadAfterStart)]
            }
            (Phase::Starting { .. }, E::StopRequested) => {
                self.phase = Phase::Done { exit: 0 };
                vec![Action::Tell(Notice::StopDuringStart)]
            }
            (Phase::Starting { .. }, E::RootGone) => {
                self.phase = Phase::Done { exit: 1 };
                Vec::new()
            }
            (Phase::Starting { then }, E::TaskStarted) => {
                self.phase = Phase::Serving;
                match then {
                    AfterStart::Serve => vec![Action::BeginServing],
                    AfterStart::ServeAndReload => vec![Action::Reload, Action::BeginServing],
                }
            }
            (Phase::Starting { .. }, E::StartGivenUp { failures }) => {
                // Nothing runs yet that could be kept: end the supervision, stop the resolver.
                self.phase = Phase::Leaving { code: 1 };
                vec![
                    Action::Tell(Notice::StartGivenUp { failures }),
                    Action::GiveUpTask,
                    Action::AskRootToStop { code: 1 },
                ]
            }
            (Phase::Starting { .. } | Phase::Serving, E::TaskEnded(end)) => {
                let code = end.exit_code();
                self.phase = Phase::Leaving { code };
                vec![
                    Action::Tell(Notice::TaskEnded(end)),
                    Action::AskRootToStop { code },
                ]
            }
            (Phase::Serving | Phase::Leaving { .. }, E::ReloadRequested) => {
                // The manager reports the outcome (log, RELOADING/READY upward); events keep
                // being handled meanwhile.
                vec![Action::Tell(Notice::Reloading), Action::Reload]
            }
            (Phase::Serving | Phase::Leaving { .. }, E::StopRequested | E::RootGone) => {
                // The root stops us: finish what the API is doing and go.
                self.phase = Phase::Done { exit: 0 };
                Vec::new()
            }
            (Phase::Serving, E::StopAsked) => {
                // `POST /stop`: the root stops everything, us first.
                self.phase = Phase::Leaving { code: 0 };
                vec![Action::AskRootToStop { code: 0 }]
            }
            (Phase::Serving, E::ServingFailed) => {
                self.phase = Phase::Leaving { code: 1 };
                vec![Action::AskRootToStop { code: 1 }]
            }
            // The start's outcome comes once; a stop asked or an end while leaving changes
            // nothing: the root stops us.
            (Phase::Starting { .. }, E::StopAsked | E::ServingFailed)
            | (Phase::Serving, E::TaskStarted | E::StartGivenUp { .. })
            | (
                Phase::Leaving { .. },
                E::TaskStarted
                | E::StartGivenUp { .. }
                | E::TaskEnded(_)
                | E::StopAsked
                | E::ServingFailed,
            ) => Vec::new(),
        }
    }
}

/// What carries the actions out: the running process, or a test's record.
pub trait Effects {
    /// Carry `action` out (never [`Action::Tell`], which the loop logs itself); an event it
    /// leads to, if any.
    fn carry_out(
        &mut self,
        action: Action,
    ) -> impl std::future::Future<Output = Option<ManagerEvent>>;
}

/// Serve `events` until the lifecycle is done; the process's exit code. When no event can
/// come any more, nothing is left to serve for: as when the root is gone.
pub async fn serve(
    mut events: impl Stream<Item = ManagerEvent> + Unpin,
    effects: &mut impl Effects,
) -> u8 {
    let mut lifecycle = Lifecycle::default();
    loop {
        let event = events.next().await.unwrap_or(ManagerEvent::RootGone);
        let mut next = Some(event);
        while let Some(event) = next.take() {
            for action in lifecycle.on(event) {
                match action {
                    Action::Tell(notice) => notice.log(),
                    action => next = effects.carry_out(action).await.or(next),
                }
            }
        }
        if let Phase::Done { exit } = lifecycle.phase {
            return exit;
        }
    }
}

/// SIGHUP, SIGINT and SIGTERM as [`ManagerEvent`]s.
pub fn signal_events() -> std::io::Result<impl Stream<Item = ManagerEvent> + Unpin> {
    let signals = Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    Ok(signals.map(|sig| match sig {
        SIGHUP => ManagerEvent::ReloadRequested,
        _ => ManagerEvent::StopRequested,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ManagerEvent as E;

    /// Rows of (phase before, event, phase after, actions).
    fn check(rows: &[(Phase, ManagerEvent, Phase, Vec<Action>)]) {
        for (before, event, after, actions) in rows {
            let mut lifecycle = Lifecycle { phase: *before };
            let done = lifecycle.on(event.clone());
            assert_eq!(
                (lifecycle.phase, &done),
                (*after, actions),
                "{before:?} on {event:?}"
            );
        }
    }

    const STARTING: Phase = Phase::Starting {
        then: AfterStart::Serve,
    };
    const STARTING_RELOAD: Phase = Phase::Starting {
        then: AfterStart::ServeAndReload,
    };

    #[test]
    fn the_start_ends_in_serving_or_in_asking_the_root_to_stop() {
        let unstable = TaskEnd::Unstable {
            failed: vec!["kresd0".into()],
        };
        check(&[
            (
                STARTING,
                E::TaskStarted,
                Phase::Serving,
                vec![Action::BeginServing],
            ),
            (
                STARTING,
                E::ReloadRequested,
                STARTING_RELOAD,
                vec![Action::Tell(Notice::ReloadAfterStart)],
            ),
            (
                STARTING_RELOAD,
                E::TaskStarted,
                Phase::Serving,
                vec![Action::Reload, Action::BeginServing],
            ),
            (
                STARTING,
                E::StopRequested,
                Phase::Done { exit: 0 },
                vec![Action::Tell(Notice::StopDuringStart)],
            ),
            (
                STARTING_RELOAD,
                E::RootGone,
                Phase::Done { exit: 1 },
                vec![],
            ),
            (
                STARTING,
                E::StartGivenUp { failures: 5 },
                Phase::Leaving { code: 1 },
                vec![
                    Action::Tell(Notice::StartGivenUp { failures: 5 }),
                    Action::GiveUpTask,
                    Action::AskRootToStop { code: 1 },
                ],
            ),
            (
                STARTING,
                E::TaskEnded(unstable.clone()),
                Phase::Leaving { code: 1 },
                vec![
                    Action::Tell(Notice::TaskEnded(unstable)),
                    Action::AskRootToStop { code: 1 },
                ],
            ),
            (STARTING, E::StopAsked, STARTING, vec![]),
        ]);
    }

    #[test]
    fn serving_reloads_on_sighup_and_leaves_on_stops_and_ends() {
        let failed = TaskEnd::StartFailed("policy-loader failed".into());
        check(&[
            (
                Phase::Serving,
                E::ReloadRequested,
                Phase::Serving,
                vec![Action::Tell(Notice::Reloading), Action::Reload],
            ),
            (
                Phase::Serving,
                E::StopAsked,
                Phase::Leaving { code: 0 },
                vec![Action::AskRootToStop { code: 0 }],
            ),
            (
                Phase::Serving,
                E::ServingFailed,
                Phase::Leaving { code: 1 },
                vec![Action::AskRootToStop { code: 1 }],
            ),
            (
                Phase::Serving,
                E::TaskEnded(failed.clone()),
                Phase::Leaving { code: 1 },
                vec![
                    Action::Tell(Notice::TaskEnded(failed)),
                    Action::AskRootToStop { code: 1 },
                ],
            ),
            (
                Phase::Serving,
                E::TaskEnded(TaskEnd::Stopped),
                Phase::Leaving { code: 0 },
                vec![
                    Action::Tell(Notice::TaskEnded(TaskEnd::Stopped)),
                    Action::AskRootToStop { code: 0 },
                ],
            ),
            (
                Phase::Serving,
                E::StartGivenUp { failures: 7 },
                Phase::Serving,
                vec![],
            ),
            (
                Phase::Serving,
                E::StopRequested,
                Phase::Done { exit: 0 },
                vec![],
            ),
            (Phase::Serving, E::RootGone, Phase::Done { exit: 0 }, vec![]),
        ]);
    }

    #[test]
    fn leaving_asks_the_root_once_and_waits_to_be_stopped() {
        let leaving = Phase::Leaving { code: 1 };
        check(&[
            (leaving, E::StopAsked, leaving, vec![]),
            (leaving, E::TaskEnded(TaskEnd::Stopped), leaving, vec![]),
            (leaving, E::ServingFailed, leaving, vec![]),
            (
                leaving,
                E::ReloadRequested,
                leaving,
                vec![Action::Tell(Notice::Reloading), Action::Reload],
            ),
            (leaving, E::StopRequested, Phase::Done { exit: 0 }, vec![]),
            (leaving, E::RootGone, Phase::Done { exit: 0 }, vec![]),
            (
                Phase::Done { exit: 0 },
                E::TaskStarted,
                Phase::Done { exit: 0 },
                vec![],
            ),
        ]);
    }

    /// A stand-in for the process: it records what it is asked to do, and fails to serve
    /// when told to.
    #[derive(Default)]
    struct Recorder {
        done: Vec<Action>,
        serving_fails: bool,
    }

    impl Effects for Recorder {
        async fn carry_out(&mut self, action: Action) -> Option<ManagerEvent> {
            let failed = self.serving_fails && action == Action::BeginServing;
            self.done.push(action);
            failed.then_some(ManagerEvent::ServingFailed)
        }
    }

    /// Drive [`serve`] with `events` from a channel (its end, after them, is as when the root
    /// is gone): the exit code and what `process` was asked to do.
    async fn drive(events: Vec<ManagerEvent>, mut process: Recorder) -> (u8, Vec<Action>) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for event in events {
            tx.send(event).expect("channel open");
        }
        drop(tx);
        let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let exit = serve(stream, &mut process).await;
        (exit, process.done)
    }

    #[tokio::test]
    async fn the_loop_serves_a_reload_asked_during_start_up_then_stops_when_the_root_says() {
        let events = vec![
            E::ReloadRequested,
            E::TaskStarted,
            E::ReloadRequested,
            E::StopRequested,
            // Never seen: the loop ended.
            E::StopAsked,
        ];
        let (exit, done) = drive(events, Recorder::default()).await;
        assert_eq!(exit, 0);
        assert_eq!(done, [Action::Reload, Action::BeginServing, Action::Reload]);
    }

    #[tokio::test]
    async fn the_loop_asks_the_root_to_stop_once_when_the_api_cannot_serve() {
        let events = vec![
            E::TaskStarted,
            E::TaskEnded(TaskEnd::Unstable { failed: vec![] }),
            E::RootGone,
        ];
        let failing = Recorder {
            serving_fails: true,
            ..Recorder::default()
        };
        let (exit, done) = drive(events, failing).await;
        assert_eq!(exit, 0);
        assert_eq!(
            done,
            [Action::BeginServing, Action::AskRootToStop { code: 1 }]
        );
    }

    #[tokio::test]
    async fn the_loop_gives_up_a_task_that_cannot_start_and_exits_when_the_root_is_gone() {
        let events = vec![E::StartGivenUp { failures: 5 }, E::StopAsked];
        let (exit, done) = drive(events, Recorder::default()).await;
        assert_eq!(exit, 0);
        assert_eq!(
            done,
            [Action::GiveUpTask, Action::AskRootToStop { code: 1 }]
        );
    }

    #[tokio::test]
    async fn the_loop_exits_with_an_error_when_the_root_goes_during_start_up() {
        let (exit, done) = drive(vec![E::RootGone], Recorder::default()).await;
        assert_eq!(exit, 1);
        assert!(done.is_empty());
    }
}
