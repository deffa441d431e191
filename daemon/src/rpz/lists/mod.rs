//! Subscribed lists: `local-data.rpz[]` entries with a `url`. One task in the manager process
//! fetches each list at its `refresh` interval (with a jitter, and backing off after a
//! failure) or when asked (`kresctl rpz refresh`), checks what it brought, compiles it into
//! the RPZ zone file kresd loads (`store`), and renews the running configuration — once for
//! all the lists fetched together — so the policy-loader reads the new files as it does
//! after a zone transfer (a rules reset, no worker restart).
//!
//! Invariants: the manager's memory does not grow with a list (bodies are streamed to disk
//! and compiled a line at a time; only an allowlist's names are held, bounded by
//! `store::MAX_ALLOWED`); a stored list is replaced only by a complete, checked one — a
//! fetch that fails, an HTML page, a body that is not its format, one larger than
//! `max-size`, one past its `sha256` pin, or one with less than half the entries of the
//! version in force keeps that version and is reported (`rpz-list-failed`); a list the
//! server says is unchanged (304) costs no policy-loader run; kresd answers with the
//! previous policy until the policy-loader has loaded the new one whole.
//!
//! An allowlist (`action-override: passthru`) is never loaded by kresd (kresd 6 has no
//! passthru): its names are left out of every other list when they are compiled, and a
//! changed allowlist compiles the others again from their stored bodies.

mod fetch;
pub mod format;
pub mod schedule;
pub mod store;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use fetch::{FetchError, FetchLimits, Validators};
use format::Action;
use schedule::{ListAction, ListClock, ListEvent};
use store::{AllowSet, CompileError, Counts, FileError, State};

use crate::events::{Event, EventLog, Origin};
use crate::manager::plan::Restart;
use crate::manager::ManagerHandle;
use kres_config::{KresConfig, ListFormat, LoadedConfig, RpzSchema};
use kres_wire::rpz::{RpzCheck, RpzList};

/// The refresh interval when the entry gives none.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(24 * 3600);

/// A new version with fewer than this share (percent) of the entries in force is refused.
pub const MIN_KEPT_PERCENT: u64 = 50;

/// One subscribed list, from its configuration entry.
#[derive(Debug, Clone, PartialEq)]
pub struct List {
    /// Its name: its file's name without the extension (the whole path when two entries'
    /// files share a name).
    pub name: String,
    /// Where it is fetched from.
    pub url: String,
    /// The zone kresd loads (its body and state lie beside it).
    pub file: PathBuf,
    /// Its format.
    pub format: ListFormat,
    /// The action of every name; none: each entry's own.
    pub action: Option<Action>,
    /// How often it is fetched.
    pub refresh: Duration,
    /// The SHA-256 it must have (lower-case hex).
    pub sha256: Option<String>,
    /// The bounds of a fetch.
    pub limits: FetchLimits,
    /// The tags of the clients it applies to (none: every client).
    pub tags: Option<Vec<String>>,
}

impl List {
    /// Whether it is an allowlist.
    pub fn is_allowlist(&self) -> bool {
        self.action == Some(Action::Passthru)
    }

    /// The list of the entry `rpz`, when it names a URL.
    fn of(rpz: &RpzSchema) -> Option<List> {
        let url = rpz.url.clone()?;
        let mut limits = FetchLimits::default();
        if let Some(size) = &rpz.max_size {
            limits.max_size = size.bytes();
        }
        let name = rpz
            .file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| rpz.file.display().to_string());
        Some(List {
            name,
            url,
            file: rpz.file.clone(),
            format: rpz.format.unwrap_or(ListFormat::Rpz),
            action: rpz.action_override.map(Action::of),
            refresh: rpz
                .refresh
                .as_ref()
                .map_or(DEFAULT_REFRESH, |t| Duration::from_micros(t.micros()))
                .max(Duration::from_secs(1)),
            sha256: rpz.sha256.as_ref().map(|s| s.to_ascii_lowercase()),
            limits,
            tags: rpz
                .tags
                .as_ref()
                .map(|tags| tags.iter().map(|t| t.as_str().to_owned()).collect()),
        })
    }
}

/// Every list `cfg` subscribes to, in its order.
pub fn lists(cfg: &KresConfig) -> Vec<List> {
    let mut lists: Vec<List> = cfg
        .local_data
        .rpz
        .iter()
        .flatten()
        .filter_map(List::of)
        .collect();
    let names: Vec<String> = lists.iter().map(|l| l.name.clone()).collect();
    for list in &mut lists {
        if names.iter().filter(|n| **n == list.name).count() > 1 {
            list.name = list.file.display().to_string();
        }
    }
    lists
}

