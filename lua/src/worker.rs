//! The Lua configuration of a kresd worker (upstream's `kresd.lua.j2`): preamble, logging,
//! monitoring, options, network, DNSSEC, forwarding, cache, DNS64, rate limiting, defer, then
//! the custom Lua section.

use std::path::Path;

use super::counts;
use super::sections::{self, Defer};
use super::{
    boolean, line, quote, quote_display, quote_path, string_table, RenderContext, SocketBinding,
};
use kres_config::{
    AddressOrNetwork, AddressRenumberingSchema, KresConfig, ListenKind, ListenSchema, MetricsMode,
    RenumberingDestination, TlsPadding, TlsSchema,
};

/// The Lua configuration of one worker. The worker finds its instance number in
/// `$SYSTEMD_INSTANCE` and binds its control socket at `<rundir>/control/<N>`.
///
/// With `lua.script-only` the declarative sections are left out, but unlike upstream the control
/// socket and the statistics functions stay, so the manager can still reach the worker (and
/// loads `stats` and the answer counters at its first collection, whatever the metrics mode).
pub fn render_worker(cfg: &KresConfig) -> String {
    render_worker_with(cfg, &RenderContext::STANDALONE)
}

/// [`render_worker`] for the processes `ctx` describes.
pub fn render_worker_with(cfg: &KresConfig, ctx: &RenderContext) -> String {
    let mut out = sections::generated_header();
    if cfg.lua.script_only {
        control_socket(&mut out, cfg);
        statistics_functions(&mut out);
    } else {
        preamble(&mut out, cfg);
        section(&mut out, "LOGGING");
        sections::logging(&mut out, cfg, "kresd");
        dnstap(&mut out, cfg);
        section(&mut out, "MONITORING");
        control_socket(&mut out, cfg);
        if cfg.monitoring.metrics == MetricsMode::Always {
            line!(&mut out, "modules.load('stats')");
        }
        statistics_functions(&mut out);
        query_log(&mut out, cfg);
        if cfg.monitoring.metrics == MetricsMode::Always {
            counts::load_at_start(&mut out);
        }
        section(&mut out, "OPTIONS");
        options(&mut out, cfg);
        section(&mut out, "NETWORK");
        network(&mut out, cfg, ctx.binding);
        section(&mut out, "DNSSEC");
        dnssec(&mut out, cfg);
        section(&mut out, "FORWARD and FALLBACK");
        sections::forward(&mut out, cfg);
        section(&mut out, "CACHE");
        cache(&mut out, cfg);
        section(&mut out, "DNS64");
        dns64(&mut out, cfg);
        section(&mut out, "RATE-LIMITING");
        rate_limiting(&mut out, cfg);
        section(&mut out, "DEFER");
        sections::defer(&mut out, cfg, Defer::AsConfigured);
    }
    line!(&mut out);
    sections::custom_lua(
        &mut out,
        cfg.lua.script.as_deref(),
        cfg.lua.script_file.as_deref(),
        ctx.read_as,
    );
    out
}

fn section(out: &mut String, name: &str) {
    line!(out);
    line!(out, "-- {name} section ----------------------------------");
}

fn preamble(out: &mut String, cfg: &KresConfig) {
    sections::ffi(out);
    line!(
        out,
        "-- Do not clear the DB with rules; the policy-loader prepared it."
    );
    line!(out, "assert(C.kr_rules_init(nil, 0, false) == 0)");
    line!(out, "-- hostname");
    line!(out, "hostname({})", quote(&cfg.hostname));
    if let Some(nsid) = &cfg.nsid {
        line!(out, "-- nsid");
        line!(out, "modules.load('nsid')");
        line!(out, "nsid.name({} .. worker.id)", quote(nsid));
    }
}

