//! A subscribed list on disk: the body as fetched (`FILE.source`, kept so that a changed
//! allowlist can be subtracted again without a fetch), what is known of it (`FILE.state`:
//! its ETag, Last-Modified, counts), and the RPZ zone kresd loads (`FILE`), compiled from the
//! body one line at a time ([`compile`]): memory holds a line and the allowlist, never the
//! list. Every file is replaced whole (a fresh sibling created exclusively, fsync, rename).
//!
//! The allowlist is held as a set of names ([`AllowSet`]), bounded by [`MAX_ALLOWED`]:
//! allowlists are short (names a blocklist got wrong), a lookup per blocklist entry keeps
//! compiling linear, and the bound keeps the set within a few MiB. (A sort-merge of files on
//! disk would lift the bound at the cost of sorting every blocklist; not needed for lists of
//! that kind.)

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::{BufRead, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::format::{Action, Entry, Line, Reader, MAX_LINE};
use kres_config::ListFormat;

/// The most names an allowlist may hold.
pub const MAX_ALLOWED: usize = 100_000;

/// The apex of every zone written: kresd's RPZ loader takes names relative to it.
const APEX: &str = "list.rpz.";

/// The TTL of the records written.
const TTL: u32 = 60;

/// What is known of a stored list between fetches and restarts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct State {
    /// The URL it was fetched from (another URL's validators are not sent).
    pub url: String,
    /// The server's ETag for it.
    pub etag: Option<String>,
    /// The server's Last-Modified for it.
    pub last_modified: Option<String>,
    /// Entries read from it (before an allowlist's subtraction).
    pub entries: u64,
    /// Lines skipped.
    pub skipped: u64,
    /// When it was last fetched whole or found unchanged (Unix time, seconds).
    pub checked_at: f64,
}

/// Why a stored list could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct FileError {
    /// The file.
    pub path: PathBuf,
    /// What the file system said.
    #[source]
    pub source: std::io::Error,
}

/// `FILE.source`: the body as last taken.
pub fn source_path(file: &Path) -> PathBuf {
    sibling(file, "source")
}

/// `FILE.state`: what is known of it.
pub fn state_path(file: &Path) -> PathBuf {
    sibling(file, "state")
}

fn sibling(file: &Path, tag: &str) -> PathBuf {
    let mut name = file.file_name().map(OsString::from).unwrap_or_default();
    name.push(format!(".{tag}"));
    file.with_file_name(name)
}

/// The state stored beside `file` (none: no state, or another URL's).
pub fn read_state(file: &Path, url: &str) -> Option<State> {
    let mut text = Vec::new();
    std::fs::File::open(state_path(file))
        .ok()?
        .take(64 << 10)
        .read_to_end(&mut text)
        .ok()?;
    serde_json::from_slice::<State>(&text)
        .ok()
        .filter(|s| s.url == url)
}

/// Store `state` beside `file`.
pub fn write_state(file: &Path, state: &State) -> Result<(), FileError> {
    let path = state_path(file);
    let mut staged = Staged::create(&path)?;
    let text = serde_json::to_vec(state).map_err(|e| FileError {
        path: path.clone(),
        source: std::io::Error::other(e),
    })?;
    staged.write(&text)?;
    staged.commit()
}

/// A file being written beside the one it replaces, under a fresh name created exclusively
/// (`.NAME.RANDOM.fetch`); removed when dropped uncommitted.
pub struct Staged {
    /// The temporary file.
    path: PathBuf,
    /// The file it replaces.
    target: PathBuf,
    /// The writer; `None` once committed.
    out: Option<BufWriter<std::fs::File>>,
}

impl Staged {
    /// A fresh temporary sibling of `target`.
    pub fn create(target: &Path) -> Result<Staged, FileError> {
        use std::os::unix::fs::OpenOptionsExt;
        let error = |source| FileError {
            path: target.to_owned(),
            source,
        };
        let name = target
            .file_name()
            .ok_or_else(|| error(std::io::Error::other("not a file path")))?;
        let fresh = crate::manager::rundir::fresh_sibling_name(name, "fetch").map_err(error)?;
        let path = target.with_file_name(fresh);
        let file = std::fs::File::options()
            .write(true)
            .create_new(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(&path)
            .map_err(|source| FileError {
                path: path.clone(),
                source,
            })?;
        Ok(Staged {
            path,
            target: target.to_owned(),
            out: Some(BufWriter::with_capacity(1 << 16, file)),
        })
    }

    /// The temporary file's path (to read back what was written).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append `bytes`.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), FileError> {
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        out.write_all(bytes).map_err(|source| FileError {
            path: self.path.clone(),
            source,
        })
    }

