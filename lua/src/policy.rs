//! The Lua configuration of the one-shot policy-loader (upstream's `policy-loader.lua.j2`): it
//! rebuilds the rules DB (views, local data, forwarding) and quits.

use super::sections::{self, Defer};
use super::{
    boolean, line, push_quoted, quote, quote_display, quote_path, string_table, RenderContext,
};
use kres_config::types::{IdPattern, TimeUnit};
use kres_config::{
    ActionOverride, AddressPairs, KresConfig, RpzLog, RpzSchema, RuleSchema, SubtreeKind,
    ViewAnswer, ViewProtocol, ViewSchema,
};

/// The Lua configuration of the policy-loader. kresd runs it with `-c -`, so the rules DB is
/// opened for overwrite and rebuilt from scratch; `quit()` ends the process with status 0.
pub fn render_policy_loader(cfg: &KresConfig) -> String {
    render_policy_loader_with(cfg, &RenderContext::STANDALONE)
}

/// [`render_policy_loader`] for the process `ctx` describes (its socket binding does not
/// matter: the policy-loader listens nowhere).
pub fn render_policy_loader_with(cfg: &KresConfig, ctx: &RenderContext) -> String {
    let mut out = sections::generated_header();
    // Room for the local data made up front: 100,000 addresses are ~10 MB of statements,
    // which growing by doubling would copy several times over.
    out.reserve(local_data_size(cfg));
    if !cfg.lua.policy_script_only {
        sections::ffi(&mut out);
        sections::logging(&mut out, cfg, "policy-loader");
        line!(&mut out, "-- Config required for the cache opening");
        sections::cache_open(&mut out, cfg);
        line!(&mut out);
        line!(
            &mut out,
            "-- VIEWS section ------------------------------------"
        );
        views(&mut out, cfg);
        line!(&mut out);
        line!(
            &mut out,
            "-- LOCAL-DATA section -------------------------------"
        );
        local_data(&mut out, cfg);
        line!(&mut out);
        line!(
            &mut out,
            "-- FORWARD section ----------------------------------"
        );
        sections::forward(&mut out, cfg);
        line!(&mut out);
        line!(
            &mut out,
            "-- DEFER section ------------------------------------"
        );
        line!(
            &mut out,
            "-- Force-disable defer to avoid the default defer config."
        );
        sections::defer(&mut out, cfg, Defer::ForceDisabled);
    }
    line!(&mut out);
    sections::custom_lua(
        &mut out,
        cfg.lua.policy_script.as_deref(),
        cfg.lua.policy_script_file.as_deref(),
        ctx.read_as,
    );
    line!(&mut out);
    line!(&mut out, "-- exit policy-loader properly");
    line!(&mut out, "quit()");
    out
}

fn proto_name(p: ViewProtocol) -> &'static str {
    match p {
        ViewProtocol::Udp53 => "UDP53",
        ViewProtocol::Tcp53 => "TCP53",
        ViewProtocol::Dot => "DOT",
        ViewProtocol::Doh => "DOH",
        ViewProtocol::Doq => "DOQ",
    }
}

