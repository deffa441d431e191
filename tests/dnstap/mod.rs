//! The operator's own dnstap collector, as the tests play it: `logging.dnstap` goes from
//! kresd straight to the operator's socket (the query log reads our own records instead), and
//! `tests/query_log.rs` checks that the stream arrives whole while our log is on. Test code
//! only: the daemon reads no dnstap.

pub mod frames;
pub mod message;