    /// Flush, sync what was written (the rename comes later, with [`Staged::commit`]).
    pub fn sync(&mut self) -> Result<(), FileError> {
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        out.flush()
            .and_then(|()| out.get_ref().sync_all())
            .map_err(|source| FileError {
                path: self.path.clone(),
                source,
            })
    }

    /// Flush, sync and rename over the target; the temporary file is removed on an error.
    pub fn commit(mut self) -> Result<(), FileError> {
        self.sync()?;
        self.out = None;
        std::fs::rename(&self.path, &self.target).map_err(|source| FileError {
            path: self.target.clone(),
            source,
        })?;
        if let Some(dir) = self.target.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The lines of a file, each at most [`MAX_LINE`] bytes (a longer one is given as `None`
/// and skipped whole), read through a fixed buffer.
pub struct Lines<R> {
    /// The file.
    input: R,
    /// The line being read.
    line: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    /// Lines of `input`.
    pub fn new(input: R) -> Lines<R> {
        Lines {
            input,
            line: Vec::with_capacity(256),
        }
    }

    /// The next line (`Some(None)`: one too long), none at the end.
    pub fn next_line(&mut self) -> std::io::Result<Option<Option<&str>>> {
        self.line.clear();
        let mut too_long = false;
        let mut read_any = false;
        loop {
            let buf = self.input.fill_buf()?;
            if buf.is_empty() {
                break;
            }
            read_any = true;
            let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
                Some(at) => (&buf[..at], Some(at + 1)),
                None => (buf, None),
            };
            if self.line.len() + chunk.len() > MAX_LINE {
                too_long = true;
            } else {
                self.line.extend_from_slice(chunk);
            }
            let used = done.unwrap_or(buf.len());
            self.input.consume(used);
            if done.is_some() {
                break;
            }
        }
        if !read_any {
            return Ok(None);
        }
        if too_long {
            return Ok(Some(None));
        }
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        Ok(Some(std::str::from_utf8(&self.line).ok()))
    }
}

/// The names an allowlist allows: `name` for itself, `*.name` for the names under it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AllowSet {
    /// The names, each as [`key`] writes it.
    names: HashSet<Box<str>>,
}

/// How an entry is held in an [`AllowSet`].
fn key(name: &str, wildcard: bool) -> String {
    if wildcard {
        format!("*.{name}")
    } else {
        name.to_owned()
    }
}

impl AllowSet {
    /// Add what `entry` allows; false when the set is full.
    pub fn add(&mut self, entry: &Entry) -> bool {
        if self.names.len() >= MAX_ALLOWED {
            return false;
        }
        self.names.insert(key(&entry.name, entry.wildcard).into());
        true
    }

    /// Both sets in one; an error past [`MAX_ALLOWED`] names.
    pub fn union(mut self, other: AllowSet) -> Result<AllowSet, CompileError> {
        self.names.extend(other.names);
        if self.names.len() > MAX_ALLOWED {
            return Err(CompileError::TooManyAllowed);
        }
        Ok(self)
    }

    /// How many names it holds.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether it holds no name.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Whether every name `entry` blocks is allowed: the same entry, or a wildcard over a
    /// name above it (over itself too, for a wildcard entry).
    pub fn covers(&self, entry: &Entry) -> bool {
        if self
            .names
            .contains(key(&entry.name, entry.wildcard).as_str())
        {
            return true;
        }
        let mut above = entry.name.as_str();
        if entry.wildcard && self.names.contains(key(above, true).as_str()) {
            return true;
        }
        while let Some((_, parent)) = above.split_once('.') {
            if self.names.contains(key(parent, true).as_str()) {
                return true;
            }
            above = parent;
        }
        false
    }

