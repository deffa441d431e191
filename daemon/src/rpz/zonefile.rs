//! The zone file a secondary keeps: a header comment, then one record per line in
//! presentation format (`presentation`: every name byte outside `[A-Za-z0-9*_/-]` as `\DDD`),
//! absolute names, SOA first, no `$ORIGIN` — the form kresd's RPZ loader reads, and one an
//! IXFR can be applied to by copying the file line by line.
//!
//! A file is only ever replaced whole: written to a fresh temporary sibling created
//! exclusively, synced, renamed over the old one, and the directory synced. An IXFR's
//! differences ([`Diff`]) are the only records held in memory, within a budget; the stored
//! file streams through.

use std::ffi::OsString;
use std::hash::{BuildHasher, RandomState};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use domain::rdata::{Soa, ZoneRecordData};
use domain::zonefile::inplace::{Entry, Zonefile};
use hashbrown::HashTable;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::unistd::UnlinkatFlags;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::presentation::{parse_line, record_key};
use super::{Divergence, SoaTimers, TransferError};
use crate::manager::rundir;

/// How the first line of a file written here starts; a file without it was written by
/// someone else (or by a version that wrote names otherwise), and an IXFR is not applied to
/// it (it is transferred whole).
pub(crate) const HEADER: &str = "; zone transfer, one record per line, names escaped:";

/// How much of a file is read to find its SOA.
const SOA_PREFIX: usize = 64 * 1024;

/// The buffer of a stored file's reader and of a temporary file's writer.
const BUFFER: usize = 256 * 1024;

/// How a stored file is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Written here: one record per line, an IXFR can be applied to it.
    OneRecordPerLine,
    /// Any other zone file (an operator's, another tool's).
    Other,
}

/// The SOA of a stored zone file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StoredSoa {
    /// The zone's serial.
    pub serial: u32,
    /// The zone's timers.
    pub timers: SoaTimers,
    /// Whether an IXFR can be applied to the file.
    pub layout: Layout,
}

/// The timers of a SOA's data.
pub(crate) fn timers<N>(soa: &Soa<N>) -> SoaTimers {
    let secs = |ttl: domain::base::Ttl| Duration::from_secs(u64::from(ttl.as_secs()));
    SoaTimers {
        refresh: secs(soa.refresh()),
        retry: secs(soa.retry()),
        expire: secs(soa.expire()),
    }
}

/// The SOA that starts `file`, if it is there, a regular file and readable (a small prefix;
/// a FIFO or a device is not opened in a way that waits on it, nor read).
pub(crate) fn stored_soa(file: &Path) -> Option<StoredSoa> {
    let mut prefix = Vec::with_capacity(SOA_PREFIX);
    kres_config::regular_file::open_regular(file)
        .ok()?
        .take(SOA_PREFIX as u64)
        .read_to_end(&mut prefix)
        .ok()?;
    let layout = if prefix.starts_with(HEADER.as_bytes()) {
        Layout::OneRecordPerLine
    } else {
        Layout::Other
    };
    // Whole lines only: a record cut by the prefix's end would not parse.
    let end = prefix.iter().rposition(|b| *b == b'\n')? + 1;
    let mut zone = Zonefile::new();
    zone.extend_from_slice(&prefix[..end]);
    // The first entry: a record, and the SOA (an `$INCLUDE` first is not followed).
    let Entry::Record(record) = zone.next_entry().ok()?? else {
        return None;
    };
    let ZoneRecordData::Soa(soa) = record.data() else {
        return None;
    };
    Some(StoredSoa {
        serial: soa.serial().into_int(),
        timers: timers(soa),
        layout,
    })
}

/// The owner of a line as written here (its first token), lower case; `None` for a
/// comment or an empty line.
fn owner_token(line: &str) -> Option<String> {
    let token = line.split_ascii_whitespace().next()?;
    (!token.starts_with(';')).then(|| token.to_ascii_lowercase())
}

/// The net differences of an IXFR's sequence of changes: what leaves the stored zone and
/// what comes in. The only records a transfer holds in memory, and held within a budget of
/// heap: keys and lines are packed into large chunks, the tables hold where they are
/// (16 bytes a record), and every allocation is counted before it is made.
#[derive(Debug)]
pub(crate) struct Diff {
    /// The most bytes of heap the diff may hold.
    budget: usize,
    /// The bytes of every key ([`record_key`]) and added line, one after the other; a chunk
    /// is never reallocated, so its bytes are counted once and never copied.
    chunks: Vec<Vec<u8>>,
    /// Records of the stored zone to leave out (their keys).
    deleted: HashTable<Packed>,
    /// Records to add (their keys and lines); one added, then deleted again is withdrawn
    /// in place, not removed, so that the table never grows but by a counted step.
    added: HashTable<Packed>,
    /// Hashes of the owners ([`super::presentation::owner_text`]) of every deleted or added record: only the
    /// stored lines of these owners are parsed (a collision parses one line more).
    owners: HashTable<u64>,
    /// The keyed hash of keys and owners (SipHash, random keys: a primary cannot choose
    /// collisions).
    hasher: RandomState,
}

