//! Lua generation: the configuration of each kresd worker and of the policy-loader, rendered
//! from the validated model section by section, in the order of upstream's Jinja templates
//! (`datamodel/templates/kresd.lua.j2` and `policy-loader.lua.j2`).
//!
//! Every string that reaches Lua goes through [`quote`], so no configuration value can break
//! out of its literal; names that kresd parses as domain names are passed in their punycode
//! form. The only text pasted verbatim is custom Lua (`lua.script`, `lua.script-file` and the
//! policy equivalents), which is code by definition.
//!
//! Rendering reads no process-wide state: what it needs besides the configuration (who binds
//! the sockets, whose permissions script files are read with) comes in a [`RenderContext`],
//! given by the manager; `kresctl convert` renders with [`RenderContext::STANDALONE`].
//!
//! Beside upstream's calls the workers' Lua carries exactly two layers of ours (checked by
//! `tests/lua_differential.rs`): `counts`, the answer counting at `finish` (integer arrays as
//! upvalues, no string or table per query; loaded with `stats`) and the upstream tallies at
//! `checkout` and `consume` (at most 512 addresses a worker); and `cache_marks`, with the
//! query log on, one 24-byte record per answer (client, port, message ID, from the cache or
//! not) sent as one non-blocking datagram per 256 answers or 50 ms, dropped when it does not
//! fit.

pub mod cache_clear;
pub mod counts;
mod policy;
pub mod query_log;
mod sections;
pub mod trace;
mod worker;

use std::path::Path;

pub use policy::{kept_by_manager, render_policy_loader, render_policy_loader_with, RPZ_REPORT};
pub use sections::{live_logging, MAX_SCRIPT_FILE};
pub use worker::{render_worker, render_worker_with};

/// What rendering needs to know beyond the configuration: facts of the processes the Lua is
/// for, given by whoever renders it (the manager knows them from its command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderContext {
    /// Who binds the listening sockets kresd accepts as descriptors (the workers' Lua only).
    pub binding: SocketBinding,
    /// Whose permissions script files (`lua.script-file`, `lua.policy-script-file`) are read
    /// with: the workers' user when the children run as another user than the renderer
    /// (`--worker-user`), so that a configuration cannot have the daemon read (and hand to
    /// the workers) a file that user could not read itself; `None`: the renderer's own.
    pub read_as: Option<supervisor_types::Credentials>,
}

impl RenderContext {
    /// A tool's (`kresctl convert`): kresd binds every socket, as upstream; files are read as
    /// the tool runs.
    pub const STANDALONE: RenderContext = RenderContext {
        binding: SocketBinding::Kresd,
        read_as: None,
    };
}

/// Who binds the listening sockets of `network.listen` that kresd accepts as descriptors
/// (see [`kres_config::ListenSchema::daemon_binds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketBinding {
    /// kresd binds every socket itself with `net.listen` (upstream's behaviour; `kresctl
    /// convert`).
    Kresd,
    /// The daemon binds them and passes them with `-S`; the Lua leaves them out.
    Daemon,
}

/// Append one formatted line (writing to a `String` cannot fail).
macro_rules! line {
    ($out:expr) => {
        $out.push('\n')
    };
    ($out:expr, $($arg:tt)*) => {{
        let _ = ::std::fmt::Write::write_fmt($out, format_args!($($arg)*));
        $out.push('\n');
    }};
}
pub(crate) use line;

/// Render `s` as a single-quoted Lua string literal. Printable ASCII passes through except the
/// quote and the backslash; every other byte (newlines, NUL, UTF-8 sequences) becomes a
/// three-digit `\ddd` decimal escape, which Lua decodes byte for byte and which a following
/// digit cannot extend. `]]` needs no care: the literal is not a long string.
pub fn quote(s: &str) -> String {
    quote_bytes(s.as_bytes())
}

/// [`quote`] for arbitrary bytes.
pub fn quote_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    push_quoted(&mut out, bytes);
    out
}

/// [`quote_bytes`] appended to `out`: runs of printable ASCII are copied whole.
pub(crate) fn push_quoted(out: &mut String, bytes: &[u8]) {
    out.push('\'');
    let mut rest = bytes;
    while !rest.is_empty() {
        let plain = rest
            .iter()
            .position(|&b| !(0x20..=0x7e).contains(&b) || b == b'\'' || b == b'\\')
            .unwrap_or(rest.len());
        if let Ok(run) = std::str::from_utf8(&rest[..plain]) {
            out.push_str(run);
        }
        let Some((&b, after)) = rest[plain..].split_first() else {
            break;
        };
        match b {
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            _ => {
                // `\ddd`, written digit by digit (a zone's text has a line feed a line)
                out.push('\\');
                for digit in [b / 100, b / 10 % 10, b % 10] {
                    out.push(char::from(b'0' + digit));
                }
            }
        }
        rest = after;
    }
    out.push('\'');
}

/// [`quote`] for paths: their bytes, exactly (a path need not be UTF-8).
pub fn quote_path(p: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    quote_bytes(p.as_os_str().as_bytes())
}

/// [`quote`] for anything displayed (addresses, networks, names).
fn quote_display(v: impl std::fmt::Display) -> String {
    quote(&v.to_string())
}

/// A Lua boolean.
fn boolean(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

/// A Lua table of quoted strings, upstream's `string_table` shape: `{'a','b',}`.
fn string_table<I, S>(items: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut out = String::from("{");
    for item in items {
        out.push_str(&quote(item.as_ref()));
        out.push(',');
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::{quote, quote_path, string_table};

    #[test]
    fn quote_escapes_everything_that_could_end_the_literal() {
        let cases = [
            ("plain", "'plain'"),
            ("it's", "'it\\'s'"),
            ("back\\slash", "'back\\\\slash'"),
            ("new\nline", "'new\\010line'"),
            ("nul\0", "'nul\\000'"),
            ("nul\u{0}1", "'nul\\0001'"),
            ("]]--", "']]--'"),
            ("é", "'\\195\\169'"),
            ("\"double\"", "'\"double\"'"),
        ];
        for (input, expected) in cases {
            assert_eq!(quote(input), expected, "input {input:?}");
        }
    }

    #[test]
    fn paths_keep_their_bytes() {
        use std::os::unix::ffi::OsStrExt as _;
        let p = std::path::Path::new(std::ffi::OsStr::from_bytes(b"/a/\xff'b"));
        assert_eq!(quote_path(p), "'/a/\\255\\'b'");
    }

    #[test]
    fn string_tables_quote_each_item() {
        assert_eq!(string_table(["a", "b'"]), "{'a','b\\'',}");
        assert_eq!(string_table(Vec::<String>::new()), "{}");
    }
}

#[cfg(test)]
mod render_tests;
