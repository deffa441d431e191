//! A watch on every key under a prefix, from a revision on: the changes in revision order,
//! each once, across lost members. When its stream breaks (a member killed, or cut off from
//! the leader, which etcd makes known by ending the stream) the watch opens a new one on the
//! next member from the revision after the last change it gave, so nothing is missed or
//! given twice. When etcd has compacted away the revisions asked for, it says so
//! ([`WatchEvent::Compacted`]) instead of changes: the caller reads the whole document again
//! and watches from the revision of that read.

use std::time::Duration;

use bytes::Bytes;

use crate::error::Error;
use crate::store::{show, Retry, Store};
use crate::transport::{AttemptError, Lines};
use crate::wire;

/// The longest pause before opening a stream again after it broke.
const MAX_REOPEN_PAUSE: Duration = Duration::from_secs(1);

/// One change to one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        mod_revision: i64,
    },
    Deleted {
        key: Vec<u8>,
        mod_revision: i64,
    },
}

impl Change {
    pub fn key(&self) -> &[u8] {
        match self {
            Change::Put { key, .. } | Change::Deleted { key, .. } => key,
        }
    }

    pub fn mod_revision(&self) -> i64 {
        match self {
            Change::Put { mod_revision, .. } | Change::Deleted { mod_revision, .. } => {
                *mod_revision
            }
        }
    }
}

/// What a watch gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// Changes, in revision order (those of one transaction together).
    Changed { changes: Vec<Change> },
    /// The revisions from the one asked are compacted away, up to `compact_revision`:
    /// read the whole document again. The watch gives this again if asked for more.
    Compacted { compact_revision: i64 },
}

impl Store {
    /// Every change to keys under `prefix` from `from_revision` on.
    pub fn watch(&self, prefix: &[u8], from_revision: i64) -> Watch {
        Watch::new(self.clone(), prefix.to_vec(), from_revision)
    }
}

/// A watch on a prefix: [`Watch::next`] gives the next event.
pub struct Watch {
    store: Store,
    prefix: Vec<u8>,
    /// The revision of the next change wanted: where a new stream starts.
    next_revision: i64,
    /// The open stream, if any.
    stream: Option<Lines>,
    /// The pause before the next reopening; grows while streams keep breaking.
    reopen_pause: Duration,
    /// What this watch is, for errors.
    what: String,
}

impl Watch {
    fn new(store: Store, prefix: Vec<u8>, from_revision: i64) -> Watch {
        let what = format!("watch of {}", show(&prefix));
        Watch {
            store,
            prefix,
            next_revision: from_revision.max(1),
            stream: None,
            reopen_pause: Duration::ZERO,
            what,
        }
    }

    /// The revision the next change will have at least.
    pub fn next_revision(&self) -> i64 {
        self.next_revision
    }

    /// The events as a stream (which never ends: after an error it tries again).
    pub fn into_stream(self) -> impl futures_util::Stream<Item = Result<WatchEvent, Error>> {
        futures_util::stream::unfold(self, |mut watch| async move {
            let event = watch.next().await;
            Some((event, watch))
        })
    }

    /// The next event. An error says no member took the watch within the store's timeout
    /// (or an answer was refused); asking again tries again from where it stopped.
    pub async fn next(&mut self) -> Result<WatchEvent, Error> {
        loop {
            if self.stream.is_none() {
                if !self.reopen_pause.is_zero() {
                    tokio::time::sleep(self.reopen_pause).await;
                }
                self.reopen_pause = (self.reopen_pause * 2)
                    .max(Duration::from_millis(50))
                    .min(MAX_REOPEN_PAUSE);
                let opened = self.open().await?;
                self.stream = Some(opened);
            }
            let Some(lines) = self.stream.as_mut() else {
                continue;
            };
            let line = match lines.next().await {
                Ok(Some(line)) => line,
                // The stream broke or ended: open another from `next_revision`.
                Ok(None)
                | Err(AttemptError::Interrupted(_))
                | Err(AttemptError::Connect(_))
                | Err(AttemptError::Refused { .. }) => {
                    self.stream = None;
                    continue;
                }
                Err(AttemptError::Final(e)) => {
                    self.stream = None;
                    return Err(e);
                }
            };
            match self.read(&line)? {
                Some(event) => {
                    self.reopen_pause = Duration::ZERO;
                    return Ok(event);
                }
                None => continue,
            }
        }
    }

