//! Sections both Lua files share: logging, forwarding, opening the cache, defer and the custom
//! Lua section.

use std::path::Path;

use super::{boolean, line, quote, quote_display, quote_path, string_table};
use crate::config::{
    DeferSchema, ForwardOptionsSchema, ForwardServer, ForwardTransport, KresConfig,
};

/// Groups that name our own processes, not kresd log groups (upstream filters the same list).
const NON_KRESD_GROUPS: &[&str] = crate::config::NON_KRESD_LOG_GROUPS;

/// `log_level`, `log_target`, `log_groups`. The level is `debug` when `debug_group` (the
/// process's own group: `kresd` or `policy-loader`) is listed in `logging.groups`.
pub(super) fn logging(out: &mut String, cfg: &KresConfig, debug_group: &str) {
    let logging = &cfg.logging;
    line!(out, "-- logging.level");
    line!(
        out,
        "log_level({})",
        quote(effective_level(cfg, debug_group))
    );
    line!(out, "-- logging.target");
    line!(out, "log_target({})", quote(logging.target.as_str()));
    if logging.groups.as_deref().is_some_and(|g| !g.is_empty()) {
        line!(out, "-- logging.groups");
        line!(out, "log_groups({})", kresd_groups(cfg));
    }
}

/// The level a process whose own group is `debug_group` logs at.
fn effective_level(cfg: &KresConfig, debug_group: &str) -> &'static str {
    let groups = cfg.logging.groups.as_deref().unwrap_or_default();
    if groups.iter().any(|g| g == debug_group) {
        "debug"
    } else {
        cfg.logging.level.as_str()
    }
}

/// The table of `logging.groups` that are kresd's own.
fn kresd_groups(cfg: &KresConfig) -> String {
    let groups = cfg.logging.groups.as_deref().unwrap_or_default();
    string_table(
        groups
            .iter()
            .filter(|g| !NON_KRESD_GROUPS.contains(&g.as_str())),
    )
}

/// The logging of a running worker set to what [`logging`] renders for `cfg`, as one control
/// command (an expression: the control socket evaluates `return (expr)`). The groups are
/// always given, so groups no longer listed are cleared (`log_groups` replaces the set). It
/// evaluates to the level the worker then logs at, which is the second value.
pub fn live_logging(cfg: &KresConfig) -> (String, &'static str) {
    let level = effective_level(cfg, "kresd");
    let expr = format!(
        "(function() log_level({}) log_target({}) log_groups({}) return log_level() end)()",
        quote(level),
        quote(cfg.logging.target.as_str()),
        kresd_groups(cfg),
    );
    (expr, level)
}

/// The forward options table.
fn forward_options(o: &ForwardOptionsSchema) -> String {
    format!(
        "{{dnssec={},auth={}}}",
        boolean(o.dnssec),
        boolean(o.authoritative)
    )
}

/// The targets table: one entry per address, `{'addr', tls=…, hostname=…, pin_sha256=…, ca_file=…}`.
fn forward_servers(servers: &[ForwardServer]) -> String {
    let mut out = String::from("{");
    for server in servers {
        match server {
            ForwardServer::Address(addr) => {
                out.push('{');
                out.push_str(&quote_display(addr));
                out.push_str("},");
            }
            ForwardServer::Server(s) => {
                for addr in &s.address {
                    out.push('{');
                    out.push_str(&quote_display(addr));
                    out.push_str(",tls=");
                    out.push_str(boolean(s.transport == Some(ForwardTransport::Tls)));
                    if let Some(h) = &s.hostname {
                        out.push_str(",hostname=");
                        out.push_str(&quote(h.punycode()));
                    }
                    if let Some(pins) = s.pin_sha256.as_deref().filter(|p| !p.is_empty()) {
                        out.push_str(",pin_sha256=");
                        out.push_str(&string_table(pins.iter().map(|p| p.as_str())));
                    }
                    if let Some(ca) = &s.ca_file {
                        out.push_str(",ca_file=");
                        out.push_str(&quote_path(ca));
                    }
                    out.push_str("},");
                }
            }
        }
    }
    out.push('}');
    out
}

