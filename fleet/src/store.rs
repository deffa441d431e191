//! The store: the few etcd v3 calls a fleet needs, each bounded in time and size, over
//! every member given. A call goes to the member that answered last, and on to the next
//! while it may: any member may take a read; a write goes on only when it cannot have been
//! applied (nothing was sent, or etcd refused it for want of a leader). Rounds over the
//! members go on, a little apart, until the call's timeout, which is the one bound a caller
//! waits: two members of three down makes every write fail with [`Error::Timeout`] naming
//! the last refusal, never hang. A read gives each member a third of the timeout before it
//! asks the next; a write sent is waited for (a write given up may still be applied: the
//! caller reads it back).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::{Settings, StoreOptions};
use crate::error::{ConfigError, Error};
use crate::transport::{self, AttemptError, Call, Lines};
use crate::wire;

/// gRPC's `UNAVAILABLE`: etcd's answer when a member cannot serve a call now.
const UNAVAILABLE: i64 = 14;
/// gRPC's `UNAUTHENTICATED`: the token expired (or auth is on and none was sent).
const UNAUTHENTICATED: i64 = 16;
/// The longest pause between two rounds over the members.
const MAX_ROUND_PAUSE: Duration = Duration::from_millis(500);
/// The least time a read is given on one member before the next is asked.
const MIN_READ_SHARE: Duration = Duration::from_millis(300);
/// Room for the JSON around a value in an answer (keys, revisions, headers).
const ANSWER_OVERHEAD: usize = 64 << 10;

/// A key's value and the revision that last changed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

/// A read: the key's entry if it exists, and the store's revision when it was read (a watch
/// from `revision + 1` misses nothing after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub entry: Option<Entry>,
    pub revision: i64,
}

/// The keys under a prefix with their entries, and the store's revision when they were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub entries: Vec<(Vec<u8>, Entry)>,
    pub revision: i64,
}

/// What `put_if` compares the key against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The key must not exist (create only).
    Absent,
    /// The key's modification revision must be this one.
    ModRevision(i64),
}

/// Another key written in the same transaction as `put_if_with`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Also<'a> {
    /// This value at this key.
    Put(&'a [u8], &'a [u8]),
    /// This key deleted (nothing when it is absent).
    Delete(&'a [u8]),
}

/// A lease granted by etcd: records put with it go when it expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub id: i64,
    /// The time to live etcd granted (it may raise a short one to its minimum).
    pub ttl: Duration,
}

/// Whether a call may be tried again on another member after it was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// A read: any member, any failure short of a final one.
    Read,
    /// A write: only when it cannot have been applied.
    Write,
}

/// A client of one etcd cluster; cheap to clone (clones share the preferred member and the
/// auth token).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    settings: Settings,
    /// The member that answered last, tried first.
    preferred: AtomicUsize,
    /// etcd's auth token, fetched when auth is on and first needed, again when refused.
    token: Mutex<Option<String>>,
}

impl Store {
    /// Check the options (endpoints, TLS files); nothing is connected yet.
    pub fn new(options: &StoreOptions) -> Result<Store, ConfigError> {
        Ok(Store {
            inner: Arc::new(Inner {
                settings: Settings::check(options)?,
                preferred: AtomicUsize::new(0),
                token: Mutex::new(None),
            }),
        })
    }

    /// The largest value taken or written.
    pub fn max_value_bytes(&self) -> usize {
        self.inner.settings.max_value_bytes
    }

    /// The bound on one answer (or one streamed line): a value at its largest, in base64,
    /// with room for the JSON around it.
    pub(crate) fn answer_limit(&self) -> usize {
        self.max_value_bytes().div_ceil(3) * 4 + ANSWER_OVERHEAD
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.inner.settings.timeout
    }

    /// `key`'s value and modification revision (linearizable: what a quorum agreed on), and
    /// the store's revision.
    pub async fn get(&self, key: &[u8]) -> Result<Read, Error> {
        let what = format!("range of {}", show(key));
        let request = wire::RangeRequest {
            key: wire::encode(key),
            ..wire::RangeRequest::default()
        };
        let answer: wire::RangeResponse = self
            .unary("range", "/v3/kv/range", &request, Retry::Read, &what)
            .await?;
        let entry = self.entry(key, answer.kvs, &what)?;
        Ok(Read {
            entry,
            revision: answer.header.revision,
        })
    }