    /// The allowlist stored in the zone `file` (an allowlist's zone, every entry passthru);
    /// none when there is no such file yet. Refuses one past [`MAX_ALLOWED`] names.
    pub fn read(file: &Path) -> Result<AllowSet, CompileError> {
        let mut set = AllowSet::default();
        let input = match std::fs::File::open(file) {
            Ok(input) => input,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(set),
            Err(source) => {
                return Err(CompileError::File(FileError {
                    path: file.to_owned(),
                    source,
                }))
            }
        };
        let full = each_entry(file, input, ListFormat::Rpz, |entry| set.add(entry))?;
        if !full {
            return Err(CompileError::TooManyAllowed);
        }
        Ok(set)
    }
}

/// Why a list could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// Reading or writing failed.
    #[error(transparent)]
    File(#[from] FileError),
    /// An allowlist with more names than kept in memory.
    #[error("the allowlist has more than {MAX_ALLOWED} names")]
    TooManyAllowed,
}

/// Call `each` on every entry of the `format` list `input` (`path` for errors), in order,
/// until it returns false; whether it never did.
fn each_entry(
    path: &Path,
    input: impl Read,
    format: ListFormat,
    mut each: impl FnMut(&Entry) -> bool,
) -> Result<bool, FileError> {
    let error = |source| FileError {
        path: path.to_owned(),
        source,
    };
    let mut lines = Lines::new(std::io::BufReader::with_capacity(1 << 16, input));
    let mut reader = Reader::new(format);
    while let Some(line) = lines.next_line().map_err(error)? {
        let Some(line) = line else { continue };
        if let Line::Entries(entries) = reader.line(line) {
            for entry in &entries {
                if !each(entry) {
                    return Ok(false);
                }
            }
        }
    }
    Ok(true)
}

/// What compiling a list came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Entries read.
    pub entries: u64,
    /// Lines skipped (rules and names that cannot be used).
    pub skipped: u64,
    /// Entries left out because the allowlist allows their names.
    pub allowed: u64,
    /// Entries written to the zone.
    pub written: u64,
}

/// Compile the `format` list `source` into an RPZ zone staged for `target`: every entry
/// with `action` when given (else its own; an RPZ list's passthru is skipped, kresd 6 has
/// none), less what `allow` allows. Reads and writes a line at a time.
pub fn compile(
    source: &Path,
    format: ListFormat,
    action: Option<Action>,
    allow: &AllowSet,
    target: &Path,
) -> Result<(Staged, Counts), CompileError> {
    let input = std::fs::File::open(source).map_err(|source_error| FileError {
        path: source.to_owned(),
        source: source_error,
    })?;
    let mut staged = Staged::create(target)?;
    staged.write(
        format!(
            "; a subscribed list, compiled by knot-resolver; replaced at each change\n{APEX} {TTL} IN SOA localhost. nobody.invalid. 1 86400 3600 604800 {TTL}\n"
        )
        .as_bytes(),
    )?;
    let error = |e| FileError {
        path: source.to_owned(),
        source: e,
    };
    let mut counts = Counts::default();
    let mut lines = Lines::new(std::io::BufReader::with_capacity(1 << 16, input));
    let mut reader = Reader::new(format);
    let mut text = String::with_capacity(300);
    while let Some(line) = lines.next_line().map_err(error)? {
        let Some(line) = line else {
            counts.skipped += 1;
            continue;
        };
        let entries = match reader.line(line) {
            Line::Entries(entries) => entries,
            Line::Nothing => continue,
            Line::Skipped => {
                counts.skipped += 1;
                continue;
            }
        };
        for entry in &entries {
            counts.entries += 1;
            let does = action.unwrap_or(entry.action);
            if does == Action::Passthru && action != Some(Action::Passthru) {
                counts.skipped += 1;
                continue;
            }
            if does != Action::Passthru && allow.covers(entry) {
                counts.allowed += 1;
                continue;
            }
            text.clear();
            if entry.wildcard {
                text.push_str("*.");
            }
            text.push_str(&entry.name);
            text.push('.');
            text.push_str(APEX);
            text.push_str(&format!(" {TTL} IN CNAME {}\n", does.target()));
            staged.write(text.as_bytes())?;
            counts.written += 1;
        }
    }
    staged.sync()?;
    Ok((staged, counts))
}

