//! Files the configuration names and the resolver's manager reads itself (a TSIG key, a zone
//! kept by transfer) must be regular files: a FIFO there would block the open, or the read,
//! for as long as nobody writes to it; a device or a socket is no file to read either. What
//! a path is gets checked without opening it (`stat`), and where it is opened it is opened
//! without blocking and checked again on the open descriptor (`fstat`), so that a file
//! replaced between the two cannot block either.

use std::fmt;
use std::fs::{File, FileType, Metadata};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

/// What a path is when it is not a regular file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Directory,
    Fifo,
    Socket,
    CharacterDevice,
    BlockDevice,
}

impl FileKind {
    /// What `file_type` is, when it is not a regular file (`None` when it is). Symbolic links
    /// are followed by what gave the type ([`std::fs::metadata`], `fstat`).
    pub fn of(file_type: FileType) -> Option<FileKind> {
        if file_type.is_file() {
            None
        } else if file_type.is_dir() {
            Some(FileKind::Directory)
        } else if file_type.is_fifo() {
            Some(FileKind::Fifo)
        } else if file_type.is_socket() {
            Some(FileKind::Socket)
        } else if file_type.is_char_device() {
            Some(FileKind::CharacterDevice)
        } else {
            Some(FileKind::BlockDevice)
        }
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Directory => "a directory",
            FileKind::Fifo => "a FIFO",
            FileKind::Socket => "a socket",
            FileKind::CharacterDevice => "a character device",
            FileKind::BlockDevice => "a block device",
        })
    }
}

/// A path that names something else than a regular file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{}' is {kind}, not a regular file", path.display())]
pub struct NotRegular {
    /// The path.
    pub path: PathBuf,
    /// What it names.
    pub kind: FileKind,
}

/// What `path` names, when it exists and is not a regular file (following links, opening
/// nothing); `None` for a regular file, or for nothing there or nothing that can be looked at
/// (whoever reads it says why).
pub fn not_regular(path: &Path) -> Option<NotRegular> {
    let metadata = std::fs::metadata(path).ok()?;
    kind_of(path, &metadata)
}

fn kind_of(path: &Path, metadata: &Metadata) -> Option<NotRegular> {
    FileKind::of(metadata.file_type()).map(|kind| NotRegular {
        path: path.to_owned(),
        kind,
    })
}

/// Why a file could not be opened for reading.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The open, or the look at what was opened, failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// It is not a regular file.
    #[error(transparent)]
    NotRegular(#[from] NotRegular),
}

/// Open `path` for reading, only when it names a regular file: opened without blocking (a
/// FIFO would otherwise block the open until a writer comes) and without making a terminal
/// ours, then checked on the descriptor. Reading a regular file never waits on anyone.
pub fn open_regular(path: &Path) -> Result<File, OpenError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits())
        .open(path)?;
    let metadata = file.metadata()?;
    match kind_of(path, &metadata) {
        Some(not) => Err(OpenError::NotRegular(not)),
        None => Ok(file),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_is_opened_and_nothing_blocks() {
        let dir = std::env::temp_dir().join(format!("kres-regular-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
        let regular = dir.join("regular");
        std::fs::write(&regular, "text").expect("file");
        let link = dir.join("link-to-fifo");
        std::os::unix::fs::symlink(&fifo, &link).expect("link");
        let rows: &[(&Path, Option<FileKind>)] = &[
            (&regular, None),
            // With no writer, a blocking open of the FIFO would never return.
            (&fifo, Some(FileKind::Fifo)),
            (&link, Some(FileKind::Fifo)),
            (&dir, Some(FileKind::Directory)),
            (Path::new("/dev/zero"), Some(FileKind::CharacterDevice)),
        ];
        for (path, kind) in rows {
            assert_eq!(
                not_regular(path).map(|n| n.kind),
                *kind,
                "{}",
                path.display()
            );
            match (open_regular(path), kind) {
                (Ok(_), None) => {}
                (Err(OpenError::NotRegular(not)), Some(kind)) => {
                    assert_eq!(not.kind, *kind);
                    assert_eq!(
                        not.to_string(),
                        format!("'{}' is {kind}, not a regular file", path.display())
                    );
                }
                (other, _) => panic!("{}: {other:?}", path.display()),
            }
        }
        assert_eq!(
            NotRegular {
                path: fifo.clone(),
                kind: FileKind::Fifo
            }
            .to_string(),
            format!("'{}' is a FIFO, not a regular file", fifo.display())
        );
        assert!(not_regular(&dir.join("missing")).is_none());
        assert!(matches!(
            open_regular(&dir.join("missing")),
            Err(OpenError::Io(e)) if e.kind() == io::ErrorKind::NotFound
        ));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