    /// `key`'s value as it was at `revision` (a past one, still in the store's history: an
    /// older one compacted away is an error naming it).
    pub async fn get_at(&self, key: &[u8], revision: i64) -> Result<Option<Entry>, Error> {
        let what = format!("range of {} at revision {revision}", show(key));
        let request = wire::RangeRequest {
            key: wire::encode(key),
            revision: positive(revision, &what)?,
            ..wire::RangeRequest::default()
        };
        let answer: wire::RangeResponse = self
            .unary("range", "/v3/kv/range", &request, Retry::Read, &what)
            .await?;
        self.entry(key, answer.kvs, &what)
    }

    /// Write `value` at `key` if the key is as `expect`ed, in one transaction; the store's
    /// new revision (the key's new modification revision), or [`Error::Conflict`] with the
    /// key's current revision.
    pub async fn put_if(&self, key: &[u8], value: &[u8], expect: Expect) -> Result<i64, Error> {
        self.put_if_with(key, value, expect, &[]).await
    }

    /// [`Store::put_if`], with the writes of `also` made in the same transaction (and so at
    /// the same revision) when the comparison holds; `also` must not name `key`.
    pub async fn put_if_with(
        &self,
        key: &[u8],
        value: &[u8],
        expect: Expect,
        also: &[Also<'_>],
    ) -> Result<i64, Error> {
        self.check_value(key, value)?;
        for also in also {
            if let Also::Put(k, v) = also {
                self.check_value(k, v)?;
            }
        }
        let what = format!("transaction on {}", show(key));
        let (target, mod_revision, create_revision) = match expect {
            Expect::Absent => ("CREATE", None, Some(0)),
            Expect::ModRevision(r) => ("MOD", Some(r), None),
        };
        let request = wire::TxnRequest {
            compare: vec![wire::Compare {
                target,
                key: wire::encode(key),
                result: "EQUAL",
                mod_revision,
                create_revision,
            }],
            success: std::iter::once(wire::RequestOp::Put(wire::PutRequest {
                key: wire::encode(key),
                value: wire::encode(value),
                lease: 0,
            }))
            .chain(also.iter().map(|also| match *also {
                Also::Put(key, value) => wire::RequestOp::Put(wire::PutRequest {
                    key: wire::encode(key),
                    value: wire::encode(value),
                    lease: 0,
                }),
                Also::Delete(key) => wire::RequestOp::Delete(wire::DeleteRequest {
                    key: wire::encode(key),
                }),
            }))
            .collect(),
            failure: vec![wire::RequestOp::Range(wire::RangeRequest {
                key: wire::encode(key),
                ..wire::RangeRequest::default()
            })],
        };
        let answer: wire::TxnResponse = self
            .unary("put_if", "/v3/kv/txn", &request, Retry::Write, &what)
            .await?;
        if answer.succeeded {
            return positive(answer.header.revision, &what);
        }
        let Some(range) = answer
            .responses
            .into_iter()
            .next()
            .and_then(|r| r.response_range)
        else {
            return Err(Error::malformed(
                what,
                "a failed comparison without the key's range",
            ));
        };
        // Only the revision is wanted: the value is not decoded (nor checked for size
        // beyond the answer's bound).
        let current = match range.kvs.as_slice() {
            [] => None,
            [kv] => Some(kv.mod_revision),
            _ => return Err(Error::malformed(what, "several keys for one")),
        };
        Err(Error::Conflict { current })
    }

    /// The keys under `prefix`, in key order, at most `max` of them, with their entries, and
    /// the store's revision. The answer is bounded as one value's is.
    pub async fn list(&self, prefix: &[u8], max: usize) -> Result<Listing, Error> {
        let what = format!("range under {}", show(prefix));
        let request = wire::RangeRequest {
            key: wire::encode(prefix),
            range_end: wire::encode(&wire::prefix_end(prefix)),
            limit: i64::try_from(max).unwrap_or(i64::MAX),
            ..wire::RangeRequest::default()
        };
        let answer: wire::RangeResponse = self
            .unary("range", "/v3/kv/range", &request, Retry::Read, &what)
            .await?;
        let mut entries = Vec::with_capacity(answer.kvs.len().min(max));
        for kv in answer.kvs.into_iter().take(max) {
            let key = wire::decode(&format!("{what}: key"), &kv.key)?;
            if !key.starts_with(prefix) {
                return Err(Error::malformed(what, "a key outside the prefix"));
            }
            let value = self.value(&kv.value, &what)?;
            entries.push((
                key,
                Entry {
                    value,
                    mod_revision: positive(kv.mod_revision, &what)?,
                },
            ));
        }
        Ok(Listing {
            entries,
            revision: positive(answer.header.revision, &what)?,
        })
    }

    /// Ask for a lease of `ttl` (whole seconds, at least one).
    pub async fn grant_lease(&self, ttl: Duration) -> Result<Lease, Error> {
        let seconds = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let request = wire::LeaseGrantRequest { ttl: seconds };
        let answer: wire::LeaseGrantResponse = self
            .unary(
                "grant_lease",
                "/v3/lease/grant",
                &request,
                Retry::Write,
                "lease grant",
            )
            .await?;
        if !answer.error.is_empty() {
            return Err(Error::malformed("lease grant", answer.error));
        }
        if answer.id == 0 || answer.ttl <= 0 {
            return Err(Error::malformed(
                "lease grant",
                format!("lease {} with a TTL of {}", answer.id, answer.ttl),
            ));
        }
        Ok(Lease {
            id: answer.id,
            ttl: Duration::from_secs(answer.ttl.unsigned_abs()),
        })
    }

    /// Renew `lease` once; the time it has left. [`Error::LeaseExpired`] when it is gone.
    pub async fn keep_alive(&self, lease: i64) -> Result<Duration, Error> {
        let what = format!("keep-alive of lease {lease:x}");
        let body = to_body(&wire::LeaseId { id: lease }, &what)?;
        let limit = ANSWER_OVERHEAD;
        let line = self
            .attempts("keep_alive", Retry::Read, |store, endpoint| {
                let body = body.clone();
                let what = what.clone();
                async move {
                    let answer = store.send(endpoint, "/v3/lease/keepalive", body).await?;
                    let mut lines = Lines::new(answer, limit, what.clone());
                    match lines.next().await? {
                        Some(line) => Ok(line),
                        None => Err(AttemptError::Interrupted(
                            "the stream ended without an answer".to_owned(),
                        )),
                    }
                }
            })
            .await?;
        let answer: wire::StreamLine<wire::LeaseKeepAliveResponse> = wire::parse(&what, &line)?;
        if let Some(e) = answer.error {
            return Err(Error::Server {
                call: "keep_alive",
                endpoint: self.preferred_endpoint(),
                code: e.code,
                message: e.message,
            });
        }
        let ttl = answer
            .result
            .ok_or_else(|| Error::malformed(&what, "neither a result nor an error"))?
            .ttl;
        if ttl <= 0 {
            return Err(Error::LeaseExpired { id: lease });
        }
        Ok(Duration::from_secs(ttl.unsigned_abs()))
    }

    /// Let `lease` go now, and the records put with it.
    pub async fn revoke_lease(&self, lease: i64) -> Result<(), Error> {
        let _: wire::PutResponse = self
            .unary(
                "revoke_lease",
                "/v3/lease/revoke",
                &wire::LeaseId { id: lease },
                Retry::Write,
                "lease revoke",
            )
            .await?;
        Ok(())
    }

    /// Write `value` at `key` for as long as `lease` lives (a node's status record); the
    /// store's new revision.
    pub async fn put_with_lease(&self, key: &[u8], value: &[u8], lease: i64) -> Result<i64, Error> {
        self.check_value(key, value)?;
        let what = format!("put of {}", show(key));
        let request = wire::PutRequest {
            key: wire::encode(key),
            value: wire::encode(value),
            lease,
        };
        let answer: wire::PutResponse = self
            .unary(
                "put_with_lease",
                "/v3/kv/put",
                &request,
                Retry::Write,
                &what,
            )
            .await?;
        positive(answer.header.revision, &what)
    }

    /// The entry of `key` in a range answer, checked.
    pub(crate) fn entry(
        &self,
        key: &[u8],
        kvs: Vec<wire::KeyValue>,
        what: &str,
    ) -> Result<Option<Entry>, Error> {
        let mut kvs = kvs.into_iter();
        let Some(kv) = kvs.next() else {
            return Ok(None);
        };
        if kvs.next().is_some() {
            return Err(Error::malformed(what, "several keys for one"));
        }
        if wire::decode(&format!("{what}: key"), &kv.key)? != key {
            return Err(Error::malformed(what, "another key than the one asked"));
        }
        let value = self.value(&kv.value, what)?;
        Ok(Some(Entry {
            value,
            mod_revision: positive(kv.mod_revision, what)?,
        }))
    }

    /// A value from base64, bounded.
    pub(crate) fn value(&self, text: &str, what: &str) -> Result<Vec<u8>, Error> {
        let limit = self.max_value_bytes();
        if text.len() / 4 * 3 > limit.saturating_add(3) {
            return Err(Error::TooLarge {
                what: format!("{what}: value"),
                limit,
            });
        }
        let value = wire::decode(&format!("{what}: value"), text)?;
        if value.len() > limit {
            return Err(Error::TooLarge {
                what: format!("{what}: value"),
                limit,
            });
        }
        Ok(value)
    }

    fn check_value(&self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        if value.len() > self.max_value_bytes() {
            return Err(Error::TooLarge {
                what: format!("value for {}", show(key)),
                limit: self.max_value_bytes(),
            });
        }
        Ok(())
    }

    fn preferred_endpoint(&self) -> String {
        let endpoints = &self.inner.settings.endpoints;
        let at = self.inner.preferred.load(Ordering::Relaxed) % endpoints.len();
        endpoints[at].to_string()
    }

    /// One unary call: the whole answer, bounded, parsed.
    async fn unary<T: for<'de> serde::Deserialize<'de>>(
        &self,
        call: &'static str,
        path: &'static str,
        request: &impl serde::Serialize,
        retry: Retry,
        what: &str,
    ) -> Result<T, Error> {
        let body = to_body(request, what)?;
        let limit = self.answer_limit();
        let bytes = self
            .attempts(call, retry, |store, endpoint| {
                let body = body.clone();
                let what = what.to_owned();
                async move {
                    let answer = store.send(endpoint, path, body).await?;
                    transport::read_to_end(answer, limit, &what).await
                }
            })
            .await?;
        wire::parse(what, &bytes)
    }

    /// Send one request to the member at `endpoint` with the auth token (fetched first if
    /// auth is on and there is none yet).
    pub(crate) async fn send(
        &self,
        endpoint: usize,
        path: &str,
        body: Bytes,
    ) -> Result<transport::Answer, AttemptError> {
        let settings = &self.inner.settings;
        let member = &settings.endpoints[endpoint];
        let token = self.token(endpoint).await?;
        let call = Call {
            path,
            body,
            token: token.as_deref(),
        };
        transport::send(settings, member, &call).await
    }

    /// The auth token, when auth is on: the one held, or a new one from `endpoint`.
    async fn token(&self, endpoint: usize) -> Result<Option<String>, AttemptError> {
        let Some(credentials) = &self.inner.settings.auth else {
            return Ok(None);
        };
        let mut held = self.inner.token.lock().await;
        if let Some(token) = held.as_ref() {
            return Ok(Some(token.clone()));
        }
        let request = wire::AuthenticateRequest {
            name: &credentials.username,
            password: &credentials.password,
        };
        let body = to_body(&request, "authenticate").map_err(AttemptError::Final)?;
        let settings = &self.inner.settings;
        let call = Call {
            path: "/v3/auth/authenticate",
            body,
            token: None,
        };
        // Nothing of the call itself was sent yet: a broken exchange here is no unknown
        // outcome.
        let unsent = |e| match e {
            AttemptError::Interrupted(reason) => {
                AttemptError::Connect(format!("authenticating: {reason}"))
            }
            other => other,
        };
        let answer = transport::send(settings, &settings.endpoints[endpoint], &call)
            .await
            .map_err(unsent)?;
        let bytes = transport::read_to_end(answer, ANSWER_OVERHEAD, "authenticate")
            .await
            .map_err(unsent)?;
        let answer: wire::AuthenticateResponse =
            wire::parse("authenticate", &bytes).map_err(AttemptError::Final)?;
        if answer.token.is_empty() {
            return Err(AttemptError::Final(Error::malformed(
                "authenticate",
                "no token in the answer",
            )));
        }
        *held = Some(answer.token.clone());
        Ok(Some(answer.token))
    }

    /// Run `attempt` on the members in turn from the preferred one, round after round, until
    /// it succeeds, fails for good, or the call's timeout passes.
    pub(crate) async fn attempts<T, F, Fut>(
        &self,
        call: &'static str,
        retry: Retry,
        mut attempt: F,
    ) -> Result<T, Error>
    where
        F: FnMut(Store, usize) -> Fut,
        Fut: std::future::Future<Output = Result<T, AttemptError>>,
    {
        let timeout = self.timeout();
        let deadline = Instant::now() + timeout;
        let read_share = (timeout / 3).max(MIN_READ_SHARE);
        let mut last = String::from("no member tried yet");
        let rounds = async {
            let endpoints = &self.inner.settings.endpoints;
            let mut pause = Duration::from_millis(50);
            let mut token_renewed = false;
            loop {
                let start = self.inner.preferred.load(Ordering::Relaxed);
                let mut tried = 0;
                while tried < endpoints.len() {
                    let at = (start + tried) % endpoints.len();
                    let endpoint = endpoints[at].to_string();
                    let outcome = match retry {
                        // A member that holds a read (one cut off from a leader it has not
                        // yet missed) has a share of the time; the next may answer.
                        Retry::Read => {
                            match tokio::time::timeout(read_share, attempt(self.clone(), at)).await
                            {
                                Ok(outcome) => outcome,
                                Err(_) => Err(AttemptError::Connect(format!(
                                    "no answer within {read_share:?}"
                                ))),
                            }
                        }
                        // A write once sent is waited for: given up, it may still be applied.
                        Retry::Write => attempt(self.clone(), at).await,
                    };
                    match outcome {
                        Ok(v) => {
                            self.inner.preferred.store(at, Ordering::Relaxed);
                            return Ok(v);
                        }
                        Err(AttemptError::Final(e)) => return Err(e),
                        Err(AttemptError::Connect(reason)) => {
                            last = format!("{endpoint}: {reason}")
                        }
                        Err(AttemptError::Interrupted(reason)) if retry == Retry::Read => {
                            last = format!("{endpoint}: {reason}")
                        }
                        Err(AttemptError::Interrupted(reason)) => {
                            return Err(Error::Interrupted {
                                call,
                                endpoint,
                                reason,
                            })
                        }
                        Err(AttemptError::Refused { code, message })
                            if is_token_refused(code, &message) && !token_renewed =>
                        {
                            // Once a call: a fresh token, the same member again.
                            token_renewed = true;
                            *self.inner.token.lock().await = None;
                            last = format!("{endpoint}: {message}");
                            continue;
                        }
                        Err(AttemptError::Refused { code, message })
                            if may_retry(code, &message, retry) =>
                        {
                            last = format!("{endpoint}: {message}")
                        }
                        Err(AttemptError::Refused { code, message }) => {
                            return Err(Error::Server {
                                call,
                                endpoint,
                                code,
                                message,
                            })
                        }
                    }
                    tried += 1;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_ROUND_PAUSE);
            }
        };
        let outcome = tokio::time::timeout_at(deadline, rounds).await;
        match outcome {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout {
                call,
                after: timeout,
                last,
            }),
        }
    }
}