/// Where a record's key (and line) lie in a [`Diff`]'s chunks.
#[derive(Clone, Copy, Debug)]
struct Packed {
    /// The chunk.
    chunk: u32,
    /// Where the key starts in it; the line follows the key.
    start: u32,
    /// The key's length.
    key_len: u32,
    /// The line's length (0 for a deletion), or [`WITHDRAWN`].
    line_len: u32,
}

/// The line length of an added record deleted again by a later change.
const WITHDRAWN: u32 = u32::MAX;

/// The line length of a deleted record once it was found in the stored file.
const FOUND: u32 = u32::MAX - 1;

/// The size of a [`Diff`]'s chunks (a larger record has a chunk of its own).
const CHUNK: usize = 256 * 1024;

/// A [`Diff`] would need more heap than its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OverBudget;

impl Packed {
    fn key<'a>(&self, chunks: &'a [Vec<u8>]) -> &'a [u8] {
        let start = self.start as usize;
        chunks
            .get(self.chunk as usize)
            .and_then(|chunk| chunk.get(start..start + self.key_len as usize))
            .unwrap_or_default()
    }

    /// The line of an added record; `None` when withdrawn.
    fn line<'a>(&self, chunks: &'a [Vec<u8>]) -> Option<&'a [u8]> {
        if self.line_len == WITHDRAWN {
            return None;
        }
        let start = (self.start + self.key_len) as usize;
        chunks
            .get(self.chunk as usize)
            .and_then(|chunk| chunk.get(start..start + self.line_len as usize))
    }
}

/// The bytes a hash table of `capacity` entries of `size` bytes allocates (hashbrown: a
/// power of two of buckets, at most 7/8 full, one control byte each and a group more).
fn table_bytes(capacity: usize, size: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = match capacity {
        0..4 => 4,
        4..8 => 8,
        _ => (capacity.saturating_mul(8) / 7).next_power_of_two(),
    };
    buckets * (size + 1) + 16
}

impl Diff {
    /// An empty diff that may hold `budget` bytes of heap.
    pub(crate) fn new(budget: u64) -> Diff {
        Diff {
            budget: usize::try_from(budget).unwrap_or(usize::MAX),
            chunks: Vec::new(),
            deleted: HashTable::new(),
            added: HashTable::new(),
            owners: HashTable::new(),
            hasher: RandomState::new(),
        }
    }

    /// The bytes of heap the diff holds.
    pub(crate) fn heap_bytes(&self) -> usize {
        let chunks: usize = self.chunks.iter().map(Vec::capacity).sum();
        chunks
            + self.chunks.capacity() * std::mem::size_of::<Vec<u8>>()
            + table_bytes(self.deleted.capacity(), std::mem::size_of::<Packed>())
            + table_bytes(self.added.capacity(), std::mem::size_of::<Packed>())
            + table_bytes(self.owners.capacity(), std::mem::size_of::<u64>())
    }

    /// Whether `more` bytes of heap fit beside what is held.
    fn fits(&self, more: usize) -> Result<(), OverBudget> {
        if more == 0 {
            return Ok(());
        }
        match self.heap_bytes().checked_add(more) {
            Some(total) if total <= self.budget => Ok(()),
            _ => Err(OverBudget),
        }
    }

    /// The bytes that make room in `table` for one entry more: none while it has room, else
    /// a table of twice the entries (the old one is freed only after the move).
    fn growth<T>(table: &HashTable<T>) -> usize {
        if table.len() < table.capacity() {
            return 0;
        }
        table_bytes((table.len() * 2).max(16), std::mem::size_of::<T>())
    }

    /// A record leaves the zone: one added by an earlier change is withdrawn, one of the
    /// stored zone is left out.
    pub(crate) fn delete(&mut self, key: &[u8], owner: &str) -> Result<(), OverBudget> {
        let hash = self.hasher.hash_one(key);
        let chunks = &self.chunks;
        let added = self
            .added
            .find_mut(hash, |p| p.key(chunks) == key)
            .filter(|p| p.line_len != WITHDRAWN);
        if let Some(added) = added {
            added.line_len = WITHDRAWN;
        } else if self.deleted.find(hash, |p| p.key(chunks) == key).is_none() {
            self.fits(Self::growth(&self.deleted))?;
            let packed = self.pack(key, b"")?;
            let (chunks, hasher) = (&self.chunks, &self.hasher);
            self.deleted.reserve(1, |p| hasher.hash_one(p.key(chunks)));
            self.deleted
                .insert_unique(hash, packed, |p| hasher.hash_one(p.key(chunks)));
        }
        self.note_owner(owner)
    }