/// The items of `policy.COMBINE({...})` for one view: flags, price factor, then tags or the
/// answer. Each item is Lua source evaluated by kresd when the view matches.
fn view_actions(view: &ViewSchema) -> Vec<String> {
    let mut actions = Vec::new();
    let o = &view.options;
    let flags: Vec<&str> = [
        (!o.minimize, "NO_MINIMIZE"),
        (!o.dns64, "DNS64_DISABLE"),
        (!o.fallback, "FALLBACK_DISABLE"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if !flags.is_empty() {
        let list: String = flags.iter().map(|f| format!("\"{f}\",")).collect();
        actions.push(quote(&format!("policy.FLAGS({{{list}}})")));
    }
    if o.price_factor != 1.0 {
        // Jinja's `round` is Python's: halves go to the even neighbour.
        let scaled = (o.price_factor * 65536.0).round_ties_even();
        actions.push(quote(&format!("policy.PRICE_FACTOR16({scaled:.0})")));
    }
    match (view.tags.as_deref().filter(|t| !t.is_empty()), view.answer) {
        (Some(tags), _) => actions.push(format!(
            "policy.TAGS_ASSIGN({})",
            string_table(tags.iter().map(IdPattern::as_str))
        )),
        (None, Some(ViewAnswer::Allow)) => actions.push("policy.TAGS_ASSIGN({})".into()),
        (None, Some(ViewAnswer::Refused)) => actions.push(quote("policy.REFUSE")),
        (None, Some(ViewAnswer::Noanswer)) => actions.push(quote("policy.NO_ANSWER")),
        (None, None) => {}
    }
    actions
}

fn views(out: &mut String, cfg: &KresConfig) {
    for view in cfg.views.iter().flatten() {
        let dst = view
            .dst_subnet
            .map_or_else(String::new, |net| net.to_string());
        let mut protoset = String::from("0");
        for p in view.protocols.iter().flatten() {
            protoset.push_str(&format!(" + 2^C.KR_PROTO_{}", proto_name(*p)));
        }
        let combine: String = view_actions(view)
            .into_iter()
            .map(|a| format!("{a},"))
            .collect();
        for subnet in &view.subnets {
            line!(
                out,
                "assert(C.kr_view_insert_action({}, {}, {protoset}, policy.COMBINE({{{combine}}})) == 0)",
                quote_display(subnet),
                quote(&dst)
            );
        }
    }
}

/// A TTL in seconds, or kresd's default.
fn ttl(t: Option<&TimeUnit>) -> String {
    t.map_or_else(
        || "C.KR_RULE_TTL_DEFAULT".to_owned(),
        |t| t.seconds().to_string(),
    )
}

/// `policy.get_tagset({...})`, or 0 for no tags.
fn tagset(tags: Option<&[IdPattern]>) -> String {
    match tags.filter(|t| !t.is_empty()) {
        Some(tags) => format!(
            "policy.get_tagset({})",
            string_table(tags.iter().map(IdPattern::as_str))
        ),
        None => "0".to_owned(),
    }
}

/// The common values of one local-data rule.
struct RuleValues<'a> {
    nodata: bool,
    ttl: Option<&'a TimeUnit>,
    tags: Option<&'a [IdPattern]>,
}

/// A run of `kr_rule_local_address` statements sharing their rule values: the arguments after
/// the name and the address are rendered once, not once an address. With the addresses
/// written by `push_ipv4`, this brought the policy-loader's Lua for 100,000 addresses and
/// 100,000 records (17 MB) from ~40 ms to ~15–20 ms (both together, measured when they were
/// made).
struct LocalAddresses {
    tail: String,
    addr: String,
}

impl LocalAddresses {
    fn new(v: &RuleValues<'_>) -> Self {
        LocalAddresses {
            tail: format!(
                ", {}, {}, {}, C.KR_RULE_OPTS_DEFAULT) == 0)\n",
                boolean(v.nodata),
                ttl(v.ttl),
                tagset(v.tags)
            ),
            addr: String::new(),
        }
    }

    fn push(&mut self, out: &mut String, name: &str, addr: std::net::IpAddr) {
        use std::fmt::Write as _;
        self.addr.clear();
        match addr {
            std::net::IpAddr::V4(a) => kres_config::types::push_ipv4(&mut self.addr, a),
            std::net::IpAddr::V6(a) => {
                let _ = write!(self.addr, "{a}");
            }
        }
        out.push_str("assert(C.kr_rule_local_address(");
        push_quoted(out, name.as_bytes());
        out.push_str(", ");
        push_quoted(out, self.addr.as_bytes());
        out.push_str(&self.tail);
    }
}

fn local_hosts(out: &mut String, file: &std::path::Path, v: &RuleValues<'_>) {
    line!(
        out,
        "assert(C.kr_rule_local_hosts({}, {}, {}, {}, C.KR_RULE_OPTS_DEFAULT) == 0)",
        quote_path(file),
        boolean(v.nodata),
        ttl(v.ttl),
        tagset(v.tags)
    );
}

fn local_subtree(out: &mut String, name: &str, kind: SubtreeKind, v: &RuleValues<'_>) {
    let kind = match kind {
        SubtreeKind::Empty => "EMPTY",
        SubtreeKind::Nxdomain => "NXDOMAIN",
        SubtreeKind::Redirect => "REDIRECT",
    };
    line!(
        out,
        "assert(C.kr_rule_local_subtree(todname({}), C.KR_RULE_SUB_{kind}, {}, {}, C.KR_RULE_OPTS_DEFAULT) == 0)",
        quote(name),
        ttl(v.ttl),
        tagset(v.tags)
    );
}

/// What a zone-file rule reads.
enum ZoneSource<'a> {
    /// Zone-file text (`records`), quoted as a Lua string.
    Text(&'a str),
    /// An RPZ file, with its logging options.
    Rpz(&'a RpzSchema),
}

/// How a zone-file rule is scored: `local-data.records` keeps kresd's default options, rules
/// and RPZ get score 9 (upstream's `extra is not none`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Score {
    Default,
    Rule,
}

/// What a failed load of a zone file does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// The policy-loader fails (and so the change): local data, rules, operators' RPZ files.
    Fatal,
    /// The zone is left out and reported in `broken` (an RPZ zone kept by zone transfer).
    Reported,
}