    /// One line of the stream: an event, or nothing to give (the stream was cancelled and
    /// must be opened again, or the line carries no change).
    fn read(&mut self, line: &[u8]) -> Result<Option<WatchEvent>, Error> {
        let answer = self.parse(line)?;
        let answer = match answer {
            Ok(answer) => answer,
            Err(_refused) => {
                self.stream = None;
                return Ok(None);
            }
        };
        if answer.compact_revision > 0 {
            self.stream = None;
            return Ok(Some(WatchEvent::Compacted {
                compact_revision: answer.compact_revision,
            }));
        }
        if answer.canceled {
            // Cancelled by the member (no leader, for one): another is asked.
            self.stream = None;
            return Ok(None);
        }
        if answer.events.is_empty() {
            return Ok(None);
        }
        let mut changes = Vec::with_capacity(answer.events.len());
        for event in answer.events {
            let key = wire::decode(&format!("{}: key", self.what), &event.kv.key)?;
            if !key.starts_with(&self.prefix) {
                return Err(Error::malformed(
                    &self.what,
                    format!("a change to {} outside the prefix", show(&key)),
                ));
            }
            let mod_revision = event.kv.mod_revision;
            if mod_revision < self.next_revision {
                return Err(Error::malformed(
                    &self.what,
                    format!(
                        "a change at revision {mod_revision}, before {} asked for",
                        self.next_revision
                    ),
                ));
            }
            let change = match event.kind.as_deref() {
                None | Some("PUT") => Change::Put {
                    value: self
                        .store
                        .value(&event.kv.value, &format!("{} at {}", self.what, show(&key)))?,
                    key,
                    mod_revision,
                },
                Some("DELETE") => Change::Deleted { key, mod_revision },
                Some(other) => {
                    return Err(Error::malformed(
                        &self.what,
                        format!("an event of unknown type {other:?}"),
                    ))
                }
            };
            changes.push(change);
        }
        // Changes come in revision order; the next wanted is after the last one given.
        self.next_revision = changes
            .iter()
            .map(Change::mod_revision)
            .max()
            .unwrap_or(self.next_revision - 1)
            + 1;
        Ok(Some(WatchEvent::Changed { changes }))
    }

    /// A stream line: the watch answer, or the refusal etcd wrote in its place.
    fn parse(&self, line: &[u8]) -> Result<Result<wire::WatchResponse, AttemptError>, Error> {
        let line: wire::StreamLine<wire::WatchResponse> = wire::parse(&self.what, line)?;
        match (line.result, line.error) {
            (_, Some(e)) => Ok(Err(AttemptError::Refused {
                code: e.code,
                message: e.message,
            })),
            (Some(answer), None) => Ok(Ok(answer)),
            (None, None) => Err(Error::malformed(
                &self.what,
                "neither a result nor an error",
            )),
        }
    }

    /// Open a stream on the first member that takes it, from `next_revision`; returns once
    /// etcd said the watch is created (or gave its first answer).
    async fn open(&mut self) -> Result<Lines, Error> {
        let request = wire::WatchCreate {
            create_request: wire::WatchCreateRequest {
                key: wire::encode(&self.prefix),
                range_end: wire::encode(&wire::prefix_end(&self.prefix)),
                start_revision: self.next_revision,
            },
        };
        let body =
            Bytes::from(serde_json::to_vec(&request).map_err(|e| Error::malformed(&self.what, e))?);
        let limit = self.store.answer_limit();
        let what = self.what.clone();
        self.store
            .attempts("watch", Retry::Read, |store, endpoint| {
                let body = body.clone();
                let what = what.clone();
                async move {
                    let answer = store.send(endpoint, "/v3/watch", body).await?;
                    let mut lines = Lines::new(answer, limit, what.clone());
                    let first = lines.next().await?.ok_or_else(|| {
                        AttemptError::Interrupted("the stream ended at once".to_owned())
                    })?;
                    created(&what, &first)?;
                    Ok(lines)
                }
            })
            .await
    }
}