/// `logging.dnstap` (upstream's): kresd's stream straight to the operator's collector, whether
/// the query log is on or not (the log is written by our answer counters, [`query_log`]).
fn dnstap(out: &mut String, cfg: &KresConfig) {
    let dnstap = &cfg.logging.dnstap;
    if !dnstap.enable {
        return;
    }
    let socket = dnstap
        .unix_socket
        .as_deref()
        .map_or_else(|| "nil".to_owned(), quote_path);
    line!(out, "-- logging.dnstap");
    line!(out, "modules.load('dnstap')");
    line!(out, "dnstap.config({{");
    line!(out, "    socket_path = {socket},");
    line!(out, "    client = {{");
    line!(
        out,
        "        log_queries = {},",
        boolean(dnstap.log_queries)
    );
    line!(
        out,
        "        log_responses = {},",
        boolean(dnstap.log_responses)
    );
    line!(out, "        log_tcp_rtt = {}", boolean(dnstap.log_tcp_rtt));
    line!(out, "    }}");
    line!(out, "}})");
}

/// `monitoring.query-log`: our recorder sending every answer as a record to the manager's
/// socket (`lua::query_log`), attached to the answer counters' layer (defined before it).
fn query_log(out: &mut String, cfg: &KresConfig) {
    if cfg.monitoring.query_log.enabled {
        super::query_log::query_log(
            out,
            &cfg.rundir.join(kres_wire::query_log_format::SOCKET_FILE),
        );
    }
}

/// The control socket in `<rundir>/control/$SYSTEMD_INSTANCE` (the rundir from the
/// configuration, not the working directory).
fn control_socket(out: &mut String, cfg: &KresConfig) {
    let mut dir = cfg.rundir.clone().into_os_string();
    dir.push("/control/");
    line!(out, "-- control socket location");
    line!(out, "do");
    line!(out, "\tlocal ffi = require('ffi')");
    line!(out, "\tlocal id = os.getenv('SYSTEMD_INSTANCE')");
    line!(out, "\tif not id then");
    line!(
        out,
        "\t\tlog_error(ffi.C.LOG_GRP_SYSTEM, 'environment variable $SYSTEMD_INSTANCE not set, which should not have been possible due to running under manager')"
    );
    line!(out, "\telse");
    line!(
        out,
        "\t\tlocal path = {} .. id",
        quote_path(Path::new(&dir))
    );
    line!(
        out,
        "\t\tlocal ok, err = pcall(net.listen, path, nil, {{ kind = 'control' }})"
    );
    line!(out, "\t\tif not ok then");
    line!(
        out,
        "\t\t\tlog_warn(ffi.C.LOG_GRP_NETWORK, 'bind to ' .. path .. ' failed ' .. err)"
    );
    line!(out, "\t\tend");
    line!(out, "\tend");
    line!(out, "end");
}

fn statistics_functions(out: &mut String) {
    line!(out, "-- function used for statistics collection");
    line!(out, "function collect_lazy_statistics()");
    line!(out, "\tif stats == nil then");
    line!(out, "\t\tmodules.load('stats')");
    line!(out, "\tend");
    line!(out, "\treturn stats.list()");
    line!(out, "end");
    line!(out, "-- function used for statistics collection");
    line!(out, "function collect_statistics()");
    line!(out, "\treturn stats.list()");
    line!(out, "end");
    counts::counting_functions(out);
}

/// A boolean option that switches a kresd module.
struct ModuleSwitch {
    /// The option's path in the configuration (`options.query-priming`), for the comment.
    option: &'static str,
    /// The module's name.
    module: &'static str,
    /// The option's value: the module is loaded when on, unloaded when off (kresd loads some
    /// of them by default).
    on: bool,
}

/// Each option's comment, then `modules.load(module)` or `modules.unload(module)`.
fn switch_modules(out: &mut String, switches: &[ModuleSwitch]) {
    for switch in switches {
        let verb = if switch.on { "load" } else { "unload" };
        line!(out, "-- {}", switch.option);
        line!(out, "modules.{verb}({})", quote(switch.module));
    }
}

