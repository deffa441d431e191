//! The sd_notify protocol, sending side: what we tell our own service manager (systemd)
//! about the resolver as a whole. `NOTIFY_SOCKET` is read once, at construction, and never
//! passed on to children (their environment is built explicitly).

use std::time::Duration;

use sd_notify::NotifyState;

/// Notifications to the manager that started us, if any.
#[derive(Debug, Clone)]
pub struct UpwardNotifier {
    /// Whether `NOTIFY_SOCKET` was set when we started.
    enabled: bool,
    /// Keepalive interval asked for by `WATCHDOG_USEC` (meant for us: `WATCHDOG_PID` unset or ours).
    watchdog: Option<Duration>,
}

impl UpwardNotifier {
    pub fn from_env() -> Self {
        UpwardNotifier {
            enabled: std::env::var_os("NOTIFY_SOCKET").is_some(),
            watchdog: sd_notify::watchdog_enabled(),
        }
    }

    /// A notifier that sends nothing (tests, and runs outside a service manager).
    pub fn disabled() -> Self {
        UpwardNotifier {
            enabled: false,
            watchdog: None,
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    fn send(&self, states: &[NotifyState]) {
        if !self.enabled {
            return;
        }
        if let Err(e) = sd_notify::notify(states) {
            tracing::warn!(error = %e, "cannot notify the service manager");
        }
    }

    pub fn ready(&self, status: &str) {
        self.send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    pub fn status(&self, status: &str) {
        self.send(&[NotifyState::Status(status)]);
    }

    /// `RELOADING=1` with the `MONOTONIC_USEC` systemd needs to accept it; follow with
    /// [`ready`](Self::ready) when done.
    pub fn reloading(&self, status: &str) {
        match NotifyState::monotonic_usec_now() {
            Ok(now) => self.send(&[NotifyState::Reloading, now, NotifyState::Status(status)]),
            Err(e) => tracing::warn!(error = %e, "cannot read the monotonic clock"),
        }
    }

    pub fn stopping(&self, status: &str) {
        self.send(&[NotifyState::Stopping, NotifyState::Status(status)]);
    }

    /// Send `WATCHDOG=1` every half interval, if the service manager asked for it, until the
    /// returned task is aborted.
    pub fn spawn_watchdog(&self) -> Option<tokio::task::JoinHandle<()>> {
        let interval = self.watchdog?;
        if !self.enabled {
            return None;
        }
        let me = self.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval / 2);
            loop {
                tick.tick().await;
                me.send(&[NotifyState::Watchdog]);
            }
        }))
    }
}
