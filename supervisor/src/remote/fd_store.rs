//! Descriptors kept for the directing child across its incarnations (like systemd's
//! `FDSTORE=1`), by name.

use super::{MAX_NAME, MAX_STORED};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;

/// Why the fd store refused a descriptor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreRefused {
    /// The name is empty or longer than [`MAX_NAME`] bytes.
    #[error("stored name of {0} bytes")]
    NameLength(usize),
    /// [`MAX_STORED`] names are kept already.
    #[error("the fd store is full ({MAX_STORED} entries)")]
    Full,
}

/// Descriptors kept for the directing child across its incarnations.
#[derive(Default)]
pub struct FdStore {
    pub(super) entries: BTreeMap<String, OwnedFd>,
}

impl FdStore {
    /// Keep `fd` under `name`; refused beyond [`MAX_STORED`] entries or [`MAX_NAME`] bytes.
    pub fn put(&mut self, name: String, fd: OwnedFd) -> Result<(), StoreRefused> {
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(StoreRefused::NameLength(name.len()));
        }
        if self.entries.len() >= MAX_STORED && !self.entries.contains_key(&name) {
            return Err(StoreRefused::Full);
        }
        self.entries.insert(name, fd);
        Ok(())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    pub fn forget(&mut self, name: &str) {
        self.entries.remove(name);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every entry, by name (for the next image of the process that holds the store).
    pub fn into_entries(self) -> Vec<(String, OwnedFd)> {
        self.entries.into_iter().collect()
    }

    /// A store holding `entries` (from an earlier image of this process), unchecked.
    pub fn from_entries(entries: impl IntoIterator<Item = (String, OwnedFd)>) -> FdStore {
        FdStore {
            entries: entries.into_iter().collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