/// `policy.rule_forward_add` per subtree, then the fallback module.
pub(super) fn forward(out: &mut String, cfg: &KresConfig) {
    for fwd in cfg.forward.iter().flatten() {
        let servers = forward_servers(&fwd.servers);
        let options = forward_options(&fwd.options);
        for subtree in &fwd.subtree {
            line!(
                out,
                "policy.rule_forward_add({},{options},{servers})",
                quote(subtree.punycode())
            );
        }
    }
    if cfg.fallback.enable {
        line!(out, "modules.load('fallback')");
        line!(out, "fallback.config({{");
        line!(
            out,
            "  targets = {},",
            forward_servers(cfg.fallback.servers.as_deref().unwrap_or_default())
        );
        line!(out, "  options = {{}},");
        line!(out, "}})");
    }
}

/// `cache.open(size, 'lmdb://<storage>')`.
pub(super) fn cache_open(out: &mut String, cfg: &KresConfig) {
    let mut uri = b"lmdb://".to_vec();
    {
        use std::os::unix::ffi::OsStrExt as _;
        uri.extend_from_slice(cfg.cache.storage.as_os_str().as_bytes());
    }
    line!(
        out,
        "cache.open({}, {})",
        cfg.cache.size_max.bytes(),
        super::quote_bytes(&uri)
    );
}

/// Whether defer may run in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Defer {
    /// A worker: as configured.
    AsConfigured,
    /// The policy-loader: never (it would otherwise get kresd's default defer set-up).
    ForceDisabled,
}

/// `C.defer_init(...)`: the shared defer state in the rundir, or disabled.
pub(super) fn defer(out: &mut String, cfg: &KresConfig, mode: Defer) {
    let DeferSchema { enable, log_period } = &cfg.defer;
    if *enable && mode == Defer::AsConfigured {
        let mut path = cfg.rundir.clone().into_os_string();
        path.push("/defer");
        line!(
            out,
            "assert(C.defer_init({}, {}, {}) == 0)",
            quote_path(Path::new(&path)),
            log_period.millis(),
            cfg.workers
        );
    } else {
        line!(out, "assert(C.defer_init(nil, 0, 0) == 0)");
    }
}

/// The largest Lua script file pasted into the generated Lua.
pub const MAX_SCRIPT_FILE: u64 = 10 << 20;

/// Whether the file's owner, group and mode let `user` read it (supplementary groups and ACLs
/// are not consulted: a file readable only through them is refused, never wrongly allowed).
fn readable_by(meta: &std::fs::Metadata, user: supervisor::Credentials) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mode = meta.mode();
    user.uid == 0
        || (meta.uid() == user.uid && mode & 0o400 != 0)
        || (meta.gid() == user.gid && mode & 0o040 != 0)
        || mode & 0o004 != 0
}

/// A script file's text: a regular file of at most [`MAX_SCRIPT_FILE`] bytes, readable by
/// `read_as` when given (see [`super::RenderContext::read_as`]).
fn read_script(path: &Path, read_as: Option<supervisor::Credentials>) -> std::io::Result<String> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > MAX_SCRIPT_FILE {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_SCRIPT_FILE} bytes"
        )));
    }
    if let Some(user) = read_as {
        if !readable_by(&meta, user) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("not readable by the workers' user (uid {})", user.uid),
            ));
        }
    }
    let mut text = String::new();
    file.take(MAX_SCRIPT_FILE).read_to_string(&mut text)?;
    Ok(text)
}

/// The custom Lua section: the file's content first, then the inline script, both verbatim.
/// The file is read now, so every process started from this rendering runs the same code; if it
/// cannot be read (or is not UTF-8), the generated Lua raises an error naming it, and kresd
/// fails to start instead of running without it.
pub(super) fn custom_lua(
    out: &mut String,
    script: Option<&str>,
    script_file: Option<&Path>,
    read_as: Option<supervisor::Credentials>,
) {
    line!(out, "-- LUA section --------------------------------------");
    line!(out, "-- Custom Lua code cannot be validated");
    if let Some(file) = script_file {
        match read_script(file, read_as) {
            Ok(text) => {
                out.push_str(&text);
                line!(out);
            }
            Err(e) => line!(
                out,
                "error({})",
                quote(&format!(
                    "cannot read the Lua script file {}: {e}",
                    file.display()
                ))
            ),
        }
    }
    if let Some(script) = script {
        out.push_str(script);
        line!(out);
    }
}