    /// A record comes in (replacing a stored one with the same key: a new TTL).
    pub(crate) fn add(&mut self, key: &[u8], owner: &str, line: &str) -> Result<(), OverBudget> {
        let hash = self.hasher.hash_one(key);
        let chunks = &self.chunks;
        let known = self.added.find(hash, |p| p.key(chunks) == key).is_some();
        if !known {
            self.fits(Self::growth(&self.added))?;
        }
        let packed = self.pack(key, line.as_bytes())?;
        let (chunks, hasher) = (&self.chunks, &self.hasher);
        match self.added.find_mut(hash, |p| p.key(chunks) == key) {
            Some(entry) => *entry = packed,
            None => {
                self.added.reserve(1, |p| hasher.hash_one(p.key(chunks)));
                self.added
                    .insert_unique(hash, packed, |p| hasher.hash_one(p.key(chunks)));
            }
        }
        self.note_owner(owner)
    }

    /// Remember `owner` among the owners the diff touches.
    fn note_owner(&mut self, owner: &str) -> Result<(), OverBudget> {
        let hash = self.hasher.hash_one(owner.as_bytes());
        if self.owners.find(hash, |h| *h == hash).is_none() {
            self.fits(Self::growth(&self.owners))?;
            self.owners.reserve(1, |h| *h);
            self.owners.insert_unique(hash, hash, |h| *h);
        }
        Ok(())
    }

    /// Copy `key` and `line` into the chunks (a new chunk when the last one is full).
    fn pack(&mut self, key: &[u8], line: &[u8]) -> Result<Packed, OverBudget> {
        let needed = key.len() + line.len();
        let room = self
            .chunks
            .last()
            .is_some_and(|c| c.capacity() - c.len() >= needed);
        if !room {
            let size = needed.max(CHUNK);
            let list_growth = if self.chunks.len() == self.chunks.capacity() {
                self.chunks.capacity().max(4) * 2 * std::mem::size_of::<Vec<u8>>()
            } else {
                0
            };
            self.fits(size + list_growth)?;
            self.chunks.push(Vec::with_capacity(size));
        }
        let index = self.chunks.len().checked_sub(1).ok_or(OverBudget)?;
        let chunk = self.chunks.get_mut(index).ok_or(OverBudget)?;
        let number = |n: usize| u32::try_from(n).map_err(|_| OverBudget);
        let packed = Packed {
            chunk: number(index)?,
            start: number(chunk.len())?,
            key_len: number(key.len())?,
            line_len: number(line.len())?,
        };
        chunk.extend_from_slice(key);
        chunk.extend_from_slice(line);
        Ok(packed)
    }

    /// Whether a stored record with `key` leaves the zone.
    #[cfg(test)]
    fn is_deleted(&self, key: &[u8]) -> bool {
        let hash = self.hasher.hash_one(key);
        self.deleted
            .find(hash, |p| p.key(&self.chunks) == key)
            .is_some()
    }

    /// Whether a record with `key` is deleted (`None`: it is not); the first time it is asked
    /// of a deleted record, that record is marked found (`Some(true)`), and is not new again
    /// (`Some(false)`).
    fn find_deleted(&mut self, key: &[u8]) -> Option<bool> {
        let hash = self.hasher.hash_one(key);
        let chunks = &self.chunks;
        let p = self.deleted.find_mut(hash, |p| p.key(chunks) == key)?;
        let first = p.line_len != FOUND;
        p.line_len = FOUND;
        Some(first)
    }

    /// Whether a record with `key` is added (a stored one is replaced by it).
    fn is_added(&self, key: &[u8]) -> bool {
        let hash = self.hasher.hash_one(key);
        self.added
            .find(hash, |p| p.key(&self.chunks) == key)
            .is_some_and(|p| p.line_len != WITHDRAWN)
    }

    /// Whether stored lines of `owner` may be touched by the diff.
    fn may_touch(&self, owner: &str) -> bool {
        let hash = self.hasher.hash_one(owner.as_bytes());
        self.owners.find(hash, |h| *h == hash).is_some()
    }

    /// The lines added.
    fn added_lines(&self) -> impl Iterator<Item = &[u8]> {
        self.added.iter().filter_map(|p| p.line(&self.chunks))
    }

