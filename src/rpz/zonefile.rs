//! The zone file a secondary keeps: one record per line in presentation format, absolute
//! names, SOA first, no `$ORIGIN` — the form kresd's RPZ loader reads.

use std::path::Path;

use super::SoaTimers;

/// The SOA of a stored zone file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StoredSoa {
    /// The zone's serial.
    pub serial: u32,
    /// The zone's timers.
    pub timers: SoaTimers,
}

/// The SOA that starts `file`, if it is there and readable.
pub(crate) fn stored_soa(_file: &Path) -> Option<StoredSoa> {
    None
}
