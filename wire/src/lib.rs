//! Boundary types: what the processes of the resolver and its clients exchange, with no
//! behaviour of their own (serde and the OpenAPI schema only, small constructors and
//! `Display`): the API's bodies, the query log's datagram format, the environment variables
//! a process is started with and the programs they name, the version. Both sides depend on
//! this crate (the daemon `knot_resolver` and `kresctl`); it depends only on the
//! configuration model and the supervisor's snapshot types.

pub mod change;
pub mod environment;
pub mod events;
pub mod failures;
pub mod fleet;
pub mod processes;
pub mod programs;
pub mod query_log;
pub mod query_log_format;
pub mod rpz;
pub mod trace;
pub mod upgrade;
pub mod upstreams;
pub mod version;

/// The management API's OpenAPI document, as the server describes itself (`GET /openapi`
/// serves the same text; a test of the daemon's holds the two together, and
/// `KRES_BLESS=1 cargo test -p kres-daemon --lib openapi` writes it anew after a change of the API).
pub const OPENAPI_DOCUMENT: &str = include_str!("../openapi.json");

/// An error as a line of the log or of an API answer: its text, then each cause's after `: `,
/// unless the text already ends with it (hyper and rustls repeat their cause).
pub fn error_line(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

/// A record read back as JSON text: `None` when it is longer than `max` bytes or does not
/// parse (records come from a file descriptor another process filled).
fn parse_bounded<T: serde::de::DeserializeOwned>(bytes: &[u8], max: usize) -> Option<T> {
    if bytes.len() > max {
        return None;
    }
    serde_json::from_slice(bytes).ok()
}

/// `n` random bytes from the kernel, as lowercase hex.
pub fn random_hex(n: usize) -> std::io::Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with a text of its own and, maybe, a cause.
    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn an_error_line_tells_each_cause_once() {
        let refused = Layer("connection refused", None);
        let io = Layer("cannot connect", Some(Box::new(refused)));
        assert_eq!(
            error_line(&Layer("fetching the list", Some(Box::new(io)))),
            "fetching the list: cannot connect: connection refused"
        );
        // hyper's way: the cause repeated at the end of the text is not told again.
        let alert = Layer("received fatal alert", None);
        let repeated = Layer(
            "connection error: received fatal alert",
            Some(Box::new(alert)),
        );
        assert_eq!(
            error_line(&repeated),
            "connection error: received fatal alert"
        );
    }
}
