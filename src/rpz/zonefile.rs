//! The zone file a secondary keeps: a header comment, then one record per line in
//! presentation format, absolute names, SOA first, no `$ORIGIN` — the form kresd's RPZ
//! loader reads, and one an IXFR can be applied to by copying the file line by line.
//!
//! A file is only ever replaced whole: written to a temporary sibling, synced, renamed over
//! the old one, and the directory synced. An IXFR's differences ([`Diff`]) are the only
//! records held in memory; the stored file streams through.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use domain::base::iana::Class;
use domain::base::name::ToName;
use domain::base::rdata::{ComposeRecordData, RecordData};
use domain::base::zonefile_fmt::{DisplayKind, ZonefileFmt};
use domain::base::Record;
use domain::rdata::{Soa, ZoneRecordData};
use domain::zonefile::inplace::{Entry, ScannedRecord, Zonefile};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::{SoaTimers, TransferError};

/// How the first line of a file written here starts; a file without it was written by
/// someone else, and an IXFR is not applied to it (it is transferred whole).
pub(crate) const HEADER: &str = "; zone transfer, one record per line:";

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
    crate::config::regular_file::open_regular(file)
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

/// A record as one line of a zone file (newline included).
pub(crate) fn record_line<N, D>(record: &Record<N, D>) -> String
where
    N: ToName,
    D: RecordData + ZonefileFmt,
{
    format!("{}\n", record.display_zonefile(DisplayKind::Simple))
}

/// What identifies a record in a zone for IXFR (RFC 1995: name, type, class and data; not
/// the TTL), in canonical form so that case does not matter where DNS says it does not.
pub(crate) fn record_key<N, D>(owner: &N, class: Class, data: &D) -> Vec<u8>
where
    N: ToName,
    D: ComposeRecordData,
{
    let mut key = Vec::with_capacity(64);
    // Writing to a Vec cannot fail.
    let _ = owner.compose_canonical(&mut key);
    key.extend_from_slice(&data.rtype().to_int().to_be_bytes());
    key.extend_from_slice(&class.to_int().to_be_bytes());
    let _ = data.compose_canonical_rdata(&mut key);
    key
}

/// The owner of a line as written here (its first token), lower case; `None` for a
/// comment or an empty line.
fn owner_token(line: &str) -> Option<String> {
    let token = line.split_ascii_whitespace().next()?;
    (!token.starts_with(';')).then(|| token.to_ascii_lowercase())
}

/// The owner of a record as [`record_line`] writes it, lower case.
pub(crate) fn owner_text<N: ToName>(owner: &N) -> String {
    owner.fmt_with_dot().to_string().to_ascii_lowercase()
}

/// One line of a file written here, parsed.
pub(crate) fn parse_line(line: &str) -> Result<ScannedRecord, String> {
    let mut zone = Zonefile::with_capacity(line.len() + 1);
    zone.extend_from_slice(line.as_bytes());
    zone.extend_from_slice(b"\n");
    match zone.next_entry() {
        Ok(Some(Entry::Record(record))) => Ok(record),
        Ok(_) => Err(format!("'{}' is no record", line.trim_end())),
        Err(e) => Err(format!("'{}': {e}", line.trim_end())),
    }
}

/// The net differences of an IXFR's sequence of changes: what leaves the stored zone and
/// what comes in. The only records a transfer holds in memory.
#[derive(Debug, Default)]
pub(crate) struct Diff {
    /// Records of the stored zone to leave out, by [`record_key`].
    deleted: HashSet<Vec<u8>>,
    /// Records to add, by [`record_key`], with their lines.
    added: HashMap<Vec<u8>, String>,
    /// The owners ([`owner_text`]) of every deleted or added record: only the stored lines
    /// of these owners are parsed.
    owners: HashSet<String>,
}