    /// How many stored records are left out.
    pub(crate) fn deleted_count(&self) -> usize {
        self.deleted.len()
    }

    /// The lines added, sorted (for tests).
    #[cfg(test)]
    pub(crate) fn sorted_added_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .added_lines()
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect();
        lines.sort();
        lines
    }
}

/// Copy the stored `file` to `out` with `diff` applied, `soa_line` in place of the old SOA.
/// Every deleted record must be in the file, else the file and the primary diverged.
pub(crate) async fn apply(
    file: &Path,
    diff: &mut Diff,
    soa_line: &str,
    out: &mut TempFile,
) -> Result<(), TransferError> {
    let read_error = |source| TransferError::File {
        path: file.to_owned(),
        source,
    };
    let stored = tokio::fs::File::open(file).await.map_err(read_error)?;
    let mut lines = tokio::io::BufReader::with_capacity(BUFFER, stored).lines();
    // The deleted records found, each once: one record may be stored on several lines whose
    // names differ only in case (an AXFR may bring it so), and every such line goes.
    let mut found = 0;
    let mut soa_seen = false;
    while let Some(line) = lines.next_line().await.map_err(read_error)? {
        let Some(owner) = owner_token(&line) else {
            continue;
        };
        if !soa_seen {
            // The first record is the old SOA (the header comment was skipped).
            soa_seen = true;
            out.write(header(soa_line).as_bytes()).await?;
            out.write(soa_line.as_bytes()).await?;
            continue;
        }
        if diff.may_touch(&owner) {
            let record =
                parse_line(&line).map_err(|e| TransferError::Diverged(Divergence::Line(e)))?;
            let key = record_key(record.owner(), record.class(), record.data());
            if let Some(first) = diff.find_deleted(&key) {
                found += usize::from(first);
                continue;
            }
            if diff.is_added(&key) {
                continue;
            }
        }
        out.write(line.as_bytes()).await?;
        out.write(b"\n").await?;
    }
    let deleted = diff.deleted_count();
    if found != deleted {
        return Err(TransferError::Diverged(Divergence::NotInFile {
            missing: deleted.saturating_sub(found),
            deleted,
        }));
    }
    for line in diff.added_lines() {
        out.write(line).await?;
    }
    Ok(())
}

/// The header comment of a file whose SOA line is `soa_line`.
pub(crate) fn header(soa_line: &str) -> String {
    let zone = soa_line.split_ascii_whitespace().next().unwrap_or(".");
    format!("{HEADER} {zone}\n")
}

/// A file being written next to the one it will replace, under a fresh name
/// (`.NAME.RANDOM.transfer`) created exclusively: a link or a file planted in the directory
/// is never followed, truncated or written through, and two transfers to one file never
/// share a temporary file. Dropped without [`TempFile::commit`], or when the commit fails,
/// it is removed and the stored file stays as it was.
pub(crate) struct TempFile {
    /// The temporary file's path, for errors.
    path: PathBuf,
    /// The file it replaces on commit, for errors.
    target: PathBuf,
    /// The open file; `None` once committed or removed.
    open: Option<OpenTemp>,
}

/// A temporary file being written, and where it lies.
struct OpenTemp {
    /// The directory of both files, opened once: the rename and the removal are made
    /// relative to it, whatever happens to its path meanwhile.
    dir: OwnedFd,
    /// The temporary file's name in the directory.
    name: OsString,
    /// The name of the file it replaces.
    target_name: OsString,
    /// The writer.
    out: tokio::io::BufWriter<tokio::fs::File>,
}

impl OpenTemp {
    /// Remove the temporary file.
    fn remove(&self) {
        let _ = nix::unistd::unlinkat(&self.dir, self.name.as_os_str(), UnlinkatFlags::NoRemoveDir);
    }
}

/// Whether `name` is the name of a temporary sibling of the file `target_name`, as
/// [`TempFile`] makes them (`.NAME.` 16 hex digits `.transfer`) or as they were once made
/// (`.NAME.transfer`).
fn is_temporary_of(name: &[u8], target_name: &[u8]) -> bool {
    let Some(rest) = name
        .strip_prefix(b".")
        .and_then(|n| n.strip_prefix(target_name))
        .and_then(|n| n.strip_suffix(b".transfer"))
    else {
        return false;
    };
    match rest {
        [] => true,
        [b'.', random @ ..] => random.len() == 16 && random.iter().all(u8::is_ascii_hexdigit),
        _ => false,
    }
}