/// The format's name as the configuration writes it.
fn format_name(format: ListFormat) -> &'static str {
    match format {
        ListFormat::Rpz => "rpz",
        ListFormat::Hosts => "hosts",
        ListFormat::Domains => "domains",
        ListFormat::Adblock => "adblock",
    }
}

/// Why a refresh of a list kept the version in force.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// The fetch failed.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// An HTML page came instead of the list.
    #[error("an HTML page, not a {0} list")]
    Html(&'static str),
    /// No line of the body is an entry of the format.
    #[error("not a {format} list: none of its {skipped} lines is an entry")]
    NotTheFormat {
        /// The format claimed.
        format: &'static str,
        /// Lines skipped.
        skipped: u64,
    },
    /// The new version has less than [`MIN_KEPT_PERCENT`] of the entries in force.
    #[error("it shrank from {from} to {to} entries (by more than {}%)", 100 - MIN_KEPT_PERCENT)]
    Shrank {
        /// Entries in force.
        from: u64,
        /// Entries of the new version.
        to: u64,
    },
    /// The body is not the one pinned.
    #[error("its SHA-256 is {got}, not the pinned {expected}")]
    Sha256 {
        /// The pin.
        expected: String,
        /// The body's.
        got: String,
    },
    /// The server said 304 to a request with no validators.
    #[error("the server said 'not modified' with no version stored")]
    NotModifiedWithout,
    /// Reading or writing the files failed.
    #[error(transparent)]
    Compile(#[from] CompileError),
}

impl From<FileError> for ListError {
    fn from(e: FileError) -> ListError {
        ListError::Compile(CompileError::File(e))
    }
}

impl ListError {
    /// A short stable label for status and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            ListError::Fetch(e) => e.reason(),
            ListError::Html(_) => "html",
            ListError::NotTheFormat { .. } => "not-the-format",
            ListError::Shrank { .. } => "shrank",
            ListError::Sha256 { .. } => "sha256",
            ListError::NotModifiedWithout => "http-status",
            ListError::Compile(CompileError::TooManyAllowed) => "too-many-allowed",
            ListError::Compile(CompileError::File(_)) => "file",
        }
    }
}

/// What a successful refresh came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Refreshed {
    /// Whether a new version is stored.
    pub changed: bool,
    /// The version in force.
    pub state: State,
    /// Bytes fetched (0 when unchanged).
    pub bytes: u64,
    /// What compiling it came to (when changed).
    pub counts: Counts,
}

/// Seconds since the Unix epoch, now.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Fetch `list`, check what comes, and store it (compiled less `allow`) when it is new
/// and sound; the version in force is kept on any error.
pub async fn refresh(list: &List, allow: Arc<AllowSet>) -> Result<Refreshed, ListError> {
    let source = store::source_path(&list.file);
    let stored = store::read_state(&list.file, &list.url)
        .filter(|_| source.is_file() && list.file.is_file());
    let validators = stored
        .as_ref()
        .map(|s| Validators {
            etag: s.etag.clone(),
            last_modified: s.last_modified.clone(),
        })
        .unwrap_or_default();
    let fetched = fetch::fetch(&list.url, &validators, &source, &list.limits).await?;
    let (staged, bytes, sha256, validators) = match fetched {
        fetch::Fetched::Unchanged => {
            let mut state = stored.ok_or(ListError::NotModifiedWithout)?;
            state.checked_at = unix_now();
            store::write_state(&list.file, &state)?;
            return Ok(Refreshed {
                changed: false,
                state,
                bytes: 0,
                counts: Counts::default(),
            });
        }
        fetch::Fetched::Body {
            staged,
            bytes,
            sha256,
            validators,
        } => (staged, bytes, sha256, validators),
    };
    if let Some(pin) = &list.sha256 {
        if *pin != sha256 {
            return Err(ListError::Sha256 {
                expected: pin.clone(),
                got: sha256,
            });
        }
    }
    let format = format_name(list.format);
    if head_is_html(staged.path()) {
        return Err(ListError::Html(format));
    }
    let (file, kind, action) = (list.file.clone(), list.format, list.action);
    let compiled = tokio::task::spawn_blocking(move || {
        let result = store::compile(staged.path(), kind, action, &allow, &file);
        (staged, result)
    })
    .await;
    let Ok((staged, compiled)) = compiled else {
        return Err(FileError {
            path: list.file.clone(),
            source: std::io::Error::other("the compiling task ended"),
        }
        .into());
    };
    let (zone, counts) = compiled?;
    if counts.entries == 0 && counts.skipped > 0 {
        return Err(ListError::NotTheFormat {
            format,
            skipped: counts.skipped,
        });
    }
    if let Some(before) = &stored {
        if counts.entries * 100 < before.entries * MIN_KEPT_PERCENT {
            return Err(ListError::Shrank {
                from: before.entries,
                to: counts.entries,
            });
        }
    }
    let state = State {
        url: list.url.clone(),
        etag: validators.etag,
        last_modified: validators.last_modified,
        entries: counts.entries,
        skipped: counts.skipped,
        checked_at: unix_now(),
    };
    let file = list.file.clone();
    let stored_state = state.clone();
    let committed = tokio::task::spawn_blocking(move || -> Result<(), FileError> {
        zone.commit()?;
        staged.commit()?;
        store::write_state(&file, &stored_state)
    })
    .await
    .map_err(|e| FileError {
        path: list.file.clone(),
        source: std::io::Error::other(e),
    })?;
    committed?;
    Ok(Refreshed {
        changed: true,
        state,
        bytes,
        counts,
    })
}

