//! Rendering facts that are cheap to check without kresd (the behaviour on kresd is proven by
//! `tests/lua_*.rs`): one `check` per configuration, asserting lines that must or must not
//! appear.

use std::path::Path;

use super::{render_policy_loader, render_worker, RenderContext, SocketBinding};
use kres_config::{parse_document, validate, KresConfig, LogTargetArg, ValidationContext};

fn cfg(yaml: &str) -> KresConfig {
    let raw = parse_document(yaml, Path::new("/etc/knot-resolver/config.yaml")).expect("YAML");
    let ctx = ValidationContext {
        resolve_root: "/etc/knot-resolver".into(),
        checks: kres_config::PathChecks::Lenient,
        logtarget_arg: LogTargetArg::default(),
    };
    validate(&raw, &ctx).unwrap_or_else(|e| panic!("invalid test config: {e}"))
}

/// Which file to look at.
#[derive(Clone, Copy)]
enum File {
    Worker,
    PolicyLoader,
}

fn check(yaml: &str, file: File, present: &[&str], absent: &[&str]) {
    let cfg = cfg(yaml);
    let text = match file {
        File::Worker => render_worker(&cfg),
        File::PolicyLoader => render_policy_loader(&cfg),
    };
    for line in present {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    for line in absent {
        assert!(!text.contains(line), "unexpected {line:?} in:\n{text}");
    }
}

#[test]
fn listen_kinds_interfaces_and_unix_sockets() {
    check(
        "rundir: /run/kr\nnetwork:\n  listen:\n    - interface: [lo@5353, '::1@853']\n      kind: dot\n    - unix-socket: /run/kr/doh.sock\n      kind: doh-legacy\n      freebind: true\n    - interface: 127.0.0.1\n      kind: doh2-insecure\n    - interface: 127.0.0.1\n      kind: xdp\n",
        File::Worker,
        &[
            "net.listen(net['lo'],5353,{kind='tls',freebind=false})",
            "net.listen('::1',853,{kind='tls',freebind=false})",
            "net.listen('/run/kr/doh.sock',nil,{kind='doh_legacy',freebind=true})",
            "modules.load('http')",
            "http.config({tls=true,},'doh_legacy')",
            "net.listen('127.0.0.1',80,{kind='doh2-insecure',freebind=false})",
            "net.listen('127.0.0.1',53,{kind='xdp',freebind=false})",
        ],
        &[],
    );
}

#[test]
fn daemon_bound_sockets_are_left_out_of_the_lua() {
    let cfg = cfg("network:\n  listen:\n    - interface: 127.0.0.1@5353\n    - interface: [lo, 'fe80::1%lo']\n    - interface: '::1@853'\n      kind: dot\n    - interface: 127.0.0.1\n      kind: doh2\n    - unix-socket: /run/kr/dns.sock\n");
    let daemon = RenderContext {
        binding: SocketBinding::Daemon,
        read_as: None,
    };
    let text = super::render_worker_with(&cfg, &daemon);
    for present in [
        "-- '127.0.0.1@5353': bound by the daemon, passed with -S",
        "-- 'lo': bound by the daemon, passed with -S",
        "-- '::1@853': bound by the daemon, passed with -S",
        "net.listen('fe80::1%lo',53,{kind='dns',freebind=false})",
        "net.listen('127.0.0.1',443,{kind='doh2',freebind=false})",
        "net.listen('/run/kr/dns.sock',nil,{kind='dns',freebind=false})",
    ] {
        assert!(text.contains(present), "missing {present:?} in:\n{text}");
    }
    for absent in [
        "net.listen('127.0.0.1',5353",
        "net.listen(net['lo']",
        "net.listen('::1',853",
    ] {
        assert!(!text.contains(absent), "unexpected {absent:?} in:\n{text}");
    }
    // Upstream's shape is unchanged for `kresctl convert` and `--kresd-binds-sockets`.
    let upstream = render_worker(&cfg);
    assert!(upstream.contains("net.listen('127.0.0.1',5353,{kind='dns',freebind=false})"));
    let kresd = RenderContext {
        binding: SocketBinding::Kresd,
        read_as: None,
    };
    assert_eq!(upstream, super::render_worker_with(&cfg, &kresd));
}

#[test]
fn control_socket_uses_the_configured_rundir() {
    check(
        "rundir: /var/lib/kr's\n",
        File::Worker,
        &["local path = '/var/lib/kr\\'s/control/' .. id"],
        &["path = '//control/'"],
    );
}

#[test]
fn script_only_keeps_the_control_socket_and_statistics() {
    check(
        "lua:\n  script-only: true\n  script: \"-- mine\"\n",
        File::Worker,
        &[
            "pcall(net.listen, path, nil, { kind = 'control' })",
            "function collect_statistics()",
            "function collect_lazy_statistics()",
            "function collect_labelled_statistics()",
            "-- mine",
        ],
        &[
            "kr_rules_init",
            "log_level(",
            "cache.open(",
            "\nload_answer_counters()",
        ],
    );
}

/// The answer counters load as `stats` does: at the first collection (lazy), or at start.
#[test]
fn answer_counters_follow_the_metrics_mode() {
    for (mode, at_start) in [("lazy", false), ("always", true), ("manager-only", false)] {
        let yaml = format!("monitoring:\n  metrics: {mode}\n");
        let (present, absent): (&[&str], &[&str]) = if at_start {
            (
                &["\nmodules.load('stats')\n", "\nload_answer_counters()\n"],
                &[],
            )
        } else {
            (
                &[],
                &["\nmodules.load('stats')\n", "\nload_answer_counters()\n"],
            )
        };
        check(&yaml, File::Worker, present, absent);
        check(
            &yaml,
            File::Worker,
            &[
                "function load_answer_counters()",
                "modules.load('answer_counters')",
                "return {stats = stats.list(), counts = report(),",
                "upstreams = {rtt = stats.upstreams(), tallies = upstream_report(), since = counting_since}}",
            ],
            &[],
        );
    }
}

#[test]
fn process_group_debug_levels() {
    let yaml = "logging:\n  level: notice\n  groups: [kresd, io, manager]\n";
    check(
        yaml,
        File::Worker,
        &["log_level('debug')", "log_groups({'io',})"],
        &[],
    );
    check(
        yaml,
        File::PolicyLoader,
        &["log_level('notice')", "log_groups({'io',})"],
        &[],
    );
}

#[test]
fn live_logging_sets_what_the_worker_file_sets_and_clears_old_groups() {
    let rows = [
        (
            "logging:\n  level: notice\n  groups: [kresd, io, manager]\n  target: stderr\n",
            "debug",
            "(function() log_level('debug') log_target('stderr') log_groups({'io',}) return log_level() end)()",
        ),
        (
            "logging:\n  level: info\n  target: stdout\n",
            "info",
            "(function() log_level('info') log_target('stdout') log_groups({}) return log_level() end)()",
        ),
    ];
    for (yaml, level, expr) in rows {
        let cfg = cfg(yaml);
        assert_eq!(
            super::live_logging(&cfg),
            (expr.to_owned(), level),
            "{yaml}"
        );
        let text = render_worker(&cfg);
        assert!(text.contains(&format!("log_level('{level}')")), "{text}");
        assert!(!expr.contains('\n'), "one control command");
    }
}

#[test]
fn defer_is_configured_in_workers_and_disabled_in_the_policy_loader() {
    let yaml = "rundir: /run/kr\nworkers: 3\ndefer:\n  enable: true\n  log-period: 1500ms\n";
    check(
        yaml,
        File::Worker,
        &["assert(C.defer_init('/run/kr/defer', 1500, 3) == 0)"],
        &[],
    );
    check(
        yaml,
        File::PolicyLoader,
        &["assert(C.defer_init(nil, 0, 0) == 0)", "\nquit()\n"],
        &["/run/kr/defer"],
    );
}

#[test]
fn price_factors_round_half_to_even_like_jinja() {
    // 2^-17 * 65536 = 0.5 and 3 * 2^-17 * 65536 = 1.5.
    for (factor, expected) in [
        ("0.5", "32768"),
        ("0.00000762939453125", "0"),
        ("0.00002288818359375", "2"),
    ] {
        check(
            &format!(
                "views:\n  - subnets: [10.0.0.0/8]\n    options:\n      price-factor: {factor}\n    answer: allow\n"
            ),
            File::PolicyLoader,
            &[&format!("'policy.PRICE_FACTOR16({expected})'")],
            &[],
        );
    }
}

#[test]
fn view_flags_come_before_tags() {
    check(
        "views:\n  - subnets: [10.0.0.0/8]\n    dst-subnet: 192.0.2.0/24\n    protocols: [udp53, doh]\n    tags: [t1]\n    options:\n      minimize: false\n      fallback: false\n",
        File::PolicyLoader,
        &["assert(C.kr_view_insert_action('10.0.0.0/8', '192.0.2.0/24', 0 + 2^C.KR_PROTO_UDP53 + 2^C.KR_PROTO_DOH, policy.COMBINE({'policy.FLAGS({\"NO_MINIMIZE\",\"FALLBACK_DISABLE\",})',policy.TAGS_ASSIGN({'t1',}),})) == 0)"],
        &["policy.REFUSE", "DNS64_DISABLE"],
    );
}

#[test]
fn rpz_logging_and_rule_scores() {
    check(
        "views:\n  - subnets: [10.0.0.0/8]\n    tags: [t1]\nlocal-data:\n  rpz:\n    - file: /etc/kr/block.rpz\n      log: [name]\n      tags: [t1]\n  records: 'a.test. A 192.0.2.1'\n",
        File::PolicyLoader,
        &[
            "rrs.filename = '/etc/kr/block.rpz'",
            "rrs.is_rpz = true",
            "rrs.tags = policy.get_tagset({'t1',})",
            "rrs.opts.score = 9\nrrs.opts.log_level = 3  -- notice\nrrs.opts.log_name = true\nassert",
            "rrs.input_str = 'a.test. A 192.0.2.1'\nrrs.opts = C.KR_RULE_OPTS_DEFAULT\nassert",
        ],
        &["rrs.opts.log_ip"],
    );
}

#[test]
fn a_zone_kept_by_transfer_is_skipped_while_missing_and_left_out_when_kresd_cannot_read_it() {
    check(
        "rundir: /run/kr\nlocal-data:\n  rpz:\n    - file: /etc/kr/plain.rpz\n    - file: /var/cache/kr/block.rpz\n      transfer:\n        zone: block.rpz.\n        primaries: [192.0.2.53]\n",
        File::PolicyLoader,
        &[
            "local rpz_broken = {}\nlocal function rpz_unreadable(file)\n",
            "rrs.filename = '/etc/kr/plain.rpz'\nrrs.opts = C.KR_RULE_OPTS_DEFAULT\nrrs.opts.score = 9\nassert(C.kr_rule_zonefile(rrs) == 0)",
            "do\nlocal stored, why, errno = io.open('/var/cache/kr/block.rpz', 'r')\n\
             if stored then stored:close() end\nif stored or errno ~= 2 then\n\
             local broken = why or rpz_unreadable('/var/cache/kr/block.rpz')\n\
             if broken == nil then\nrrs = ffi.new",
            "rrs.filename = '/var/cache/kr/block.rpz'",
            "local loaded = C.kr_rule_zonefile(rrs)\n\
             if loaded ~= 0 then broken = 'kresd could not load it (error ' .. loaded .. ')' end\nend\n\
             if broken ~= nil then rpz_broken[#rpz_broken + 1] = '1 ' .. tostring(broken):gsub('%c', ' ') end",
            "local report = assert(io.open('/run/kr/policy-loader.rpz-report', 'w'))",
        ],
        &["io.open('/etc/kr/plain.rpz'"],
    );
    // Without zones kept by zone transfer, no check and no report.
    check(
        "local-data:\n  rpz:\n    - file: /etc/kr/plain.rpz\n",
        File::PolicyLoader,
        &["assert(C.kr_rule_zonefile(rrs) == 0)"],
        &["rpz_broken", "rpz-report"],
    );
}

#[test]
fn non_ascii_names_reach_kresd_as_punycode() {
    check(
        "local-data:\n  rules:\n    - name: [ñ.test]\n      subtree: nxdomain\n",
        File::PolicyLoader,
        &["todname('xn--ida.test')"],
        &[],
    );
}

#[test]
fn dnssec_disabled_removes_the_root_anchor() {
    check(
        "dnssec:\n  enable: false\n",
        File::Worker,
        &["trust_anchors.remove('.')"],
        &["ta_sentinel"],
    );
}

#[test]
fn a_missing_script_file_is_a_lua_error() {
    check(
        "lua:\n  script-file: /nonexistent/script.lua\n",
        File::Worker,
        &["error('cannot read the Lua script file /nonexistent/script.lua: "],
        &[],
    );
}

#[test]
fn script_files_are_read_with_the_permissions_of_the_user_given() {
    use std::os::unix::fs::PermissionsExt;
    let file = std::env::temp_dir().join(format!("kres-render-read-as-{}.lua", std::process::id()));
    std::fs::write(&file, "-- the script\n").expect("write the script");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let cfg = cfg(&format!(
        "lua:\n  script-file: {0}\n  policy-script-file: {0}\n",
        file.display()
    ));
    let owner = nix::unistd::Uid::current().as_raw();
    let other = owner + 1;
    let as_user = |uid: u32| RenderContext {
        binding: SocketBinding::Kresd,
        read_as: Some(supervisor_types::Credentials { uid, gid: uid }),
    };
    // as quoted in the generated `error(...)`
    let refused = format!("not readable by the workers\\' user (uid {other})");
    let mut failures = Vec::new();
    for (ctx, pasted) in [
        (RenderContext::STANDALONE, true),
        (as_user(owner), true),
        (as_user(other), false),
    ] {
        for text in [
            super::render_worker_with(&cfg, &ctx),
            super::render_policy_loader_with(&cfg, &ctx),
        ] {
            if text.contains("\n-- the script\n") != pasted || text.contains(&refused) == pasted {
                failures.push(format!("{ctx:?}:\n{text}"));
            }
        }
    }
    let _ = std::fs::remove_file(&file);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_large_zone_text_quoted_apart_lands_where_a_small_one_does() {
    // past the size the zone text is quoted on a second thread: the same Lua, in its place
    // (after the addresses, before the rules)
    let line = "r.example. 300 TXT \"it's\"\n";
    for lines in [1, (1 << 20) / line.len() + 1] {
        let records = line.repeat(lines);
        let indented: String = records.lines().map(|l| format!("    {l}\n")).collect();
        let yaml = format!(
            "local-data:\n  addresses:\n    a.example: 192.0.2.1\n  records: |\n{indented}  rules:\n    - name: b.example\n      subtree: empty\n"
        );
        let text = render_policy_loader(&cfg(&yaml));
        let quoted = format!("rrs.input_str = {}\n", super::quote(&records));
        let at = |what: &str| {
            text.find(what)
                .unwrap_or_else(|| panic!("{lines} lines: no {what:.60}"))
        };
        assert!(at("'a.example'") < at(&quoted), "{lines} lines");
        assert!(at(&quoted) < at("C.kr_rule_local_subtree"), "{lines} lines");
        assert_eq!(text.matches("rrs.input_str").count(), 1, "{lines} lines");
    }
}

#[test]
fn fleet_membership_renders_nothing() {
    let alone = "rundir: /run/kr\nhostname: ns1\n";
    let member = format!(
        "{alone}fleet:\n  etcd:\n    endpoints: ['https://127.0.0.1:2379']\n    prefix: /kr/f\n    username: kres\n    password-file: /etc/kr/etcd-password\n    ca-file: /etc/kr/ca.pem\n"
    );
    assert!(cfg(&member).fleet.is_some());
    for render in [render_worker, render_policy_loader] {
        assert_eq!(render(&cfg(alone)), render(&cfg(&member)));
    }
}

/// Everything we write in Lua parses (full_moon, Lua 5.1, LuaJIT's language): the layers'
/// templates as filled in (`counts.lua`, `query_log.lua`) and the worker's and
/// policy-loader's configurations of every reference configuration and of the sections'
/// test files. kresd itself loads them in `tests/lua_*.rs`; this names the line at fault
/// without starting one.
#[test]
fn every_lua_we_write_parses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut texts = Vec::new();
    let mut counting = String::new();
    super::counts::counting_functions(&mut counting);
    super::counts::load_at_start(&mut counting);
    texts.push(("counts.lua".to_owned(), counting));
    let mut log = String::new();
    super::query_log::query_log(&mut log, Path::new("/run/knot-resolver/query-log.sock"));
    texts.push(("query_log.lua".to_owned(), log));
    let mut files: Vec<_> = std::fs::read_dir(root.join("tests/data/reference-configs"))
        .expect("the reference configurations")
        .map(|e| e.expect("an entry").path())
        .collect();
    files.extend(
        [
            "worker-sections.yaml",
            "policy-sections.yaml",
            "script-only.yaml",
        ]
        .map(|f| root.join("tests/data/lua").join(f)),
    );
    files.sort();
    for file in &files {
        let yaml = std::fs::read_to_string(file).expect("a readable configuration");
        let cfg = cfg(&yaml);
        let name = file.display();
        texts.push((format!("{name} (worker)"), render_worker(&cfg)));
        texts.push((
            format!("{name} (policy-loader)"),
            render_policy_loader(&cfg),
        ));
    }
    for (name, text) in &texts {
        if let Err(errors) = full_moon::parse(text) {
            panic!("{name} is not Lua: {errors:?}\n{text}");
        }
    }
    assert!(texts.len() >= 2 + 2 * 8, "{} texts", texts.len());
    // The check can fail: a cut-off statement does not parse.
    assert!(full_moon::parse("local x = ").is_err());
}