/// Remove the temporary siblings of `target` that an interrupted transfer left (a crash,
/// a kill): with fresh names, none is ever reused. Called before a zone's refresh, which
/// runs alone for its file. Links are removed, never followed.
pub(crate) async fn remove_leftovers(target: &Path) {
    let target = target.to_owned();
    let removed = tokio::task::spawn_blocking(move || {
        use std::os::unix::ffi::OsStrExt;
        let (Some(name), dir) = (target.file_name(), target.parent()) else {
            return;
        };
        let dir = match dir {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if is_temporary_of(entry.file_name().as_bytes(), name.as_bytes()) {
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => tracing::info!(
                        "rpz: removed {}, left by an interrupted transfer",
                        entry.path().display()
                    ),
                    Err(e) => tracing::warn!("rpz: cannot remove {}: {e}", entry.path().display()),
                }
            }
        }
    });
    let _ = removed.await;
}

impl TempFile {
    /// Create a fresh temporary sibling of `target` in its directory.
    pub(crate) async fn create(target: &Path) -> Result<TempFile, TransferError> {
        let file_error = |source| TransferError::File {
            path: target.to_owned(),
            source,
        };
        let name = target
            .file_name()
            .ok_or_else(|| file_error(std::io::Error::other("not a file path")))?;
        let temporary = rundir::fresh_sibling_name(name, "transfer").map_err(file_error)?;
        TempFile::create_named(target, temporary)
    }

    /// Create the temporary file `temporary` beside `target`, exclusively.
    fn create_named(target: &Path, temporary: OsString) -> Result<TempFile, TransferError> {
        let path = target.with_file_name(&temporary);
        let file_error = |source| TransferError::File {
            path: path.clone(),
            source,
        };
        let target_name = target
            .file_name()
            .ok_or_else(|| file_error(std::io::Error::other("not a file path")))?
            .to_owned();
        let dir = match target.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        // The directory may be a link (an operator's choice); the temporary name may not.
        // Neither open waits: a directory, and a name created exclusively, are no FIFO.
        let dir = nix::fcntl::open(
            dir,
            OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| file_error(e.into()))?;
        let file = rundir::create_exclusive(&dir, &temporary, 0o666).map_err(file_error)?;
        let file = tokio::fs::File::from_std(std::fs::File::from(file));
        Ok(TempFile {
            path,
            target: target.to_owned(),
            open: Some(OpenTemp {
                dir,
                name: temporary,
                target_name,
                out: tokio::io::BufWriter::with_capacity(BUFFER, file),
            }),
        })
    }

    /// Append `bytes`.
    pub(crate) async fn write(&mut self, bytes: &[u8]) -> Result<(), TransferError> {
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        open.out
            .write_all(bytes)
            .await
            .map_err(|source| TransferError::File {
                path: self.path.clone(),
                source,
            })
    }