/// Whether the file `path` begins as an HTML page does.
fn head_is_html(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = Vec::with_capacity(512);
    let read = std::fs::File::open(path).and_then(|f| f.take(512).read_to_end(&mut head));
    read.is_ok() && format::looks_like_html(&head)
}

/// The names every allowlist of `lists` allows (the allowlists as stored).
pub fn allowed(lists: &[List]) -> Result<AllowSet, CompileError> {
    let mut all = AllowSet::default();
    for list in lists.iter().filter(|l| l.is_allowlist()) {
        let set = AllowSet::read(&list.file)?;
        all = all.union(set)?;
    }
    Ok(all)
}

/// Compile every blocklist of `lists` again from its stored body, less `allow`.
pub fn recompile(lists: &[List], allow: &AllowSet) -> Result<(), CompileError> {
    for list in lists.iter().filter(|l| !l.is_allowlist()) {
        let source = store::source_path(&list.file);
        if !source.is_file() {
            continue;
        }
        let (zone, _) = store::compile(&source, list.format, list.action, allow, &list.file)?;
        zone.commit()?;
    }
    Ok(())
}

/// The tags the views of `cfg` give `client`: those of the view with the most specific
/// subnet holding it (views that also ask for a destination or a protocol are not
/// considered: a check has neither); none when no view holds it.
pub fn client_tags(cfg: &KresConfig, client: std::net::IpAddr) -> Vec<String> {
    let mut best: Option<(u8, Vec<String>)> = None;
    for view in cfg.views.iter().flatten() {
        if view.dst_subnet.is_some() || view.protocols.is_some() {
            continue;
        }
        for net in &view.subnets {
            if net.contains(client) && best.as_ref().is_none_or(|(p, _)| net.prefix_len() > *p) {
                let tags = view
                    .tags
                    .iter()
                    .flatten()
                    .map(|t| t.as_str().to_owned())
                    .collect();
                best = Some((net.prefix_len(), tags));
            }
        }
    }
    best.map(|(_, tags)| tags).unwrap_or_default()
}

/// Whether `list` applies to a client with `tags` (none: every list applies).
fn applies(list: &List, tags: Option<&[String]>) -> bool {
    match (&list.tags, tags) {
        (Some(wanted), Some(given)) => wanted.iter().any(|t| given.contains(t)),
        _ => true,
    }
}

/// Which list decides `name` for a client with `tags` (none: whatever the client), read from
/// the stored bodies, as the compiled zones decide it: an allowlist lifts a blocklist's entry
/// that it covers (the same entry, or one below an allowed wildcard), as compiling subtracts
/// it; a blocklist's entry it does not cover (a wildcard over an allowed name) still decides,
/// since kresd has no passthru to lift it with.
pub fn check(lists: &[List], name: &str, tags: Option<&[String]>) -> Result<RpzCheck, FileError> {
    let mut answer = RpzCheck {
        name: name.to_owned(),
        ..RpzCheck::default()
    };
    let mut allowed: Vec<(String, String, Action)> = Vec::new();
    let mut blocking: Vec<(String, String, Action)> = Vec::new();
    for list in lists {
        if !applies(list, tags) {
            answer.not_for_client.push(list.name.clone());
            continue;
        }
        let found = store::lookup(&store::source_path(&list.file), list.format, name)?;
        let Some((entry, own)) = found else { continue };
        let action = list.action.unwrap_or(own);
        if list.is_allowlist() {
            allowed.push((list.name.clone(), entry, action));
        } else if action != Action::Passthru {
            blocking.push((list.name.clone(), entry, action));
        }
    }
    let lifted = |entry: &str| allowed.iter().any(|(_, allow, _)| lifts(allow, entry));
    let decider = blocking
        .iter()
        .find(|(_, entry, _)| !lifted(entry))
        .or(allowed.first());
    if let Some((list, entry, action)) = decider {
        answer.list = Some(list.clone());
        answer.entry = Some(entry.clone());
        answer.action = Some(action.as_str().to_owned());
        answer.overridden = blocking
            .iter()
            .filter(|(_, entry, _)| lifted(entry))
            .map(|(list, _, _)| list.clone())
            .collect();
    }
    Ok(answer)
}