/// Whether a refusal means a write cannot have been applied (or, for a read, that another
/// member may answer).
fn may_retry(code: i64, message: &str, retry: Retry) -> bool {
    if code != UNAVAILABLE {
        return false;
    }
    match retry {
        Retry::Read => true,
        // Refused before it was proposed; "leader changed" or "request timed out" may
        // still be applied and are the caller's to read back.
        Retry::Write => message.contains("no leader") || message.contains("not capable"),
    }
}

fn is_token_refused(code: i64, message: &str) -> bool {
    code == UNAUTHENTICATED || message.contains("invalid auth token")
}

fn to_body(request: &impl serde::Serialize, what: &str) -> Result<Bytes, Error> {
    serde_json::to_vec(request)
        .map(Bytes::from)
        .map_err(|e| Error::malformed(what, e))
}

fn positive(revision: i64, what: &str) -> Result<i64, Error> {
    if revision <= 0 {
        return Err(Error::malformed(
            what,
            format!("revision {revision} is not positive"),
        ));
    }
    Ok(revision)
}

/// A key for messages: as text when it is, escaped otherwise, cut after 200 bytes.
pub(crate) fn show(key: &[u8]) -> String {
    let cut = &key[..key.len().min(200)];
    let text = String::from_utf8_lossy(cut).escape_debug().to_string();
    if key.len() > cut.len() {
        format!("{text}…")
    } else {
        text
    }
}