fn options(out: &mut String, cfg: &KresConfig) {
    let o = &cfg.options;
    line!(out, "-- options.glue-checking");
    line!(out, "mode({})", quote(o.glue_checking.as_str()));
    if o.rebinding_protection {
        line!(out, "-- options.rebinding-protection");
        line!(out, "modules.load('rebinding < iterate')");
    }
    if o.violators_workarounds {
        line!(out, "-- options.violators-workarounds");
        line!(out, "modules.load('workarounds < iterate')");
    }
    if o.serve_stale {
        line!(out, "-- options.serve-stale");
        line!(out, "modules.load('serve_stale < cache')");
    }
    switch_modules(
        out,
        &[
            ModuleSwitch {
                option: "options.query-priming",
                module: "priming",
                on: o.priming,
            },
            ModuleSwitch {
                option: "options.time-jump-detection",
                module: "detect_time_jump",
                on: o.time_jump_detection,
            },
            ModuleSwitch {
                option: "options.refuse-no-rd",
                module: "refuse_nord",
                on: o.refuse_no_rd,
            },
        ],
    );
    line!(out, "-- options.qname-minimisation");
    line!(out, "option('NO_MINIMIZE', {})", boolean(!o.minimize));
    line!(out, "-- options.query-loopback");
    line!(out, "option('ALLOW_LOCAL', {})", boolean(o.query_loopback));
    line!(out, "-- options.reorder-rrset");
    line!(out, "option('REORDER_RR', {})", boolean(o.reorder_rrset));
    line!(out, "-- options.query-case-randomization");
    line!(
        out,
        "option('NO_0X20', {})",
        boolean(!o.query_case_randomization)
    );
}

fn network(out: &mut String, cfg: &KresConfig, binding: SocketBinding) {
    let n = &cfg.network;
    line!(out, "-- network.do-ipv4/6");
    line!(out, "net.ipv4 = {}", boolean(n.do_ipv4));
    line!(out, "net.ipv6 = {}", boolean(n.do_ipv6));
    if let Some(v4) = n.out_interface_v4 {
        line!(out, "-- network.out-interface-v4");
        line!(out, "net.outgoing_v4({})", quote_display(v4));
    }
    if let Some(v6) = n.out_interface_v6 {
        line!(out, "-- network.out-interface-v6");
        line!(out, "net.outgoing_v6({})", quote_display(v6));
    }
    line!(out, "-- network.tcp-pipeline");
    line!(out, "net.tcp_pipeline({})", n.tcp_pipeline);
    switch_modules(
        out,
        &[ModuleSwitch {
            option: "network.edns-keep-alive",
            module: "edns_keepalive",
            on: n.edns_tcp_keepalive,
        }],
    );
    line!(out, "-- network.edns-buffer-size");
    line!(
        out,
        "net.bufsize({}, {})",
        n.edns_buffer_size.downstream.bytes(),
        n.edns_buffer_size.upstream.bytes()
    );
    let tls = &n.tls;
    network_tls(out, tls);
    line!(out, "-- network.quic");
    line!(out, "net.quic_max_conns({})", n.quic.max_conns);
    line!(out, "net.quic_max_streams({})", n.quic.max_streams);
    line!(
        out,
        "net.quic_require_retry({})",
        boolean(n.quic.require_retry)
    );
    if let Some(items) = n.address_renumbering.as_deref().filter(|i| !i.is_empty()) {
        address_renumbering(out, items);
    }
    if n.listen.iter().any(|l| l.kind == ListenKind::DohLegacy) {
        line!(out, "-- doh_legacy http config");
        line!(out, "modules.load('http')");
        let mut conf = String::from("{tls=true,");
        if let Some(cert) = &tls.cert_file {
            conf.push_str(&format!("cert={},", quote_path(cert)));
        }
        if let Some(key) = &tls.key_file {
            conf.push_str(&format!("key={},", quote_path(key)));
        }
        conf.push('}');
        line!(out, "http.config({conf},'doh_legacy')");
    }
    line!(out, "-- network.proxy-protocol");
    if n.proxy_protocol.enable {
        let allowed = n.proxy_protocol.allow.iter().flatten().map(|a| match a {
            AddressOrNetwork::Address(addr) => addr.to_string(),
            AddressOrNetwork::Network(net) => net.to_string(),
        });
        line!(out, "net.proxy_allowed({})", string_table(allowed));
    } else {
        line!(out, "net.proxy_allowed({{}})");
    }
    line!(out, "-- network.listen");
    for listen in &n.listen {
        listen_lines(out, listen, binding);
    }
}