/// Whether the allowlist's entry `allow` lifts the blocklist's entry `block` (each a name, or
/// `*.name` for the names under it), as [`store::AllowSet::covers`] subtracts it.
fn lifts(allow: &str, block: &str) -> bool {
    if allow == block {
        return true;
    }
    let Some(allowed_under) = allow.strip_prefix("*.") else {
        return false;
    };
    let blocked = block.strip_prefix("*.").unwrap_or(block);
    blocked
        .strip_suffix(allowed_under)
        .is_some_and(|rest| rest.ends_with('.'))
        || (block.starts_with("*.") && blocked == allowed_under)
}

/// Why a request to the lists' task failed.
#[derive(Debug, thiserror::Error)]
pub enum ListsError {
    /// No subscribed list has the name.
    #[error("no subscribed list is named '{0}'")]
    NoSuchList(String),
    /// The name asked about is no DNS name.
    #[error("'{0}' is not a domain name")]
    BadName(String),
    /// The client is no IP address.
    #[error("'{0}' is not an IP address")]
    BadClient(String),
    /// The task is not running (the manager is stopping).
    #[error("the subscribed lists' task is not running")]
    NotRunning,
    /// A stored list could not be read.
    #[error("{0}")]
    File(String),
}

/// A request to the lists' task.
enum Command {
    /// Fetch the list named (every list when none) now; reply once they are in force.
    Refresh {
        name: Option<String>,
        reply: oneshot::Sender<Result<Vec<RpzList>, ListsError>>,
    },
    /// Which list decides a name.
    Check {
        name: String,
        client: Option<std::net::IpAddr>,
        reply: oneshot::Sender<Result<RpzCheck, ListsError>>,
    },
}

/// How the API reaches the lists' task: their status, and requests.
#[derive(Clone)]
pub struct ListsHandle {
    /// Requests to the task.
    commands: mpsc::Sender<Command>,
    /// Every list's status, as the task last published it.
    status: watch::Receiver<Vec<RpzList>>,
}

/// The task's end of a [`ListsHandle`].
pub struct ListsInbox {
    /// Requests.
    commands: mpsc::Receiver<Command>,
    /// Where the status is published.
    status: watch::Sender<Vec<RpzList>>,
}

impl ListsHandle {
    /// A handle and the inbox the task takes.
    pub fn new() -> (ListsHandle, ListsInbox) {
        let (commands, inbox) = mpsc::channel(16);
        let (status, statuses) = watch::channel(Vec::new());
        (
            ListsHandle {
                commands,
                status: statuses,
            },
            ListsInbox {
                commands: inbox,
                status,
            },
        )
    }

    /// Every list's status.
    pub fn status(&self) -> Vec<RpzList> {
        self.status.borrow().clone()
    }

    /// Fetch `name` (every list when none) now; the lists once the fetches are done and
    /// what they brought is in force.
    pub async fn refresh(&self, name: Option<String>) -> Result<Vec<RpzList>, ListsError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Refresh { name, reply })
            .await
            .map_err(|_| ListsError::NotRunning)?;
        answer.await.map_err(|_| ListsError::NotRunning)?
    }

    /// Which list decides `name` (for `client`, by its views' tags, when given).
    pub async fn check(&self, name: &str, client: Option<&str>) -> Result<RpzCheck, ListsError> {
        let name = format::checked_name(name).ok_or_else(|| ListsError::BadName(name.into()))?;
        let client = match client {
            Some(text) => Some(
                text.parse()
                    .map_err(|_| ListsError::BadClient(text.to_owned()))?,
            ),
            None => None,
        };
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Check {
                name,
                client,
                reply,
            })
            .await
            .map_err(|_| ListsError::NotRunning)?;
        answer.await.map_err(|_| ListsError::NotRunning)?
    }
}

/// What the task shares with its parts.
struct Shared {
    /// For the renew after new versions.
    manager: ManagerHandle,
    /// Where what happens is told.
    events: EventLog,
}