/// What the `format` list in `file` says of `name`: the entry that matches it (its own, else
/// the closest wildcard above it), and its action; read a line at a time.
pub fn lookup(
    file: &Path,
    format: ListFormat,
    name: &str,
) -> Result<Option<(String, Action)>, FileError> {
    let input = match std::fs::File::open(file) {
        Ok(input) => input,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(FileError {
                path: file.to_owned(),
                source,
            })
        }
    };
    let mut best: Option<(usize, String, Action)> = None;
    each_entry(file, input, format, |entry| {
        let matched = if entry.wildcard {
            name.strip_suffix(entry.name.as_str())
                .is_some_and(|rest| rest.ends_with('.'))
                .then_some(entry.name.len())
        } else {
            (entry.name == name).then_some(usize::MAX)
        };
        if let Some(length) = matched {
            if best.as_ref().is_none_or(|(l, _, _)| length > *l) {
                let shown = key(&entry.name, entry.wildcard);
                best = Some((length, shown, entry.action));
            }
        }
        true
    })?;
    Ok(best.map(|(_, entry, action)| (entry, action)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kres-lists-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    fn entry(name: &str, wildcard: bool) -> Entry {
        Entry {
            name: name.into(),
            wildcard,
            action: Action::Passthru,
        }
    }

    #[test]
    fn an_allowlist_covers_its_names_and_what_its_wildcards_are_over() {
        let mut allow = AllowSet::default();
        allow.add(&entry("good.example", false));
        allow.add(&entry("safe.example", true));
        assert!(allow.covers(&entry("good.example", false)));
        assert!(
            !allow.covers(&entry("good.example", true)),
            "not what is under it"
        );
        assert!(!allow.covers(&entry("x.good.example", false)));
        assert!(allow.covers(&entry("a.b.safe.example", false)));
        assert!(allow.covers(&entry("safe.example", true)));
        assert!(!allow.covers(&entry("safe.example", false)));
        assert!(!allow.covers(&entry("example", true)), "wider than allowed");
    }

    #[test]
    fn a_list_compiles_to_a_zone_less_its_allowed_names_line_by_line() {
        let dir = dir("compile");
        let source = dir.join("ads.source");
        std::fs::write(
            &source,
            format!(
                "||ads.example^\n||good.example^\n@@||x.example^\n{}\nplain.example\n",
                "x".repeat(MAX_LINE + 10)
            ),
        )
        .expect("source");
        let mut allow = AllowSet::default();
        allow.add(&entry("good.example", false));
        let target = dir.join("ads.rpz");
        let (staged, counts) = compile(
            &source,
            ListFormat::Adblock,
            Some(Action::Nodata),
            &allow,
            &target,
        )
        .expect("compiled");
        staged.commit().expect("committed");
        assert_eq!(
            counts,
            Counts {
                entries: 4,
                skipped: 3,
                allowed: 1,
                written: 3
            }
        );
        let text = std::fs::read_to_string(&target).expect("zone");
        assert!(
            text.contains("\nads.example.list.rpz. 60 IN CNAME *.\n"),
            "{text}"
        );
        assert!(
            text.contains("\n*.good.example.list.rpz. 60 IN CNAME *.\n"),
            "{text}"
        );
        assert!(!text.contains("\ngood.example.list.rpz."), "{text}");
        assert_eq!(
            lookup(&target, ListFormat::Rpz, "a.good.example").expect("read"),
            Some(("*.good.example".into(), Action::Nodata))
        );
        assert_eq!(
            lookup(&target, ListFormat::Rpz, "ads.example").expect("read"),
            Some(("ads.example".into(), Action::Nodata))
        );
        assert_eq!(
            lookup(&target, ListFormat::Rpz, "good.example").expect("read"),
            None
        );
        let leftovers = std::fs::read_dir(&dir).expect("dir").count();
        assert_eq!(leftovers, 2, "the source and the zone, no temporary file");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn an_allowlist_zone_reads_back_as_its_set() {
        let dir = dir("allow");
        let source = dir.join("allow.source");
        std::fs::write(&source, "good.example\n*.safe.example\n").expect("source");
        let target = dir.join("allow.rpz");
        let (staged, counts) = compile(
            &source,
            ListFormat::Domains,
            Some(Action::Passthru),
            &AllowSet::default(),
            &target,
        )
        .expect("compiled");
        staged.commit().expect("committed");
        assert_eq!(counts.written, 2);
        let set = AllowSet::read(&target).expect("read");
        assert_eq!(set.len(), 2);
        assert!(set.covers(&entry("x.safe.example", false)));
        assert!(AllowSet::read(&dir.join("none.rpz"))
            .expect("none")
            .is_empty());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn state_is_only_for_its_url() {
        let dir = dir("state");
        let file = dir.join("l.rpz");
        let state = State {
            url: "http://a/l".into(),
            etag: Some("\"1\"".into()),
            entries: 3,
            ..State::default()
        };
        write_state(&file, &state).expect("written");
        assert_eq!(read_state(&file, "http://a/l"), Some(state));
        assert_eq!(read_state(&file, "http://b/l"), None);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