impl Diff {
    /// A record leaves the zone: one added by an earlier change is forgotten, one of the
    /// stored zone is left out.
    pub(crate) fn delete(&mut self, key: Vec<u8>, owner: String) {
        if self.added.remove(&key).is_none() {
            self.deleted.insert(key);
        }
        self.owners.insert(owner);
    }

    /// A record comes in (replacing a stored one with the same key: a new TTL).
    pub(crate) fn add(&mut self, key: Vec<u8>, owner: String, line: String) {
        self.added.insert(key, line);
        self.owners.insert(owner);
    }

    /// The lines added, sorted (for tests).
    #[cfg(test)]
    pub(crate) fn added_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.added.values().cloned().collect();
        lines.sort();
        lines
    }

    /// How many stored records are left out.
    #[cfg(test)]
    pub(crate) fn deleted_count(&self) -> usize {
        self.deleted.len()
    }
}

/// Copy the stored `file` to `out` with `diff` applied, `soa_line` in place of the old SOA.
/// Every deleted record must be in the file, else the file and the primary diverged.
pub(crate) async fn apply(
    file: &Path,
    diff: &Diff,
    soa_line: &str,
    out: &mut TempFile,
) -> Result<(), TransferError> {
    let read_error = |source| TransferError::File {
        path: file.to_owned(),
        source,
    };
    let stored = tokio::fs::File::open(file).await.map_err(read_error)?;
    let mut lines = tokio::io::BufReader::with_capacity(BUFFER, stored).lines();
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
        if diff.owners.contains(&owner) {
            let record = parse_line(&line).map_err(TransferError::Diverged)?;
            let key = record_key(record.owner(), record.class(), record.data());
            if diff.deleted.contains(&key) {
                found += 1;
                continue;
            }
            if diff.added.contains_key(&key) {
                continue;
            }
        }
        out.write(line.as_bytes()).await?;
        out.write(b"\n").await?;
    }
    if found != diff.deleted.len() {
        return Err(TransferError::Diverged(format!(
            "{} of the {} records the transfer deletes are not in the file",
            diff.deleted.len() - found,
            diff.deleted.len()
        )));
    }
    for line in diff.added.values() {
        out.write(line.as_bytes()).await?;
    }
    Ok(())
}

/// The header comment of a file whose SOA line is `soa_line`.
pub(crate) fn header(soa_line: &str) -> String {
    let zone = soa_line.split_ascii_whitespace().next().unwrap_or(".");
    format!("{HEADER} {zone}\n")
}

/// A file being written next to the one it will replace. Dropped without
/// [`TempFile::commit`], it is removed and the stored file stays as it was.
pub(crate) struct TempFile {
    /// The temporary file's path.
    path: PathBuf,
    /// The file it replaces on commit.
    target: PathBuf,
    /// The writer; `None` once committed.
    out: Option<tokio::io::BufWriter<tokio::fs::File>>,
}

impl TempFile {
    /// Create the temporary sibling of `target` (`.NAME.transfer` in its directory).
    pub(crate) async fn create(target: &Path) -> Result<TempFile, TransferError> {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = target.with_file_name(format!(".{name}.transfer"));
        let file = tokio::fs::File::create(&path)
            .await
            .map_err(|source| TransferError::File {
                path: path.clone(),
                source,
            })?;
        Ok(TempFile {
            path,
            target: target.to_owned(),
            out: Some(tokio::io::BufWriter::with_capacity(BUFFER, file)),
        })
    }

    fn error(&self, source: std::io::Error) -> TransferError {
        TransferError::File {
            path: self.path.clone(),
            source,
        }
    }