/// Follow the lists of the running configuration until `stop`, answering `inbox`: the task,
/// for its owner to run (and wait for at its stop).
pub fn start(
    manager: ManagerHandle,
    events: EventLog,
    inbox: ListsInbox,
    stop: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    run(manager.subscribe(), Shared { manager, events }, inbox, stop)
}

/// One list's place in the task.
struct Followed {
    /// The list.
    list: List,
    /// Its status, as published.
    status: RpzList,
    /// When it is fetched next, or that a fetch runs.
    clock: ListClock,
}

/// A random share, 0 to 1 (of the jitter).
fn random_share() -> f64 {
    let random = crate::manager::rundir::random_hex(4)
        .ok()
        .and_then(|h| u32::from_str_radix(&h, 16).ok())
        .unwrap_or(0);
    f64::from(random) / f64::from(u32::MAX)
}

/// The status of `list` as its stored state says.
fn first_status(list: &List, state: Option<&State>) -> RpzList {
    RpzList {
        name: list.name.clone(),
        url: list.url.clone(),
        file: list.file.display().to_string(),
        format: format_name(list.format).to_owned(),
        action: list.action.map(|a| a.as_str().to_owned()),
        entries: state.map(|s| s.entries),
        skipped: state.map(|s| s.skipped),
        last_success: state.map(|s| s.checked_at),
        etag: state.and_then(|s| s.etag.clone()),
        ..RpzList::default()
    }
}

/// The lists of `cfg`, with when each is fetched first: at once when nothing is stored,
/// else a refresh interval after the stored version was last checked.
fn followed(cfg: &KresConfig) -> Vec<Followed> {
    let now = Instant::now();
    lists(cfg)
        .into_iter()
        .map(|list| {
            let state = store::read_state(&list.file, &list.url)
                .filter(|_| list.file.is_file() && store::source_path(&list.file).is_file());
            let next = state.as_ref().map_or(now, |s| {
                let age = Duration::from_secs_f64((unix_now() - s.checked_at).max(0.0));
                now + list.refresh.saturating_sub(age)
            });
            Followed {
                status: first_status(&list, state.as_ref()),
                list,
                clock: ListClock::new(next),
            }
        })
        .collect()
}

/// What a fetch task hands back.
type Done = (usize, Result<Refreshed, ListError>);

async fn run(
    mut config: watch::Receiver<Arc<LoadedConfig>>,
    shared: Shared,
    mut inbox: ListsInbox,
    stop: CancellationToken,
) {
    let mut entries = url_entries(&config.borrow_and_update().model);
    let mut lists = followed(&config.borrow().model);
    let mut allow = Arc::new(load_allowed(&lists));
    let mut fetching: JoinSet<Done> = JoinSet::new();
    // The checks answering (those done reaped at the next), ended with the task.
    let mut checking: JoinSet<()> = JoinSet::new();
    let mut waiting: Vec<oneshot::Sender<Result<Vec<RpzList>, ListsError>>> = Vec::new();
    // An allowlist stored after a blocklist was compiled (the manager stopped between the
    // two) is subtracted again at once.
    if allowlist_newer(&lists) {
        allow = Arc::new(recompile_all(&lists).await);
        renew(&shared.manager).await;
    }
    // A new version is stored: renew once the fetches running now are done.
    let mut stored_new = false;
    let mut allowlist_new = false;
    publish(&inbox, &lists);
    loop {
        let wake = lists.iter().filter_map(|l| l.clock.due()).min();
        tokio::select! {
            () = stop.cancelled() => return,
            changed = config.changed() => {
                if changed.is_err() {
                    return;
                }
                let now = url_entries(&config.borrow_and_update().model);
                if now != entries {
                    tracing::info!("the subscribed lists changed; following them anew");
                    entries = now;
                    fetching.abort_all();
                    while fetching.join_next().await.is_some() {}
                    lists = followed(&config.borrow().model);
                    allow = Arc::new(load_allowed(&lists));
                    stored_new = false;
                    allowlist_new = false;
                }
            }
            command = inbox.commands.recv() => {
                let Some(command) = command else { return };
                match command {
                    Command::Refresh { name, reply } => {
                        let chosen: Vec<usize> = lists
                            .iter()
                            .enumerate()
                            .filter(|(_, l)| name.as_ref().is_none_or(|n| *n == l.list.name))
                            .map(|(i, _)| i)
                            .collect();
                        if let (Some(name), true) = (&name, chosen.is_empty()) {
                            let _ = reply.send(Err(ListsError::NoSuchList(name.clone())));
                            continue;
                        }
                        for i in chosen {
                            start_fetch(&mut lists, i, &allow, &mut fetching);
                        }
                        waiting.push(reply);
                    }
                    Command::Check { name, client, reply } => {
                        let cfg = config.borrow();
                        start_check(&mut checking, &lists, &cfg.model, name, client, reply);
                    }
                }
            }
            () = sleep_until_if(wake) => {
                let now = Instant::now();
                for i in 0..lists.len() {
                    if lists[i].clock.due().is_some_and(|due| due <= now) {
                        start_fetch(&mut lists, i, &allow, &mut fetching);
                    }
                }
            }
            Some(done) = fetching.join_next() => {
                let Ok((i, result)) = done else { continue };
                let Some(followed) = lists.get_mut(i) else { continue };
                let changed = on_fetched(followed, result, &shared.events);
                stored_new |= changed;
                allowlist_new |= changed && followed.list.is_allowlist();
                publish(&inbox, &lists);
            }
        }
        if fetching.is_empty() && stored_new {
            if allowlist_new {
                allow = Arc::new(recompile_all(&lists).await);
            }
            stored_new = false;
            allowlist_new = false;
            renew(&shared.manager).await;
        }
        if fetching.is_empty() {
            for reply in waiting.drain(..) {
                let _ = reply.send(Ok(inbox.status.borrow().clone()));
            }
        }
    }
}