fn zonefile(
    out: &mut String,
    source: ZoneSource<'_>,
    v: &RuleValues<'_>,
    score: Score,
    failure: Failure,
) {
    line!(out, "rrs = ffi.new('struct kr_rule_zonefile_config')");
    line!(out, "rrs.ttl = {}", ttl(v.ttl));
    line!(out, "rrs.tags = {}", tagset(v.tags));
    line!(out, "rrs.nodata = {}", boolean(v.nodata));
    match source {
        ZoneSource::Text(quoted) => {
            line!(out, "rrs.is_rpz = false");
            out.push_str("rrs.input_str = ");
            out.push_str(quoted);
            out.push('\n');
        }
        ZoneSource::Rpz(rpz) => {
            line!(out, "rrs.is_rpz = true");
            line!(out, "rrs.filename = {}", quote_path(&rpz.file));
        }
    }
    line!(out, "rrs.opts = C.KR_RULE_OPTS_DEFAULT");
    if score == Score::Rule {
        line!(out, "rrs.opts.score = 9");
    }
    if let ZoneSource::Rpz(RpzSchema { log: Some(log), .. }) = source {
        line!(out, "rrs.opts.log_level = 3  -- notice");
        if log.contains(&RpzLog::Ip) {
            line!(out, "rrs.opts.log_ip = true");
        }
        if log.contains(&RpzLog::Name) {
            line!(out, "rrs.opts.log_name = true");
        }
    }
    match failure {
        Failure::Fatal => line!(out, "assert(C.kr_rule_zonefile(rrs) == 0)"),
        Failure::Reported => {
            line!(out, "local loaded = C.kr_rule_zonefile(rrs)");
            line!(out, "if loaded ~= 0 then broken = 'kresd could not load it (error ' .. loaded .. ')' end");
        }
    }
}

/// One `local-data.rules` item; `defaults` are the section's `nodata` and `ttl`.
fn rule(out: &mut String, item: &RuleSchema, defaults: &RuleValues<'_>) {
    let v = RuleValues {
        nodata: item.nodata.unwrap_or(defaults.nodata),
        ttl: item.ttl.as_ref().or(defaults.ttl),
        tags: item.tags.as_deref(),
    };
    if let Some(names) = item.name.as_deref().filter(|n| !n.is_empty()) {
        let mut addresses = LocalAddresses::new(&v);
        for name in names {
            for addr in item.address.iter().flatten() {
                addresses.push(out, name.punycode(), *addr);
            }
            if let Some(kind) = item.subtree {
                local_subtree(out, name.punycode(), kind, &v);
            }
        }
    } else if let Some(files) = item.file.as_deref().filter(|f| !f.is_empty()) {
        for file in files {
            local_hosts(out, file, &v);
        }
    } else if let Some(records) = &item.records {
        zonefile(
            out,
            ZoneSource::Text(&quote(records.as_str())),
            &v,
            Score::Rule,
            Failure::Fatal,
        );
    }
}