/// `network.tls`: the certificate, the session-ticket secret, the padding.
fn network_tls(out: &mut String, tls: &TlsSchema) {
    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
        line!(out, "-- network.tls");
        line!(out, "net.tls({}, {})", quote_path(cert), quote_path(key));
    }
    if let Some(secret) = &tls.sticket_secret {
        line!(out, "-- network.tls.sticket-secret");
        line!(out, "net.tls_sticket_secret({})", quote(secret.as_str()));
    }
    if let Some(file) = &tls.sticket_secret_file {
        line!(out, "-- network.tls.sticket-secret-file");
        line!(out, "net.tls_sticket_secret_file({})", quote_path(file));
    }
    line!(out, "-- network.tls.padding");
    match tls.padding {
        TlsPadding::Enabled(b) => line!(out, "net.tls_padding({})", boolean(b)),
        TlsPadding::BlockSize(n) => line!(out, "net.tls_padding({n})"),
    }
}

/// `network.address-renumbering`: the `renumber` module and its rules.
fn address_renumbering(out: &mut String, items: &[AddressRenumberingSchema]) {
    line!(out, "-- network.address-renumbering");
    line!(out, "modules.load('renumber')");
    line!(out, "renumber.config({{");
    for item in items {
        let destination = match &item.destination {
            RenumberingDestination::Exact(em) => em.to_string(),
            RenumberingDestination::Prefix(addr) => addr.to_string(),
        };
        line!(
            out,
            "    {{{}, {}}},",
            quote_display(item.source),
            quote(&destination)
        );
    }
    line!(out, "}})");
}

/// kresd's name of a listen kind.
fn listen_kind(kind: ListenKind) -> &'static str {
    match kind {
        ListenKind::Dot => "tls",
        ListenKind::DohLegacy => "doh_legacy",
        other => other.as_str(),
    }
}

fn listen_lines(out: &mut String, listen: &ListenSchema, binding: SocketBinding) {
    let opts = format!(
        "{{kind={},freebind={}}}",
        quote(listen_kind(listen.kind)),
        boolean(listen.freebind)
    );
    for path in listen.unix_socket.iter().flatten() {
        line!(out, "net.listen({},nil,{opts})", quote_path(path));
    }
    for iface in listen.interface.iter().flatten() {
        if binding == SocketBinding::Daemon && listen.daemon_binds(iface) {
            line!(
                out,
                "-- {}: bound by the daemon, passed with -S",
                quote_display(iface)
            );
            continue;
        }
        let port = iface.port().or(listen.port).unwrap_or(53);
        let target = match iface.if_name() {
            Some(name) => format!("net[{}]", quote(name.as_str())),
            None => quote(iface.host_str()),
        };
        line!(out, "net.listen({target},{port},{opts})");
    }
}