/// Answer a check of `name` (for `client`, tagged as `cfg`'s views say) over `lists` on
/// `checking`, the lists' task's own (the checks answered since the last are reaped here, the
/// ones running end with the task).
fn start_check(
    checking: &mut JoinSet<()>,
    lists: &[Followed],
    cfg: &KresConfig,
    name: String,
    client: Option<std::net::IpAddr>,
    reply: oneshot::Sender<Result<RpzCheck, ListsError>>,
) {
    let snapshot: Vec<List> = lists.iter().map(|l| l.list.clone()).collect();
    let tags = client.map(|c| client_tags(cfg, c));
    while checking.try_join_next().is_some() {}
    checking.spawn(answer_check(snapshot, name, client, tags, reply));
}

/// Answer a check of `name` (for `client`, whose views give it `tags`) over the lists of
/// `snapshot`, read from their stored bodies off the runtime's threads.
async fn answer_check(
    snapshot: Vec<List>,
    name: String,
    client: Option<std::net::IpAddr>,
    tags: Option<Vec<String>>,
    reply: oneshot::Sender<Result<RpzCheck, ListsError>>,
) {
    let answer = tokio::task::spawn_blocking(move || {
        let mut answer = check(&snapshot, &name, tags.as_deref())?;
        answer.client = client.map(|c| c.to_string());
        answer.client_tags = tags;
        Ok::<_, FileError>(answer)
    })
    .await
    .map_err(|_| ListsError::NotRunning)
    .and_then(|r| r.map_err(|e| ListsError::File(e.to_string())));
    let _ = reply.send(answer);
}

/// Apply the running configuration again, so the policy-loader reads the lists stored; a
/// refusal is logged (the manager tells it too) and the policy in force stays.
async fn renew(manager: &ManagerHandle) {
    if let Err(e) = manager
        .renew(Restart::WhenNeeded, Origin::Subscription)
        .await
    {
        tracing::warn!("the new versions of subscribed lists are stored but not in force: {e}");
    }
}

/// Whether an allowlist's stored zone is newer than a blocklist's.
fn allowlist_newer(lists: &[Followed]) -> bool {
    let modified = |l: &Followed| {
        std::fs::metadata(&l.list.file)
            .and_then(|m| m.modified())
            .ok()
    };
    let allowlists = lists
        .iter()
        .filter(|l| l.list.is_allowlist())
        .filter_map(modified)
        .max();
    let oldest = lists
        .iter()
        .filter(|l| !l.list.is_allowlist())
        .filter_map(modified)
        .min();
    matches!((allowlists, oldest), (Some(allowed), Some(blocked)) if allowed > blocked)
}

/// The entries of `cfg` with a URL, as written (what the task follows anew on a change).
fn url_entries(cfg: &KresConfig) -> Vec<RpzSchema> {
    cfg.local_data
        .rpz
        .iter()
        .flatten()
        .filter(|rpz| rpz.url.is_some())
        .cloned()
        .collect()
}