    /// Append `bytes`.
    pub(crate) async fn write(&mut self, bytes: &[u8]) -> Result<(), TransferError> {
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        match out.write_all(bytes).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.error(e)),
        }
    }

    /// Flush, sync, rename over the target and sync the directory.
    pub(crate) async fn commit(mut self) -> Result<(), TransferError> {
        let Some(mut out) = self.out.take() else {
            return Ok(());
        };
        let synced = async {
            out.flush().await?;
            out.get_mut().sync_all().await?;
            drop(out);
            tokio::fs::rename(&self.path, &self.target).await?;
            if let Some(dir) = self.target.parent() {
                let dir = if dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    dir
                };
                tokio::fs::File::open(dir).await?.sync_all().await?;
            }
            Ok(())
        }
        .await;
        synced.map_err(|source| TransferError::File {
            path: self.target.clone(),
            source,
        })
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.out.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOA1: &str = "blocklist.rpz. 3600 IN SOA primary.blocklist.rpz. hostmaster.blocklist.rpz. 1 300 60 86400 60\n";
    const SOA2: &str = "blocklist.rpz. 3600 IN SOA primary.blocklist.rpz. hostmaster.blocklist.rpz. 2 300 60 86400 60\n";

    fn key_of(line: &str) -> (Vec<u8>, String) {
        let record = parse_line(line).unwrap();
        (
            record_key(record.owner(), record.class(), record.data()),
            owner_text(record.owner()),
        )
    }

    #[test]
    fn lines_are_written_as_they_are_read() {
        for line in [
            SOA1,
            "a.example.blocklist.rpz. 3600 IN CNAME .\n",
            "*.b.example.blocklist.rpz. 60 IN CNAME rpz-passthru.\n",
            "c.example.blocklist.rpz. 3600 IN A 192.0.2.1\n",
            "d.example.blocklist.rpz. 3600 IN TXT \"a b\" \"c\"\n",
            "e.example.blocklist.rpz. 3600 IN AAAA 2001:db8::1\n",
        ] {
            let record = parse_line(line).unwrap();
            assert_eq!(record_line(&record), line);
        }
    }

    #[test]
    fn keys_ignore_case_of_names_and_the_ttl() {
        let (a, owner_a) = key_of("A.Example.blocklist.rpz. 3600 IN CNAME Target.Example.");
        let (b, owner_b) = key_of("a.example.BLOCKLIST.rpz. 60 IN CNAME target.example.");
        assert_eq!(a, b);
        assert_eq!(owner_a, owner_b);
        let (c, _) = key_of("a.example.blocklist.rpz. 60 IN CNAME other.example.");
        assert_ne!(a, c);
        let (t1, _) = key_of("t.blocklist.rpz. 60 IN TXT \"Case\"");
        let (t2, _) = key_of("t.blocklist.rpz. 60 IN TXT \"case\"");
        assert_ne!(t1, t2, "text keeps its case");
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
        let mut diff = Diff::default();
        let (key, owner) = key_of("B.blocklist.rpz. 60 IN CNAME .");
        diff.delete(key, owner);
        let line = "d.blocklist.rpz. 60 IN CNAME .\n";
        let (key, owner) = key_of(line);
        diff.add(key, owner, line.to_owned());
        // A new TTL: deleted and added again.
        let (key, owner) = key_of("c.blocklist.rpz. 60 IN A 192.0.2.1");
        diff.delete(key.clone(), owner.clone());
        diff.add(
            key,
            owner,
            "c.blocklist.rpz. 30 IN A 192.0.2.1\n".to_owned(),
        );
        let mut out = TempFile::create(&file).await.unwrap();
        apply(&file, &diff, SOA2, &mut out).await.unwrap();
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
        assert!(!dir.join(".zone.rpz.transfer").exists());

        // Deleting what the file does not hold: diverged, the file untouched.
        let mut diff = Diff::default();
        let (key, owner) = key_of("zz.blocklist.rpz. 60 IN CNAME .");
        diff.delete(key, owner);
        let mut out = TempFile::create(&file).await.unwrap();
        let error = apply(&file, &diff, SOA1, &mut out).await.unwrap_err();
        drop(out);
        assert_eq!(error.reason(), "diverged", "{error}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
        assert!(!dir.join(".zone.rpz.transfer").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
