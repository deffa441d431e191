//! What the executor tells running workers through their control sockets: take a logging
//! change live, reopen the rules database, reload the TLS files, share one session-ticket
//! secret. Nothing here starts or stops a process; a worker that does not take a command is
//! logged (or, for logging, named to the caller, which restarts it).

use std::path::Path;

use serde_json::Value;

use super::rundir;
use crate::control::{self, ControlError};
use crate::service::WorkerId;
use kres_config::KresConfig;

/// Give every worker of `workers` the logging of `cfg`. Returns the workers that did not take
/// it: their socket failed, they did not answer in time, or they answered anything but the
/// new level.
pub async fn set_logging(cfg: &KresConfig, workers: &[WorkerId]) -> Vec<WorkerId> {
    let (expr, level) = kres_lua::live_logging(cfg);
    let mut failed = Vec::new();
    for (id, result) in control::command_all(&cfg.rundir, workers, &expr).await {
        match took_level(&result, level) {
            Taken::Yes => {}
            Taken::Answered(other) => {
                tracing::warn!(worker = %id, answer = %other, "did not take the logging change live; restarting it");
                failed.push(id);
            }
            Taken::Failed(e) => {
                tracing::warn!(worker = %id, "did not take the logging change live: {e}; restarting it");
                failed.push(id);
            }
        }
    }
    failed
}

/// Whether a worker took a command, as its answer says.
#[derive(Debug)]
enum Taken<'a> {
    /// It answered what taking it answers.
    Yes,
    /// It answered something else.
    Answered(&'a Value),
    /// Its control socket failed or did not answer in time.
    Failed(&'a ControlError),
}

/// A logging command is taken when the worker answers the new level, as a string.
fn took_level<'a>(answer: &'a Result<Value, ControlError>, level: &str) -> Taken<'a> {
    match answer {
        Ok(Value::String(s)) if s == level => Taken::Yes,
        Ok(other) => Taken::Answered(other),
        Err(e) => Taken::Failed(e),
    }
}

/// A rules reset is taken when `kr_rules_reset()` returns 0.
fn took_rules_reset(answer: &Result<Value, ControlError>) -> Taken<'_> {
    match answer {
        Ok(v) if *v == 0 => Taken::Yes,
        Ok(other) => Taken::Answered(other),
        Err(e) => Taken::Failed(e),
    }
}

/// A session-ticket secret is taken when kresd answers `true` (or 0).
fn took_ticket_secret(answer: &Result<Value, ControlError>) -> Taken<'_> {
    match answer {
        Ok(Value::Bool(true)) => Taken::Yes,
        Ok(v) if *v == 0 => Taken::Yes,
        Ok(other) => Taken::Answered(other),
        Err(e) => Taken::Failed(e),
    }
}

/// Tell every worker of `workers` to reopen the newest rules database.
pub async fn reset_rules(rundir: &Path, workers: &[WorkerId]) {
    let expr = "require('ffi').C.kr_rules_reset()";
    for (id, result) in control::command_all(rundir, workers, expr).await {
        match took_rules_reset(&result) {
            Taken::Yes => {}
            Taken::Answered(v) => tracing::warn!(worker = %id, result = %v, "rules reset failed"),
            Taken::Failed(e) => tracing::warn!(worker = %id, "rules reset failed: {e}"),
        }
    }
}

/// Reload the TLS certificate and key of `cfg` in every worker of `workers` (an unchanged
/// configuration renewed); nothing when either file is not configured or does not exist.
pub async fn reload_tls_files(cfg: &KresConfig, workers: &[WorkerId]) {
    let (Some(cert), Some(key)) = (&cfg.network.tls.cert_file, &cfg.network.tls.key_file) else {
        return;
    };
    if !cert.exists() || !key.exists() {
        return;
    }
    tracing::info!("TLS cert files reload triggered");
    let expr = format!(
        "net.tls({}, {})",
        kres_lua::quote_path(cert),
        kres_lua::quote_path(key)
    );
    for (id, result) in control::command_all(&cfg.rundir, workers, &expr).await {
        if let Err(e) = result {
            tracing::warn!(worker = %id, "TLS reload failed: {e}");
        }
    }
}

/// With several workers and no configured secret, give every worker of `workers` one random
/// TLS session-ticket secret so that resumption works across workers.
pub async fn share_ticket_secret(cfg: &KresConfig, workers: &[WorkerId]) {
    if cfg.workers < 2
        || cfg.network.tls.sticket_secret.is_some()
        || cfg.network.tls.sticket_secret_file.is_some()
    {
        return;
    }
    let secret = match rundir::random_hex(32) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot generate a TLS session-ticket secret: {e}");
            return;
        }
    };
    let expr = format!("net.tls_sticket_secret('{secret}')");
    for (id, result) in control::command_all(&cfg.rundir, workers, &expr).await {
        match took_ticket_secret(&result) {
            Taken::Yes => {}
            Taken::Answered(v) => {
                tracing::warn!(worker = %id, result = %v, "setting the TLS session-ticket secret failed")
            }
            Taken::Failed(e) => tracing::warn!(
                worker = %id,
                "setting the TLS session-ticket secret failed: {e}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn timeout() -> ControlError {
        ControlError::Timeout {
            path: "control/0".into(),
            timeout: control::COMMAND_TIMEOUT,
        }
    }

    #[test]
    fn a_command_is_taken_only_when_the_worker_answers_what_taking_it_answers() {
        let answers = [
            Ok(json!("debug")),
            Ok(json!("info")),
            Ok(json!(0)),
            Ok(json!(true)),
            Ok(json!(false)),
            Ok(json!(1)),
            Err(timeout()),
        ];
        let taken = |t: Taken<'_>| matches!(t, Taken::Yes);
        let level: Vec<bool> = answers
            .iter()
            .map(|a| taken(took_level(a, "debug")))
            .collect();
        let rules: Vec<bool> = answers.iter().map(|a| taken(took_rules_reset(a))).collect();
        let ticket: Vec<bool> = answers
            .iter()
            .map(|a| taken(took_ticket_secret(a)))
            .collect();
        assert_eq!(level, [true, false, false, false, false, false, false]);
        assert_eq!(rules, [false, false, true, false, false, false, false]);
        assert_eq!(ticket, [false, false, true, true, false, false, false]);
        assert!(matches!(
            took_level(&Err(timeout()), "debug"),
            Taken::Failed(ControlError::Timeout { .. })
        ));
        assert!(matches!(
            took_rules_reset(&Ok(json!(-1))),
            Taken::Answered(v) if *v == json!(-1)
        ));
    }
}