/// The allowlists as stored; an empty set (logged) when they cannot be read.
fn load_allowed(lists: &[Followed]) -> AllowSet {
    let lists: Vec<List> = lists.iter().map(|l| l.list.clone()).collect();
    allowed(&lists).unwrap_or_else(|e| {
        tracing::error!("the allowlists cannot be read: {e}; nothing is subtracted");
        AllowSet::default()
    })
}

/// Read the allowlists again and compile every blocklist less them; the new set.
async fn recompile_all(lists: &[Followed]) -> AllowSet {
    let lists: Vec<List> = lists.iter().map(|l| l.list.clone()).collect();
    let done = tokio::task::spawn_blocking(move || {
        let allow = allowed(&lists)?;
        recompile(&lists, &allow)?;
        Ok::<_, CompileError>(allow)
    })
    .await;
    match done {
        Ok(Ok(allow)) => allow,
        Ok(Err(e)) => {
            tracing::error!("the blocklists cannot be compiled less the new allowlist: {e}");
            AllowSet::default()
        }
        Err(_) => AllowSet::default(),
    }
}

/// Start fetching list `i`, unless a fetch of it runs.
fn start_fetch(
    lists: &mut [Followed],
    i: usize,
    allow: &Arc<AllowSet>,
    fetching: &mut JoinSet<Done>,
) {
    let Some(followed) = lists.get_mut(i) else {
        return;
    };
    let interval = followed.list.refresh;
    if followed
        .clock
        .on(ListEvent::FetchWanted, Instant::now(), interval)
        != ListAction::StartFetch
    {
        return;
    }
    let list = followed.list.clone();
    let allow = allow.clone();
    fetching.spawn(async move { (i, refresh(&list, allow).await) });
}

/// Record what a fetch of `followed` came to, tell it, and schedule the next; whether a
/// new version is stored.
fn on_fetched(
    followed: &mut Followed,
    result: Result<Refreshed, ListError>,
    events: &EventLog,
) -> bool {
    let now = Instant::now();
    let list = &followed.list;
    let event = match &result {
        Ok(_) => ListEvent::Succeeded {
            jitter: random_share(),
        },
        Err(_) => ListEvent::Failed,
    };
    let wait = match followed.clock.on(event, now, list.refresh) {
        ListAction::WaitUntil(due) => due.saturating_duration_since(now),
        ListAction::StartFetch | ListAction::Nothing => Duration::ZERO,
    };
    let status = &mut followed.status;
    status.last_fetch = Some(unix_now());
    match result {
        Ok(refreshed) => {
            let result = if refreshed.changed {
                "changed"
            } else {
                "unchanged"
            };
            status.entries = Some(refreshed.state.entries);
            status.skipped = Some(refreshed.state.skipped);
            status.last_success = status.last_fetch;
            status.result = Some(result.to_owned());
            status.error = None;
            status.etag.clone_from(&refreshed.state.etag);
            status.next_refresh = Some(unix_now() + wait.as_secs_f64());
            tracing::info!(
                list = %list.name,
                entries = refreshed.state.entries,
                skipped = refreshed.state.skipped,
                "subscribed list fetched: {result}"
            );
            events.publish(Event::RpzListFetched {
                list: list.name.clone(),
                url: list.url.clone(),
                result: result.to_owned(),
                entries: refreshed.state.entries,
                skipped: refreshed.state.skipped,
                bytes: refreshed.bytes,
                etag: refreshed.state.etag,
                next_refresh: wait.as_secs_f64(),
            });
            refreshed.changed
        }
        Err(e) => {
            let error = kres_wire::error_line(&e);
            status.result = Some(e.reason().to_owned());
            status.error = Some(error.clone());
            status.failures += 1;
            status.next_refresh = Some(unix_now() + wait.as_secs_f64());
            tracing::warn!(list = %list.name, url = %list.url, "subscribed list not taken: {error}; the previous version stays in force");
            events.publish(Event::RpzListFailed {
                list: list.name.clone(),
                url: list.url.clone(),
                reason: e.reason().to_owned(),
                error,
                next_refresh: wait.as_secs_f64(),
            });
            false
        }
    }
}

/// Publish every list's status.
fn publish(inbox: &ListsInbox, lists: &[Followed]) {
    inbox
        .status
        .send_replace(lists.iter().map(|l| l.status.clone()).collect());
}