/// Statements per function in long runs of rules: LuaJIT allows a function at most 65,536
/// constants (each rule takes a few), so 100,000 addresses in one chunk fail to load ("main
/// function has more than 65536 constants"). Each run of this many is its own function.
const STATEMENTS_PER_FUNCTION: usize = 4096;

/// Splits a long run of statements into immediately called functions.
#[derive(Default)]
struct Chunk {
    /// Statements in the function now open.
    count: usize,
    open: bool,
}

impl Chunk {
    /// Before a statement: open a function, or close a full one and open the next.
    fn statement(&mut self, out: &mut String) {
        if self.open && self.count == STATEMENTS_PER_FUNCTION {
            line!(out, "end)() end");
            self.open = false;
        }
        // Inside `do … end`: a line starting with `(` right after a call would otherwise
        // call that call's result.
        if !self.open {
            line!(out, "do (function()");
            self.open = true;
            self.count = 0;
        }
        self.count += 1;
    }

    /// After the run: close the open function.
    fn end(self, out: &mut String) {
        if self.open {
            line!(out, "end)() end");
        }
    }
}

/// About how many bytes [`local_data`] writes (a hint: more or less is fine).
fn local_data_size(cfg: &KresConfig) -> usize {
    let ld = &cfg.local_data;
    let addresses = ld.addresses.as_ref().map_or(0, AddressPairs::address_count);
    let records = ld.records.as_deref().map_or(0, str::len);
    addresses * 112 + records + records / 4 + ld.rules.as_ref().map_or(0, Vec::len) * 160
}

/// The local-data section: addresses, address files, the zone text, rules and RPZ.
fn local_data(out: &mut String, cfg: &KresConfig) {
    let ld = &cfg.local_data;
    let defaults = RuleValues {
        nodata: ld.nodata,
        ttl: ld.ttl.as_ref(),
        tags: None,
    };
    line!(out, "modules = {{ 'hints > iterate' }}");
    let mut chunk = Chunk::default();
    let mut addresses = LocalAddresses::new(&defaults);
    for (name, addrs) in ld.addresses.iter().flat_map(AddressPairs::iter) {
        for addr in addrs {
            chunk.statement(out);
            addresses.push(out, name, *addr);
        }
    }
    chunk.end(out);
    for file in ld.addresses_files.iter().flatten() {
        local_hosts(out, file, &defaults);
    }
    if let Some(records) = ld.records.as_deref().filter(|r| !r.is_empty()) {
        let quoted = quote(records);
        zonefile(
            out,
            ZoneSource::Text(&quoted),
            &defaults,
            Score::Default,
            Failure::Fatal,
        );
    }
    let mut chunk = Chunk::default();
    for item in ld.rules.iter().flatten() {
        chunk.statement(out);
        rule(out, item, &defaults);
    }
    chunk.end(out);
    let rpz = ld.rpz.as_deref().unwrap_or_default();
    let transferred = rpz.iter().any(kept_by_manager);
    if transferred {
        rpz_checks(out);
    }
    for (index, rpz) in rpz.iter().enumerate() {
        let v = RuleValues {
            tags: rpz.tags.as_deref(),
            ..defaults
        };
        if rpz.action_override == Some(ActionOverride::Passthru) {
            // an allowlist: kresd 6 has no passthru; the manager leaves its names out of
            // the other subscribed lists instead
            continue;
        }
        if kept_by_manager(rpz) {
            transferred_zone(out, index, rpz, &v);
        } else {
            zonefile(out, ZoneSource::Rpz(rpz), &v, Score::Rule, Failure::Fatal);
        }
    }
    if transferred {
        rpz_report(out, &cfg.rundir.join(RPZ_REPORT));
    }
}

