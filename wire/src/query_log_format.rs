//! The datagrams the workers' query-log layer (`kres_lua::query_log`) sends the manager's
//! reader (`knot_resolver::query_log::records`): the constants both sides are built from.

/// The socket in the rundir the workers send their batches of records to.
pub const SOCKET_FILE: &str = "query-log.sock";

/// The first four bytes of a batch: `KQL1` read as a little-endian number (the version of
/// this format).
pub const MAGIC: u32 = u32::from_le_bytes(*b"KQL1");

/// The bytes of a batch's header: magic, worker, records (`u32` each), 4 of padding, the
/// worker's dropped records so far (`u64`).
pub const BATCH_HEADER: usize = 24;

/// The bytes of a record's fixed part: start (`u64`, microseconds since the epoch, 0 when
/// unknown), latency (`u32`, microseconds, `u32::MAX` when unknown), port, qtype, rcode
/// (extended), answers (`u16` each), EDE (`i32`, negative: none), the client's address (16,
/// an IPv4 one in the first 4), family (4 or 6), transport (dnstap's numbers: 1 UDP, 2 TCP,
/// 3 DoT, 4 DoH, 7 DoQ), cached (0 or 1), the name's length, 4 of padding.
pub const RECORD_HEADER: usize = 48;

/// The largest datagram a worker sends (and the reader reads): 16 KiB.
pub const MAX_DATAGRAM: usize = 16 * 1024;

/// The global function of the workers' layer (`lua::query_log`) that tells the records the
/// worker dropped so far (absent where the log is off): part of the layer's contract with
/// this reader, beside the record format.
pub const DROPPED_FUNCTION: &str = "query_log_dropped";