/// Sleep until `at`; forever when there is no such time.
async fn sleep_until_if(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kres_config::{validate, PathChecks, ValidationContext};

    fn config(raw: serde_json::Value) -> KresConfig {
        let ctx = ValidationContext {
            resolve_root: PathBuf::from("/etc/knot-resolver"),
            checks: PathChecks::Lenient,
            logtarget_arg: Default::default(),
        };
        validate(&raw, &ctx).expect("valid")
    }

    /// Views tagging clients `kids` and `guests`.
    fn views() -> serde_json::Value {
        serde_json::json!([
            {"subnets": ["10.0.0.0/8"], "tags": ["kids"]},
            {"subnets": ["10.1.0.0/16"], "tags": ["guests"]},
            {"subnets": ["2001:db8::/32"], "tags": ["kids"]},
            {"subnets": ["10.1.2.0/24"], "dst-subnet": "192.0.2.0/24", "tags": ["kids"]},
        ])
    }

    #[test]
    fn a_client_has_the_tags_of_its_most_specific_view() {
        let cfg = config(serde_json::json!({"views": views(), "local-data": {"rpz": [
            {"file": "/var/rpz/a.rpz", "url": "http://lists.example/a", "tags": ["kids", "guests"]},
        ]}}));
        let tags = |ip: &str| client_tags(&cfg, ip.parse().expect("an address"));
        assert_eq!(
            tags("10.1.2.3"),
            ["guests"],
            "not the view that wants a destination"
        );
        assert_eq!(tags("10.2.2.3"), ["kids"]);
        assert_eq!(tags("2001:db8::1"), ["kids"]);
        assert!(tags("192.0.2.1").is_empty());
        assert!(tags("::ffff:10.1.2.3").is_empty(), "another family");
    }

    #[test]
    fn a_check_consults_the_lists_for_the_client_and_the_allowlist_first() {
        let dir = std::env::temp_dir().join(format!("kres-lists-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let entry = |name: &str, body: &str, extra: serde_json::Value| {
            let file = dir.join(format!("{name}.rpz"));
            std::fs::write(store::source_path(&file), body).expect("source");
            let mut entry = serde_json::json!({
                "file": file, "url": format!("http://lists.example/{name}"), "format": "domains",
            });
            if let (Some(entry), Some(extra)) = (entry.as_object_mut(), extra.as_object()) {
                entry.extend(extra.clone());
            }
            entry
        };
        let cfg = config(serde_json::json!({"views": views(), "local-data": {"rpz": [
            entry("ads", "ads.example\ntracker.ads.example\n", serde_json::json!({})),
            entry("kids", "*.games.example\nads.example\n", serde_json::json!({"tags": ["kids"], "action-override": "nodata"})),
            entry("allow", "x.games.example\n*.ads.example\n", serde_json::json!({"tags": ["guests"], "action-override": "passthru"})),
        ]}}));
        let lists = lists(&cfg);
        let decided = |name: &str, tags: Option<&[String]>| {
            let answer = check(&lists, name, tags).expect("read");
            (
                answer.list,
                answer.entry,
                answer.action,
                answer.overridden,
                answer.not_for_client,
            )
        };
        let some = |s: &str| Some(s.to_owned());
        // The allowlist lists the name, but a blocklist's wildcard over it is not lifted (the
        // compiled zone keeps it): the wildcard decides, as kresd does.
        assert_eq!(
            decided("x.games.example", None),
            (
                some("kids"),
                some("*.games.example"),
                some("nodata"),
                vec![],
                vec![]
            )
        );
        let kids = ["kids".to_owned()];
        assert_eq!(
            decided("x.games.example", Some(&kids)),
            (
                some("kids"),
                some("*.games.example"),
                some("nodata"),
                vec![],
                vec!["allow".to_owned()]
            )
        );
        assert_eq!(
            decided("ads.example", Some(&[])),
            (
                some("ads"),
                some("ads.example"),
                some("nxdomain"),
                vec![],
                vec!["kids".to_owned(), "allow".to_owned()]
            )
        );
        // An allowed wildcard over a blocklist's name lifts it, as compiling subtracts it.
        assert_eq!(
            decided("tracker.ads.example", None),
            (
                some("allow"),
                some("*.ads.example"),
                some("passthru"),
                vec!["ads".to_owned()],
                vec![]
            )
        );
        assert_eq!(
            decided("other.example", None),
            (None, None, None, vec![], vec![])
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn an_allowlist_lifts_only_the_entries_it_covers() {
        for (allow, block, lifted) in [
            ("good.example", "good.example", true),
            ("*.example", "good.example", true),
            ("*.example", "*.sub.example", true),
            ("*.example", "*.example", true),
            ("good.example", "*.example", false),
            ("*.good.example", "*.example", false),
            ("good.example", "bad.example", false),
            ("*.example", "example", false),
            ("*.ample", "good.example", false),
        ] {
            assert_eq!(lifts(allow, block), lifted, "{allow} over {block}");
        }
    }
}
