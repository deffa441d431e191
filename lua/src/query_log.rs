//! The query log's recorder in every worker (`monitoring.query-log` on): one compact binary
//! record per answer to a client (`query_log::records` reads them), made in the answer
//! counters' layer at `finish` (`lua::counts`, loaded with the log, hands it the rcode and
//! cache use it has read: one Lua layer for both, one call from C into Lua per answer), written
//! into a preallocated buffer and sent as one datagram to `<rundir>/query-log.sock` when the
//! buffer is full or at the next tick of a [`FLUSH_MS`] timer: no string is built, no table
//! made per answer, one `send` per batch. Everything the record holds is read from kresd's
//! structures as `lua::counts` reads them (the client from `qsource`, the name in wire form
//! from the query, the rcode and answer count from the answer's header and OPT record, the
//! cache use from the request's last query, the start from its first).
//!
//! kresd never waits for the log: the socket is non-blocking, and a batch that does not fit
//! (a slow or stopped reader) or finds no reader (a manager process being replaced) is
//! dropped, its records counted in [`DROPPED_FUNCTION`]'s count (read with the answer
//! counters, `lua::counts`, and told in every batch), and the socket connected again at the
//! next batch. Nothing is queued beyond the one buffer.

use std::path::Path;

use super::{line, quote_path};
pub use kres_wire::query_log_format::DROPPED_FUNCTION;
use kres_wire::query_log_format::{BATCH_HEADER, MAGIC, MAX_DATAGRAM, RECORD_HEADER};

/// The global function that loads the layer (once; later calls do nothing).
pub const LOAD_FUNCTION: &str = "load_query_log";

/// Milliseconds between two sends of a batch not yet full: an answer reaches the manager
/// within this (and `kresctl querylog --follow` within twice this).
pub const FLUSH_MS: u32 = 50;

/// The longest socket path a `sockaddr_un` holds, without its terminating zero.
pub const MAX_PATH: usize = 107;

/// The layer, `@NAME@` standing for what [`query_log`] fills in. `struct
/// kres_query_log_batch` and `struct kres_query_log_record` are laid out as the manager reads
/// them (`records`; checked by size at load). The C functions are declared each in its own
/// `pcall` (another module may have declared them already); `send` never blocks
/// (`MSG_DONTWAIT`). A record is written only when the largest one fits after it (a name is
/// at most 255 bytes); the buffer is sent first otherwise.
const TEMPLATE: &str = include_str!("query_log.lua");

/// The layer sending to `socket`, loaded at once; nothing but a comment when the path does
/// not fit a `sockaddr_un` (the manager could not bind it either).
pub fn query_log(out: &mut String, socket: &Path) {
    if socket.as_os_str().len() > MAX_PATH {
        line!(
            out,
            "-- monitoring.query-log: unavailable, the socket's path is longer than {MAX_PATH} bytes"
        );
        return;
    }
    let fills = [
        ("@LOAD@", LOAD_FUNCTION.to_owned()),
        ("@DROPPED@", DROPPED_FUNCTION.to_owned()),
        ("@ATTACH@", super::counts::ATTACH_FUNCTION.to_owned()),
        ("@BATCH_HEADER@", BATCH_HEADER.to_string()),
        ("@RECORD_HEADER@", RECORD_HEADER.to_string()),
        ("@MAX_DATAGRAM@", MAX_DATAGRAM.to_string()),
        ("@MAGIC@", MAGIC.to_string()),
        ("@FLUSH_MS@", FLUSH_MS.to_string()),
        ("@PATH@", quote_path(socket)),
        ("@AF_UNIX@", nix::libc::AF_UNIX.to_string()),
        (
            "@SOCK_DGRAM@",
            (nix::libc::SOCK_DGRAM | nix::libc::SOCK_NONBLOCK | nix::libc::SOCK_CLOEXEC)
                .to_string(),
        ),
        ("@MSG_DONTWAIT@", nix::libc::MSG_DONTWAIT.to_string()),
    ];
    let mut text = TEMPLATE.to_owned();
    for (placeholder, value) in fills {
        text = text.replace(placeholder, &value);
    }
    out.push_str(&text);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled_and_a_long_path_leaves_the_layer_out() {
        let mut out = String::new();
        query_log(&mut out, Path::new("/run/kr/it's.sock"));
        assert!(!out.contains('@'), "{out}");
        assert!(
            out.contains(r"ffi.copy(sun.path, '/run/kr/it\'s.sock')"),
            "{out}"
        );
        assert!(out.contains("event.recurrent(50, flush)"), "{out}");
        assert!(out.contains("header.magic = 827085131"), "{out}");
        let long = format!("/{}/query-log.sock", "d".repeat(100));
        let mut out = String::new();
        query_log(&mut out, Path::new(&long));
        assert!(!out.contains("socket("), "{out}");
    }
}