/// Whether the manager writes the entry's file (a zone transfer or a subscribed list): a
/// missing file is skipped, and one kresd cannot read is left out and reported.
pub fn kept_by_manager(rpz: &RpzSchema) -> bool {
    rpz.transfer.is_some() || rpz.url.is_some()
}

/// Where the policy-loader lists the RPZ zones kept by zone transfer it could not load, in
/// the rundir: one line each, `INDEX REASON` (the entry's index in `local-data.rpz`, why in
/// one line). Written whole at every run that has such zones (empty when all loaded).
pub const RPZ_REPORT: &str = "policy-loader.rpz-report";

/// The functions the loads of zones kept by zone transfer share: the list of broken ones,
/// and a check that libzscanner (kresd's zone reader) reads a file to its end, and that no
/// SOA record past the first record has another owner (where kresd stops loading a zone it
/// has partly loaded) — so that a broken zone is left out whole, never loaded in part.
fn rpz_checks(out: &mut String) {
    out.push_str(
        "-- RPZ zones kept by zone transfer: one kresd cannot read is left out (the rest of the
-- policy loads) and listed for the manager, which transfers it whole again.
local rpz_broken = {}
local function rpz_unreadable(file)
\tlocal zs = require('zonefile').new()
\tlocal opened, why = zs:open(file)
\tif not opened then return why end
\tlocal apex, seen = nil, false
\twhile true do
\t\tlocal record, fault = zs:parse()
\t\tif fault ~= nil then
\t\t\treturn 'line ' .. tostring(tonumber(zs.line_counter)) .. ': ' .. fault
\t\tend
\t\tif not record then return nil end
\t\tif zs.r_type == 6 then
\t\t\tlocal owner = ffi.string(zs.r_owner, zs.r_owner_length):lower()
\t\t\tif seen and owner ~= (apex or '\\0') then
\t\t\t\treturn 'line ' .. tostring(tonumber(zs.line_counter)) .. ': a SOA record of another owner after the first record'
\t\t\tend
\t\t\tapex = apex or owner
\t\tend
\t\tseen = true
\tend
end
",
    );
}

/// An RPZ zone kept by zone transfer (entry `index` of `local-data.rpz`). A zone that a change
/// has just added has no stored file until its first transfer, which then renews the rules:
/// none from it till then (only a missing file, ENOENT, is skipped). A file kresd cannot read
/// whole is left out and listed in `rpz_broken`; the rest of the policy loads.
fn transferred_zone(out: &mut String, index: usize, rpz: &RpzSchema, v: &RuleValues<'_>) {
    let file = quote_path(&rpz.file);
    line!(out, "do");
    line!(out, "local stored, why, errno = io.open({file}, 'r')");
    line!(out, "if stored then stored:close() end");
    line!(out, "if stored or errno ~= 2 then");
    line!(out, "local broken = why or rpz_unreadable({file})");
    line!(out, "if broken == nil then");
    zonefile(out, ZoneSource::Rpz(rpz), v, Score::Rule, Failure::Reported);
    line!(out, "end");
    line!(
        out,
        "if broken ~= nil then rpz_broken[#rpz_broken + 1] = '{index} ' .. tostring(broken):gsub('%c', ' ') end"
    );
    line!(out, "end");
    line!(out, "end");
}

/// Write the list of broken zones to `path` (the report the manager reads after the run).
fn rpz_report(out: &mut String, path: &std::path::Path) {
    line!(out, "do");
    line!(
        out,
        "local report = assert(io.open({}, 'w'))",
        quote_path(path)
    );
    line!(
        out,
        "for _, line in ipairs(rpz_broken) do assert(report:write(line, '\\n')) end"
    );
    line!(out, "assert(report:close())");
    line!(out, "end");
}