fn dnssec(out: &mut String, cfg: &KresConfig) {
    let d = &cfg.dnssec;
    if !d.enable {
        line!(out, "-- Disable DNSSEC");
        line!(out, "trust_anchors.remove('.')");
        return;
    }
    line!(out, "-- dnssec.logging-bogus");
    if d.log_bogus {
        line!(out, "modules.load('bogus_log')");
    }
    switch_modules(
        out,
        &[
            ModuleSwitch {
                option: "dnssec.sentinel",
                module: "ta_sentinel",
                on: d.sentinel,
            },
            ModuleSwitch {
                option: "dnssec.signal-query",
                module: "ta_signal_query",
                on: d.signal_query,
            },
        ],
    );
    if let Some(tas) = d.trust_anchors.as_deref().filter(|t| !t.is_empty()) {
        line!(out, "-- dnssec.trust-anchors");
        for ta in tas {
            line!(out, "trust_anchors.add({})", quote(ta.as_str()));
        }
    }
    if let Some(ntas) = d
        .negative_trust_anchors
        .as_deref()
        .filter(|t| !t.is_empty())
    {
        line!(out, "-- dnssec.negative-trust-anchors");
        line!(
            out,
            "trust_anchors.set_insecure({})",
            string_table(ntas.iter().map(|n| n.punycode()))
        );
    }
    if let Some(files) = d.trust_anchors_files.as_deref().filter(|t| !t.is_empty()) {
        line!(out, "-- dnssec.trust-anchors-files");
        for taf in files {
            line!(
                out,
                "trust_anchors.add_file({}, {})",
                quote_path(&taf.file),
                boolean(taf.read_only)
            );
        }
    }
}

fn cache(out: &mut String, cfg: &KresConfig) {
    let c = &cfg.cache;
    sections::cache_open(out, cfg);
    line!(out, "cache.min_ttl({})", c.ttl_min.seconds());
    line!(out, "cache.max_ttl({})", c.ttl_max.seconds());
    line!(out, "cache.ns_tout({})", c.ns_timeout.millis());
    if let Some(prefill) = c.prefill.as_deref().filter(|p| !p.is_empty()) {
        line!(out, "-- cache.prefill");
        line!(out, "modules.load('prefill')");
        line!(out, "prefill.config({{");
        for item in prefill {
            line!(out, "    [{}] = {{", quote(item.origin.punycode()));
            line!(out, "        url = {},", quote(item.url.as_str()));
            line!(
                out,
                "        interval = {},",
                item.refresh_interval.seconds()
            );
            if let Some(ca) = &item.ca_file {
                line!(out, "        ca_file = {},", quote_path(ca));
            }
            line!(out, "    }},");
        }
        line!(out, "}})");
    }
    if c.prefetch.expiring {
        line!(out, "-- cache.prefetch.expiring");
        line!(out, "modules.load('prefetch')");
    }
    let prediction = &c.prefetch.prediction;
    if prediction.enable {
        line!(out, "-- cache.prefetch.prediction");
        line!(out, "modules.load('predict')");
        line!(out, "predict.config({{");
        line!(out, "    window = {},", prediction.window.minutes());
        line!(out, "    period = {},", prediction.period);
        line!(out, "}})");
    }
}

fn dns64(out: &mut String, cfg: &KresConfig) {
    let d = &cfg.dns64;
    if !d.enable {
        return;
    }
    line!(out, "modules.load('dns64')");
    line!(out, "dns64.config({{");
    line!(out, "    prefix = {},", quote_display(d.prefix.addr()));
    if let Some(ttl) = &d.reverse_ttl {
        line!(out, "    rev_ttl = {},", ttl.seconds());
    }
    if let Some(ex) = d.exclude_subnets.as_deref().filter(|e| !e.is_empty()) {
        line!(
            out,
            "    exclude_subnets = {},",
            string_table(ex.iter().map(ToString::to_string))
        );
    }
    line!(out, "}})");
}

fn rate_limiting(out: &mut String, cfg: &KresConfig) {
    let r = &cfg.rate_limiting;
    if !r.enable {
        return;
    }
    let mut path = cfg.rundir.clone().into_os_string();
    path.push("/ratelimiting");
    // Validation requires `rate-limit` when enabled; `nil` would make kresd fail loudly.
    let rate = r
        .rate_limit
        .map_or_else(|| "nil".to_owned(), |n| n.to_string());
    line!(
        out,
        "assert(C.ratelimiting_init({}, {}, {}, {rate}, {}, {}, {}) == 0)",
        quote_path(Path::new(&path)),
        r.capacity,
        r.instant_limit,
        r.slip,
        r.log_period.millis(),
        boolean(r.dry_run)
    );
}