    /// Flush, sync, rename over the target and sync the directory; on an error before the
    /// rename, the temporary file is removed.
    pub(crate) async fn commit(mut self) -> Result<(), TransferError> {
        let Some(mut open) = self.open.take() else {
            return Ok(());
        };
        let synced = async {
            open.out.flush().await?;
            open.out.get_mut().sync_all().await
        }
        .await;
        let renamed = synced.and_then(|()| {
            nix::fcntl::renameat(
                &open.dir,
                open.name.as_os_str(),
                &open.dir,
                open.target_name.as_os_str(),
            )
            .map_err(std::io::Error::from)
        });
        if let Err(source) = renamed {
            open.remove();
            return Err(TransferError::File {
                path: self.path.clone(),
                source,
            });
        }
        // The rename is made durable; the sync may wait for the disk, off the runtime.
        let OpenTemp { dir, .. } = open;
        let synced = tokio::task::spawn_blocking(move || nix::unistd::fsync(&dir))
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r.map_err(std::io::Error::from));
        synced.map_err(|source| TransferError::File {
            path: self.target.clone(),
            source,
        })
    }

    /// The temporary file's path (for tests).
    #[cfg(test)]
    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(open) = self.open.take() {
            open.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpz::presentation::owner_text;
    use domain::base::iana::Class;

    const SOA1: &str = "blocklist.rpz. 3600 IN SOA primary.blocklist.rpz. hostmaster.blocklist.rpz. 1 300 60 86400 60\n";
    const SOA2: &str = "blocklist.rpz. 3600 IN SOA primary.blocklist.rpz. hostmaster.blocklist.rpz. 2 300 60 86400 60\n";

    fn key_of(line: &str) -> (Vec<u8>, String) {
        let record = parse_line(line).unwrap();
        (
            record_key(record.owner(), record.class(), record.data()),
            owner_text(record.owner()),
        )
    }

    #[tokio::test]
    async fn stored_lines_of_names_with_any_byte_are_found_and_deleted() {
        use crate::rpz::presentation::record_line;
        use domain::base::name::NameBuilder;
        use domain::base::{Name, Record, Ttl};
        use domain::rdata::Cname;

        let dir = std::env::temp_dir().join(format!("rpz-bytes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("zone.rpz");
        let zone: Name<Vec<u8>> = "blocklist.rpz.".parse().unwrap();
        let records: Vec<_> = (0..=255u8)
            .map(|byte| {
                let mut owner = NameBuilder::new_vec();
                owner.append_label(&[b'x', byte, b'y']).unwrap();
                let owner = owner.append_origin(&zone).unwrap();
                let data: ZoneRecordData<Vec<u8>, Name<Vec<u8>>> =
                    ZoneRecordData::Cname(Cname::new(Name::root_vec()));
                Record::new(owner, Class::IN, Ttl::from_secs(60), data)
            })
            .collect();
        let mut stored = format!("{}{SOA1}", header(SOA1));
        for record in &records {
            stored.push_str(&record_line(record).unwrap());
        }
        std::fs::write(&file, &stored).unwrap();
        // Every record deleted, keyed and found by its owner as the transfer gives it. The
        // bytes `A`-`Z` and `a`-`z` make names that differ only in case: one record on two
        // lines, both deleted (counted once).
        let mut diff = Diff::new(BUDGET);
        for record in &records {
            let key = record_key(record.owner(), record.class(), record.data());
            diff.delete(&key, &owner_text(record.owner())).unwrap();
        }
        let mut out = TempFile::create(&file).await.unwrap();
        apply(&file, &mut diff, SOA2, &mut out).await.unwrap();
        out.commit().await.unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text, format!("{}{SOA2}", header(SOA2)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_stored_soa_is_read_from_files_written_here_and_elsewhere() {
        let dir = std::env::temp_dir().join(format!("rpz-zonefile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ours = dir.join("ours.rpz");
        std::fs::write(
            &ours,
            format!("{}{SOA2}x.blocklist.rpz. 60 IN CNAME .\n", header(SOA2)),
        )
        .unwrap();
        let soa = stored_soa(&ours).unwrap();
        assert_eq!(soa.serial, 2);
        assert_eq!(soa.layout, Layout::OneRecordPerLine);
        assert_eq!(soa.timers.refresh, Duration::from_secs(300));
        assert_eq!(soa.timers.retry, Duration::from_secs(60));
        assert_eq!(soa.timers.expire, Duration::from_secs(86400));
        let theirs = dir.join("theirs.rpz");
        std::fs::write(
            &theirs,
            "$TTL 60\n@ IN SOA ns. host. (\n 7 ; serial\n 1 2 3 4 )\nx CNAME .\n",
        )
        .unwrap();
        // No origin: a relative owner cannot be read, and then there is no SOA to speak of.
        assert_eq!(stored_soa(&theirs), None);
        std::fs::write(
            &theirs,
            "$TTL 60\nfeed. IN SOA ns. host. (\n 7 ; serial\n 1 2 3 4 )\nx.feed. CNAME .\n",
        )
        .unwrap();
        let soa = stored_soa(&theirs).unwrap();
        assert_eq!((soa.serial, soa.layout), (7, Layout::Other));
        std::fs::write(&theirs, "x.feed. 60 IN CNAME .\n").unwrap();
        assert_eq!(stored_soa(&theirs), None, "the first record is no SOA");
        assert_eq!(stored_soa(&dir.join("missing")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_diff_is_applied_by_copying_the_file() {
        let dir = std::env::temp_dir().join(format!("rpz-apply-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("zone.rpz");
        let stored = format!(
            "{}{SOA1}a.blocklist.rpz. 60 IN CNAME .\nb.blocklist.rpz. 60 IN CNAME .\nc.blocklist.rpz. 60 IN A 192.0.2.1\n",
            header(SOA1)
        );
        std::fs::write(&file, &stored).unwrap();
        let mut diff = Diff::new(BUDGET);
        let (key, owner) = key_of("B.blocklist.rpz. 60 IN CNAME .");
        diff.delete(&key, &owner).unwrap();
        let line = "d.blocklist.rpz. 60 IN CNAME .\n";
        let (key, owner) = key_of(line);
        diff.add(&key, &owner, line).unwrap();
        // A new TTL: deleted and added again.
        let (key, owner) = key_of("c.blocklist.rpz. 60 IN A 192.0.2.1");
        diff.delete(&key, &owner).unwrap();
        diff.add(&key, &owner, "c.blocklist.rpz. 30 IN A 192.0.2.1\n")
            .unwrap();
        let mut out = TempFile::create(&file).await.unwrap();
        apply(&file, &mut diff, SOA2, &mut out).await.unwrap();
        out.commit().await.unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], header(SOA2).trim_end());
        assert_eq!(lines[1], SOA2.trim_end());
        lines[2..].sort();
        assert_eq!(
            lines[2..],
            [
                "a.blocklist.rpz. 60 IN CNAME .",
                "c.blocklist.rpz. 30 IN A 192.0.2.1",
                "d.blocklist.rpz. 60 IN CNAME ."
            ]
        );
        assert_eq!(entries(&dir), ["zone.rpz"], "no temporary file left");

        // Deleting what the file does not hold: diverged, the file untouched.
        let mut diff = Diff::new(BUDGET);
        let (key, owner) = key_of("zz.blocklist.rpz. 60 IN CNAME .");
        diff.delete(&key, &owner).unwrap();
        let mut out = TempFile::create(&file).await.unwrap();
        let error = apply(&file, &mut diff, SOA1, &mut out).await.unwrap_err();
        drop(out);
        assert_eq!(error.reason(), "diverged", "{error}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
        assert_eq!(entries(&dir), ["zone.rpz"], "no temporary file left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A diff's budget in these tests, unless one is being tested.
    const BUDGET: u64 = 1 << 20;

    /// The names in `dir`, sorted.
    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A fresh directory for a test.
    fn test_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rpz-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_diff_nets_its_changes_out() {
        let mut diff = Diff::new(BUDGET);
        let (a, owner_a) = key_of("a.blocklist.rpz. 60 IN CNAME .");
        let (b, owner_b) = key_of("b.blocklist.rpz. 60 IN CNAME .");
        // Added by one change, deleted by the next: withdrawn, nothing of the file leaves.
        diff.add(&a, &owner_a, "a.blocklist.rpz. 60 IN CNAME .\n")
            .unwrap();
        assert!(diff.is_added(&a));
        diff.delete(&a, &owner_a).unwrap();
        assert!(!diff.is_added(&a) && !diff.is_deleted(&a));
        assert_eq!(diff.deleted_count(), 0);
        // Deleted again: now a record of the file leaves.
        diff.delete(&a, &owner_a).unwrap();
        assert!(diff.is_deleted(&a));
        // Added once more (after its deletion): the file's record is replaced.
        diff.add(&a, &owner_a, "a.blocklist.rpz. 30 IN CNAME .\n")
            .unwrap();
        assert!(diff.is_added(&a) && diff.is_deleted(&a));
        // A record added twice keeps its last line.
        diff.add(&b, &owner_b, "b.blocklist.rpz. 60 IN CNAME .\n")
            .unwrap();
        diff.add(&b, &owner_b, "b.blocklist.rpz. 10 IN CNAME .\n")
            .unwrap();
        assert_eq!(
            diff.sorted_added_lines(),
            [
                "a.blocklist.rpz. 30 IN CNAME .\n",
                "b.blocklist.rpz. 10 IN CNAME .\n"
            ]
        );
        assert_eq!(diff.deleted_count(), 1);
        assert!(diff.may_touch(&owner_a) && diff.may_touch(&owner_b));
        assert!(!diff.may_touch("c.blocklist.rpz."));
    }

    #[test]
    fn a_diff_never_holds_more_than_its_budget() {
        // Records with the longest names a primary can compress to a few bytes each.
        let long = vec!["x".repeat(60); 3].join(".");
        let budget = 2 << 20;
        let mut diff = Diff::new(budget);
        let mut held = 0;
        for i in 0.. {
            let line = format!("n{i}.{long}.blocklist.rpz. 60 IN CNAME n{i}.{long}.example.\n");
            let (key, owner) = key_of(&line);
            let result = if i % 2 == 0 {
                diff.delete(&key, &owner)
            } else {
                diff.add(&key, &owner, &line)
            };
            assert!(
                diff.heap_bytes() <= budget as usize,
                "{} bytes",
                diff.heap_bytes()
            );
            if result == Err(OverBudget) {
                break;
            }
            held += 1;
        }
        // Keys of about 400 bytes, lines of about 420: at least 3/4 of the budget is records.
        assert!(
            held > (budget as usize) * 3 / 4 / 600,
            "only {held} records held"
        );
        let used = diff.heap_bytes();
        assert!(
            used > (budget as usize) / 2,
            "{used} bytes of {budget} used"
        );
        // Small records cost little more than their bytes.
        let mut diff = Diff::new(budget);
        for i in 0..10_000 {
            let (key, owner) = key_of(&format!("n{i}.blocklist.rpz. 60 IN CNAME ."));
            diff.delete(&key, &owner).unwrap();
        }
        let per_record = diff.heap_bytes() / 10_000;
        assert!(per_record < 128, "{per_record} bytes a record");
    }

    #[tokio::test]
    async fn a_temporary_file_never_follows_a_planted_link() {
        let dir = test_dir("planted");
        let file = dir.join("zone.rpz");
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        // A link at the name the temporary file had when it was predictable.
        std::os::unix::fs::symlink(&victim, dir.join(".zone.rpz.transfer")).unwrap();
        let mut out = TempFile::create(&file).await.unwrap();
        assert_ne!(out.path(), dir.join(".zone.rpz.transfer"));
        out.write(b"the zone\n").await.unwrap();
        out.commit().await.unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "the zone\n");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        // A link at the very name chosen is not followed either: the creation fails.
        for (link, to) in [("planted", &victim), ("dangling", &dir.join("created"))] {
            std::os::unix::fs::symlink(to, dir.join(link)).unwrap();
            let error = match TempFile::create_named(&file, link.into()) {
                Ok(_) => panic!("a link was opened"),
                Err(error) => error,
            };
            assert_eq!(error.reason(), "file", "{error}");
            assert!(error.to_string().contains(link), "{error}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(
            !dir.join("created").exists(),
            "nothing created through a link"
        );
        assert_eq!(
            entries(&dir),
            [
                ".zone.rpz.transfer",
                "dangling",
                "planted",
                "victim",
                "zone.rpz"
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn two_transfers_to_one_file_never_share_a_temporary_file() {
        let dir = test_dir("concurrent");
        let file = dir.join("zone.rpz");
        let mut first = TempFile::create(&file).await.unwrap();
        let mut second = TempFile::create(&file).await.unwrap();
        assert_ne!(first.path(), second.path());
        let (a, b) = ("a\n".repeat(100_000), "b\n".repeat(100_000));
        // Written interleaved: each file holds its own text only.
        for _ in 0..2 {
            first.write(&a.as_bytes()[..a.len() / 2]).await.unwrap();
            second.write(&b.as_bytes()[..b.len() / 2]).await.unwrap();
        }
        first.commit().await.unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), a);
        second.commit().await.unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), b);
        assert_eq!(entries(&dir), ["zone.rpz"]);
        // Dropped unfinished, or failing to commit, a temporary file is removed.
        let mut dropped = TempFile::create(&file).await.unwrap();
        dropped.write(b"half a zone").await.unwrap();
        drop(dropped);
        let blocked = dir.join("blocked");
        std::fs::create_dir_all(blocked.join("in the way")).unwrap();
        let mut failing = TempFile::create(&blocked).await.unwrap();
        failing.write(b"a zone").await.unwrap();
        let error = failing.commit().await.unwrap_err();
        assert_eq!(error.reason(), "file", "{error}");
        assert!(blocked.join("in the way").is_dir(), "the target stays");
        assert_eq!(entries(&dir), ["blocked", "zone.rpz"]);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), b);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn what_an_interrupted_transfer_left_is_removed_and_nothing_else() {
        let dir = test_dir("leftovers");
        let file = dir.join("zone.rpz");
        std::fs::write(&file, "the zone").unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        for name in [
            ".zone.rpz.0123456789abcdef.transfer",
            ".zone.rpz.transfer",
            ".zone.rpz.0123456789abcdeg.transfer",
            ".zone.rpz.0123456789abcdef.tmp",
            ".zone.rpzz.0123456789abcdef.transfer",
            ".other.rpz.0123456789abcdef.transfer",
        ] {
            std::fs::write(dir.join(name), "left").unwrap();
        }
        std::os::unix::fs::symlink(&victim, dir.join(".zone.rpz.fedcba9876543210.transfer"))
            .unwrap();
        remove_leftovers(&file).await;
        assert_eq!(
            entries(&dir),
            [
                ".other.rpz.0123456789abcdef.transfer",
                ".zone.rpz.0123456789abcdef.tmp",
                ".zone.rpz.0123456789abcdeg.transfer",
                ".zone.rpzz.0123456789abcdef.transfer",
                "victim",
                "zone.rpz"
            ]
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "the zone");
        // A fresh temporary file has the name the removal looks for.
        let out = TempFile::create(&file).await.unwrap();
        let name = out.path().file_name().unwrap().to_owned();
        assert!(
            is_temporary_of(name.as_encoded_bytes(), b"zone.rpz"),
            "{name:?}"
        );
        remove_leftovers(&file).await;
        assert!(!out.path().exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