/// The first line of a stream: etcd's word that the watch is created, or its refusal (the
/// next member is tried).
fn created(what: &str, line: &[u8]) -> Result<(), AttemptError> {
    let line: wire::StreamLine<wire::WatchResponse> =
        wire::parse(what, line).map_err(AttemptError::Final)?;
    match (line.result, line.error) {
        (_, Some(e)) => Err(AttemptError::Refused {
            code: e.code,
            message: e.message,
        }),
        (Some(answer), None) if answer.created && !answer.canceled => Ok(()),
        (Some(answer), None) => Err(AttemptError::Final(Error::malformed(
            what,
            format!(
                "the stream began with another answer than its creation ({})",
                answer.cancel_reason
            ),
        ))),
        (None, None) => Err(AttemptError::Final(Error::malformed(
            what,
            "neither a result nor an error",
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreOptions;

    fn watch() -> Watch {
        let mut options = StoreOptions::new(vec!["http://127.0.0.1:1".into()]);
        options.max_value_bytes = 8;
        Store::new(&options).unwrap().watch(b"/f/", 5)
    }

    /// Each stream line read by a fresh watch from revision 5: the event, or the error's text.
    fn check(rows: &[(&str, Result<Option<WatchEvent>, &str>)]) {
        for (line, expected) in rows {
            let got = watch().read(line.as_bytes());
            match (got, expected) {
                (Ok(event), Ok(want)) => assert_eq!(&event, want, "{line}"),
                (Err(e), Err(want)) => {
                    assert!(e.to_string().contains(want), "{line}: {e}")
                }
                (got, want) => panic!("{line}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn stream_lines_are_checked_before_they_become_events() {
        // "/f/a" = L2YvYQ==, "/x" = L3g=, "v" = dg==, 9 bytes = MTIzNDU2Nzg5
        check(&[
            (
                r#"{"result":{"events":[{"kv":{"key":"L2YvYQ==","mod_revision":"6","value":"dg=="}},{"type":"DELETE","kv":{"key":"L2YvYQ==","mod_revision":"7"}}]}}"#,
                Ok(Some(WatchEvent::Changed {
                    changes: vec![
                        Change::Put {
                            key: b"/f/a".to_vec(),
                            value: b"v".to_vec(),
                            mod_revision: 6,
                        },
                        Change::Deleted {
                            key: b"/f/a".to_vec(),
                            mod_revision: 7,
                        },
                    ],
                })),
            ),
            (
                r#"{"result":{"canceled":true,"compact_revision":"9"}}"#,
                Ok(Some(WatchEvent::Compacted {
                    compact_revision: 9,
                })),
            ),
            // Cancelled for another reason: opened again elsewhere, nothing to give.
            (r#"{"result":{"canceled":true}}"#, Ok(None)),
            (
                r#"{"error":{"code":14,"message":"etcdserver: no leader"}}"#,
                Ok(None),
            ),
            (r#"{"result":{"events":[]}}"#, Ok(None)),
            (
                r#"{"result":{"events":[{"kv":{"key":"L3g=","mod_revision":"6"}}]}}"#,
                Err("watch of /f/: a change to /x outside the prefix"),
            ),
            (
                r#"{"result":{"events":[{"kv":{"key":"L2YvYQ==","mod_revision":"4"}}]}}"#,
                Err("a change at revision 4, before 5 asked for"),
            ),
            (
                r#"{"result":{"events":[{"type":"MOVE","kv":{"key":"L2YvYQ==","mod_revision":"6"}}]}}"#,
                Err("an event of unknown type \"MOVE\""),
            ),
            (
                r#"{"result":{"events":[{"kv":{"key":"L2YvYQ==","mod_revision":"6","value":"*"}}]}}"#,
                Err("watch of /f/ at /f/a: value: not base64"),
            ),
            (
                r#"{"result":{"events":[{"kv":{"key":"L2YvYQ==","mod_revision":"6","value":"MTIzNDU2Nzg5"}}]}}"#,
                Err("watch of /f/ at /f/a: value: over 8 bytes"),
            ),
            (
                r#"{"result":{"events":{}}}"#,
                Err("watch of /f/: invalid type"),
            ),
            (r#"{}"#, Err("watch of /f/: neither a result nor an error")),
            ("\u{0}", Err("watch of /f/: ")),
        ]);
    }

    #[test]
    fn the_next_revision_follows_the_changes_given() {
        let mut w = watch();
        let line = r#"{"result":{"events":[{"kv":{"key":"L2YvYQ==","mod_revision":"6"}},{"kv":{"key":"L2YvYQ==","mod_revision":"8"}}]}}"#;
        w.read(line.as_bytes()).unwrap();
        assert_eq!(w.next_revision(), 9);
        // A change given already, sent again by a member the watch moved to, is refused.
        let again = r#"{"result":{"events":[{"kv":{"key":"L2YvYQ==","mod_revision":"8"}}]}}"#;
        assert!(w.read(again.as_bytes()).is_err());
    }
}
