//! The status page (`GET /ui`) in a real browser: headless Chromium over WebDriver, against
//! the real daemon and real kresd. The browser reaches loopback only; its network log shows
//! every request the page made, its console every error.
//!
//! Over the unix socket, through `kresctl ui`: without the secret of the URL kresctl printed
//! the page says it needs it; with it, the page takes it out of the URL into the tab's
//! `sessionStorage` (no request's URL holds it) and sends it in a header with every request but
//! those of its own files, works on after a reload of the tab, shows the running configuration
//! in the page (its link would carry no header), loads with no console error and no request to
//! another host, shows the workers and the configuration's ETag, shows a worker killed with
//! SIGKILL restarted, follows the q/s of queries sent during the test (up, then down when they
//! stop), shows a refused reload with its reason (a configuration value full of `<`, `>`, `"`,
//! `'` and `&`, shown literally, running nothing), the next generation of an applied change,
//! and lets the admin clear the cache. With the query log, a forward target and an RPZ zone
//! kept by transfer (knotd): a query whose name holds those characters in its labels (sent in
//! wire form) shown literally in the query log and the top lists, the log filtered, the forward
//! target with its RTT, the zone's serial and transfer, an admin's trace naming the target; one
//! event stream for the whole visit and the periodic reads within the page's schedule. At
//! 1280×800 and 1400×800, with long addresses, names, exits and reasons in its tables, neither
//! the page nor a card scrolls sideways. Over TCP with bearer tokens: the page asks for the
//! token (never in a URL or the page), a reader sees no admin controls and the API refuses the
//! reader's actions, an admin sees and uses them.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{serve_ui, KresctlUi, Resolver, Setup, DNS_TIMEOUT, KRESCTL, START_TIMEOUT};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use testbed::knot::{KeySetup, KnotPrimary, PrimarySetup};
use testbed::webdriver::Browser;
use testbed::{dns, Bed};

const RECORDS: &str = "local-data:\n  records: |\n    ui.test. 300 A 192.0.2.7\n";

/// How long the page may take to show something the API already says.
const SHOWN: Duration = Duration::from_secs(30);

/// The issue's bound: a worker killed is shown restarted within this.
const RESTART_SHOWN: Duration = Duration::from_secs(2);

/// A value a configuration refuses, quoted back in the refusal's reason: every character
/// HTML gives a meaning to, and a script that would mark the page if it ran.
const HOSTILE: &str = r#"<img src=x onerror="window.pwned=1">'&"#;

/// The requests that went to another host than `origin` (the browser's own pages, such as
/// the new tab it starts with, are no network requests).
fn foreign(urls: &[String], origin: &str) -> Vec<String> {
    const INTERNAL: [&str; 4] = ["chrome://", "chrome-untrusted://", "about:", "data:"];
    urls.iter()
        .filter(|u| !u.starts_with(&format!("{origin}/")))
        .filter(|u| !INTERNAL.iter().any(|scheme| u.starts_with(scheme)))
        .cloned()
        .collect()
}

/// The browser's console errors and the page's requests to other hosts: none.
fn assert_clean(browser: &Browser, origin: &str) -> usize {
    let errors = browser.console_errors().expect("console log");
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    let urls = browser.requested_urls().expect("network log");
    let foreign = foreign(&urls, origin);
    assert!(foreign.is_empty(), "requests to other hosts: {foreign:#?}");
    urls.len()
}

/// CPU time (user + system) `pid` has used so far, in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after_name = stat.rsplit_once(')').expect("stat format").1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime: fields 14 and 15 of stat(5), 12 and 13 after the name.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// The text of a cell of a process's row.
fn cell(browser: &Browser, name: &str, class: &str) -> Option<String> {
    browser
        .run(
            "const c = document.querySelector(`#processes tr[data-name=\"${arguments[0]}\"] td.${arguments[1]}`); \
             return c ? c.textContent : null;",
            &[json!(name), json!(class)],
        )
        .expect("script")
        .as_str()
        .map(str::to_owned)
}

/// The header that carries kresctl ui's secret.
const SECRET_HEADER: &str = "x-kresctl-ui-secret";

/// The page's own files, which carry no data (a browser fetches them without the secret).
const PAGE_FILES: [&str; 4] = ["/ui", "/ui/app.js", "/ui/app.css", "/ui/favicon.svg"];

/// The page's requests since the last read of the network log: the secret in no URL, and in
/// the header of every request but those of the page's files (the identity and the event
/// stream among them).
fn assert_secret_sent(browser: &Browser, ui: &KresctlUi) {
    let requests = browser.requests().expect("network log");
    assert!(
        requests.iter().all(|r| !r.url.contains(&ui.secret)),
        "the secret in no request's URL: {requests:#?}"
    );
    let api: Vec<_> = requests
        .iter()
        .filter_map(|r| Some((r.url.strip_prefix(&ui.origin)?, r)))
        .filter(|(path, _)| !PAGE_FILES.contains(path))
        .collect();
    for path in ["/ui/whoami", "/events", "/processes"] {
        assert!(
            api.iter().any(|(p, _)| *p == path),
            "{path} requested: {requests:#?}"
        );
    }
    for (path, request) in &api {
        assert_eq!(
            request.header(SECRET_HEADER),
            Some(ui.secret.as_str()),
            "{path}: {request:?}"
        );
    }
    println!(
        "{} requests of the page carried the secret in its header",
        api.len()
    );
}

/// Rows the API could send, as long as they come: IPv6 addresses with ports, a long name,
/// a worker's exit with its core, a reason without spaces, a failed transfer; drawn by the
/// page's own functions, beside what it shows already.
const LONG_ROWS: &str = r#"
const v6 = (i) => `2001:db8:ffff:ffff:ffff:ffff:ffff:fff${i}`;
page.processes = page.processes.filter((p) => !p.name.startsWith('kresd-long')).concat([
  { name: 'kresd-long-0', type: 'KRESD', pid: 4194304, state: 'failed', restarts: 12345,
    last_exit: { signaled: { signal: 6, core_dumped: true } },
    failure: 'kresd-long-0 failed 5 times within 10 s' },
  { name: 'kresd-long-1', type: 'KRESD', pid: 4194303, state: 'backoff', restarts: 7,
    last_exit: { spawn_failed: '/usr/lib/knot-resolver/kresd-with-a-rather-long-path:No-such-file-or-directory(os-error-2)' } },
]);
renderProcesses();
renderUpstreams({
  forwards: [{ subtrees: ['blocklist.rpz', 'a-rather-long-subtree-name.example.internal'],
    servers: [v6(1) + '@65535', v6(2) + '@65534', '192.0.2.255@65533'] }],
  addresses: [1, 2, 3, 4].map((i) => ({ address: `${v6(i)}#6553${i}`, samples: 123456,
    rtt_avg_ms: 1234.56, rtt_min_ms: 1.23, rtt_max_ms: 12345.67, queries: 1234567,
    unanswered: 123456, error_answers: 12345, workers: ['kresd0', 'kresd1', 'kresd2', 'kresd3'] })),
});
renderRpz([{ zone: 'a-very-long-response-policy-zone-name.blocklist.example.internal.',
  serial: 2026120612, 'last-transfer': { kind: 'ixfr', result: 'failure',
    time: Date.now() / 1000, error: `connection to ${v6(1)}#65535 refused: no-route-to-host` },
  'next-refresh': Date.now() / 1000 + 300, expires: Date.now() / 1000 + 86400 * 30,
  expired: false, broken: 'the-zone-file-could-not-be-parsed-at-line-123456' }]);
renderQueryLog([{ time: Date.now() / 1000, client: v6(1) + '#65535', transport: 'doh',
  name: 'a-label-of-sixty-three-characters-long-abcdefghijklmnopqrstuvwx.'.repeat(3) + 'example.',
  qtype: 'NSEC3PARAM', rcode: 'SERVFAIL', latency_ms: 12345.6, answers: 123, cached: false,
  ede: 'EDE 22 (No Reachable Authority): at delegation example.; ' + v6(2) + '#53' }]);
"#;

/// At windows 1280 and 1400 pixels wide (800 high), with [`LONG_ROWS`] among what the page
/// shows: neither the page nor one of its cards scrolls sideways. A screenshot of the
/// narrow window per card shown (`{name}-narrow-{card}.png`); the window is its first size
/// again afterwards.
fn assert_no_sideways_scroll(browser: &Browser, name: &str) {
    const MEASURE: &str = "return { window: window.innerWidth, \
         page: document.documentElement.scrollWidth, \
         cards: [...document.querySelectorAll('main > section')] \
           .filter((s) => !s.hidden) \
           .map((s) => [s.id, s.scrollWidth, s.clientWidth]) };";
    for width in [1400, 1280] {
        browser.resize(width, 800).expect("resize");
        let inner = browser
            .run("return window.innerWidth;", &[])
            .expect("script");
        assert!(
            inner.as_u64().is_some_and(|w| w <= u64::from(width)),
            "{inner}"
        );
        let sizes = browser
            .run(&format!("{LONG_ROWS}\n{MEASURE}"), &[])
            .expect("script");
        println!("at {width}×800: {sizes}");
        assert!(
            sizes["page"].as_u64() <= sizes["window"].as_u64(),
            "the page scrolls sideways at {width} px: {sizes}"
        );
        let cards = sizes["cards"].as_array().expect("cards");
        assert!(cards.len() >= 5, "{sizes}");
        for card in cards {
            assert!(
                card[1].as_u64() <= card[2].as_u64(),
                "the card {} scrolls sideways at {width} px: {sizes}",
                card[0]
            );
        }
    }
    for id in ["processes-panel", "rpz-panel", "insight-panel"] {
        let shown = browser
            .run(
                "const card = document.getElementById(arguments[0]); \
                 card.scrollIntoView(); return !card.hidden;",
                &[json!(id)],
            )
            .expect("scroll");
        if shown != json!(true) {
            continue;
        }
        println!(
            "screenshot: {}",
            browser
                .screenshot(&format!("{name}-narrow-{id}"))
                .expect("png")
                .display()
        );
    }
    browser.resize(1280, 1100).expect("resize");
}

#[test]
fn through_kresctl_ui_the_page_follows_processes_changes_and_traffic() {
    let r = common::start(&Setup::new("ui-page").workers(2).extra(RECORDS)).expect("start");
    let ui = serve_ui(&r);
    let (url, origin) = (&ui.url, &ui.origin);
    let refused = Command::new(KRESCTL)
        .arg("-s")
        .arg(&r.api)
        .args(["ui", "--listen", "192.0.2.1:8453"])
        .output()
        .expect("kresctl ui");
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("loopback addresses only"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let browser = Browser::start(&r.dir.host("browser")).expect("browser");
    // Without the secret, the page loads and says what kresctl ui wants.
    browser.open(&format!("{origin}/ui")).expect("page");
    let refused = browser
        .wait_until(
            "the refusal shown",
            SHOWN,
            "const t = document.getElementById('stream').textContent; \
             return t.includes('secret') ? t : null;",
        )
        .expect("refusal shown");
    println!("without the secret, the page says: {refused}");
    let errors = browser.console_errors().expect("console");
    assert!(
        errors
            .iter()
            .all(|e| e.contains("/ui/whoami") && e.contains("403")),
        "only the refused request: {errors:#?}"
    );
    let before = browser.requests().expect("network log");
    assert!(
        before.iter().all(|r| r.header(SECRET_HEADER).is_none()),
        "no secret to send yet: {before:#?}"
    );
    // With the URL printed: the secret kept in the tab, and gone from the URL.
    browser.open(url).expect("page");
    browser
        .wait_until(
            "both workers shown ready",
            SHOWN,
            "return document.getElementById('workers-ready').textContent === '2' \
             && document.getElementById('workers-configured').textContent === '2';",
        )
        .expect("workers");
    let etag = r
        .http("GET", "/v1/config", b"")
        .expect("config")
        .header("etag")
        .expect("ETag")
        .to_owned();
    assert_eq!(
        browser.text_of("etag").expect("etag").as_deref(),
        Some(etag.as_str()),
        "the page shows the running configuration's ETag"
    );
    assert_eq!(
        browser.text_of("role").expect("role").as_deref(),
        Some("admin")
    );
    assert_eq!(
        browser
            .run("return window.location.href;", &[])
            .expect("script"),
        json!(format!("{origin}/ui")),
        "the secret taken out of the URL"
    );
    assert_secret_sent(&browser, &ui);
    assert_eq!(
        browser
            .run("return window.sessionStorage.length;", &[])
            .expect("script"),
        json!(1),
        "the secret kept in the tab"
    );
    // Loaded again, the tab still has the secret: the page works on.
    browser.reload().expect("reload");
    browser
        .wait_until(
            "the page loaded again, with both workers",
            SHOWN,
            "return document.getElementById('workers-ready').textContent === '2' \
             && document.getElementById('etag').textContent !== '–';",
        )
        .expect("reloaded");
    assert_secret_sent(&browser, &ui);
    assert_clean(&browser, origin);
    // What the open page costs the control plane (the root and the manager process), measured
    // over the rest of the test and reported; the test's own requests are counted too.
    let manager: i32 = cell(&browser, "manager", "pid")
        .expect("manager's row")
        .parse()
        .expect("a pid");
    let control_plane = [r.launched.pid(), manager];
    let ticks_before: u64 = control_plane.iter().map(|p| cpu_ticks(*p)).sum();
    let measured_from = Instant::now();

    // A worker killed is shown restarted: another pid, one restart.
    let old = cell(&browser, "kresd0", "pid").expect("kresd0's row");
    let pid: i32 = old.parse().expect("a pid");
    assert!(r.pids_named("kresd").contains(&pid), "{pid} is a worker");
    let killed = Instant::now();
    kill(Pid::from_raw(pid), Signal::SIGKILL).expect("kill");
    browser
        .wait_until(
            "the killed worker shown restarted",
            RESTART_SHOWN,
            &format!(
                "const row = document.querySelector('#processes tr[data-name=\"kresd0\"]'); \
                 return row && row.querySelector('td.pid').textContent !== '{old}' \
                 && row.querySelector('td.restarts').textContent === '1';"
            ),
        )
        .expect("restart shown");
    println!(
        "a worker killed with SIGKILL was shown restarted after {:?}",
        killed.elapsed()
    );
    println!(
        "screenshot: {}",
        browser.screenshot("restarted").expect("png").display()
    );

    // Queries while the page watches: q/s rises above zero, the answers reach what was sent,
    // and q/s falls back to zero when they stop.
    browser
        .wait_until(
            "a first rate",
            SHOWN,
            "return document.getElementById('qps').textContent === '0.0';",
        )
        .expect("idle rate");
    let sending = Arc::new(AtomicBool::new(true));
    let sent = Arc::new(AtomicU64::new(0));
    let sender = {
        let (sending, sent, dns) = (sending.clone(), sent.clone(), r.dns());
        std::thread::spawn(move || {
            while sending.load(Ordering::Relaxed) {
                let answer =
                    dns::query_udp(dns, "ui.test.", dns::TYPE_A, DNS_TIMEOUT).expect("answer");
                assert_eq!(answer.a().len(), 1);
                sent.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let busy = browser
        .wait_until(
            "q/s above zero",
            SHOWN,
            "const q = parseFloat(document.getElementById('qps').textContent); \
             return q > 0 ? [q, document.getElementById('p50').textContent] : null;",
        )
        .expect("traffic shown");
    println!(
        "screenshot: {}",
        browser.screenshot("traffic").expect("png").display()
    );
    sending.store(false, Ordering::Relaxed);
    sender.join().expect("sender");
    let sent = sent.load(Ordering::Relaxed);
    let (busy, p50) = (
        busy[0].clone(),
        busy[1].as_str().unwrap_or_default().to_owned(),
    );
    assert!(p50.starts_with("≤ "), "a median latency is shown: {p50}");
    println!("the page showed {busy} q/s (latency p50 {p50}) while {sent} queries were sent");
    browser
        .wait_until(
            "every answer counted",
            SHOWN,
            &format!(
                "return parseInt(document.getElementById('answers-total').textContent) >= {sent};"
            ),
        )
        .expect("answers counted");
    browser
        .wait_until(
            "q/s down to a tenth once the queries stopped",
            SHOWN,
            &format!(
                "return parseFloat(document.getElementById('qps').textContent) < {};",
                busy.as_f64().expect("a rate") / 10.0
            ),
        )
        .expect("idle again");

    // A reload of a file the configuration refuses: the reason, quoting the value, literally.
    let good = std::fs::read_to_string(&r.config).expect("config");
    testbed::write(
        &r.config,
        &good.replace(
            "  level: notice\n",
            &format!("  level: '{}'\n", HOSTILE.replace('\'', "''")),
        ),
    )
    .expect("write");
    let answer = r.http("POST", "/reload", b"").expect("reload");
    assert_ne!(answer.status, 200, "{}", answer.text());
    let reason = browser
        .wait_until(
            "the refusal shown",
            SHOWN,
            "const li = document.querySelector('#changes li.bad .reason'); \
             return li ? li.textContent : null;",
        )
        .expect("refusal shown");
    let reason = reason.as_str().expect("text");
    assert!(
        reason.contains(&format!("'{HOSTILE}'")),
        "the value shown literally: {reason}"
    );
    let ran = browser
        .run(
            "return [window.pwned === undefined, document.querySelectorAll('main img').length];",
            &[],
        )
        .expect("script");
    assert_eq!(ran, json!([true, 0]), "nothing of the value became HTML");
    testbed::write(&r.config, &good).expect("write");

    // A change that changes a section: the next generation, and the change applied.
    assert_eq!(
        browser.text_of("generation").expect("text").as_deref(),
        Some("1")
    );
    let changed = r.put_json("/logging/level", json!("info"));
    assert_eq!(changed.status, 200, "{}", changed.text());
    browser
        .wait_until(
            "the second generation shown",
            SHOWN,
            "return document.getElementById('generation').textContent === '2' \
             && document.querySelector('#changes li.ok') !== null;",
        )
        .expect("generation 2");

    // The admin's cache clear, through the page.
    browser
        .run("document.getElementById('cache-clear').click();", &[])
        .expect("click");
    let result = browser
        .wait_until(
            "the cache cleared",
            SHOWN,
            "const t = document.getElementById('admin-result').textContent; \
             return t.startsWith('/cache/clear: ') ? t : null;",
        )
        .expect("cache clear answered");
    assert!(
        result
            .as_str()
            .is_some_and(|t| t.starts_with("/cache/clear: 200")),
        "{result}"
    );
    println!(
        "screenshot: {}",
        browser.screenshot("overview").expect("png").display()
    );
    let ticks: u64 = control_plane.iter().map(|p| cpu_ticks(*p)).sum::<u64>() - ticks_before;
    let ticks_per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .expect("sysconf")
        .expect("CLK_TCK") as f64;
    let elapsed = measured_from.elapsed().as_secs_f64();
    println!(
        "the control plane used {:.2} % of a core over {elapsed:.1} s with the page open",
        100.0 * ticks as f64 / ticks_per_second / elapsed
    );
    let requests = assert_clean(&browser, origin);
    let size: usize = ["/ui", "/ui/app.js", "/ui/app.css", "/ui/favicon.svg"]
        .iter()
        .map(|p| r.http("GET", p, b"").expect("asset").body.len())
        .sum();
    println!("the page's four files: {size} bytes; the page's further requests: {requests}");
    assert!(size <= 150 * 1024, "the page is {size} bytes");
    // A link carries no header: the running configuration is shown in the page.
    browser
        .run("document.getElementById('config-link').click();", &[])
        .expect("click");
    browser
        .wait_until(
            "the running configuration shown in the page",
            SHOWN,
            "const c = document.getElementById('config-json'); \
             return !c.hidden && c.textContent.includes('\"workers\"') \
             && window.location.pathname === '/ui';",
        )
        .expect("configuration shown");
    let requests = browser.requests().expect("network log");
    let config = requests
        .iter()
        .find(|r| r.url == format!("{origin}/v1/config"))
        .unwrap_or_else(|| panic!("/v1/config requested: {requests:#?}"));
    assert_eq!(config.header(SECRET_HEADER), Some(ui.secret.as_str()));
    assert_no_sideways_scroll(&browser, "overview");

    drop(browser);
    drop(ui);
    r.stop();
}

#[test]
fn over_tcp_a_reader_sees_no_admin_controls_and_is_refused_their_actions() {
    let port = testbed::free_port().expect("port");
    let bed = Bed::get().expect("bed");
    let tokens = bed.test_dir("ui-tokens").expect("dir");
    const ADMIN: &str = "admin-token-of-the-page";
    const READER: &str = "reader-token-of-the-page";
    testbed::write(&tokens.host("admin"), ADMIN).expect("token");
    testbed::write(&tokens.host("reader"), READER).expect("token");
    let r = common::start(
        &Setup::new("ui-tcp")
            .management(&format!("  interface: 127.0.0.1@{port}\n"))
            .env(
                "KRES_API_TOKEN_FILE",
                tokens.bed("admin").to_str().expect("UTF-8"),
            )
            .env(
                "KRES_API_READ_ONLY_TOKEN_FILE",
                tokens.bed("reader").to_str().expect("UTF-8"),
            ),
    )
    .expect("start");
    let origin = format!("http://127.0.0.1:{port}");
    let browser = Browser::start(&r.dir.host("browser")).expect("browser");
    let log_in = |token: &str| {
        browser.open(&format!("{origin}/ui")).expect("page");
        browser
            .wait_until(
                "the page asks for a token",
                START_TIMEOUT,
                "return !document.getElementById('login').hidden;",
            )
            .expect("login form");
        browser
            .run(
                "document.getElementById('token').value = arguments[0]; \
                 document.getElementById('login-button').click();",
                &[json!(token)],
            )
            .expect("log in");
    };

    log_in(READER);
    browser
        .wait_until(
            "the reader's page",
            SHOWN,
            "return document.getElementById('role').textContent === 'read-only' \
             && document.getElementById('workers-ready').textContent === '1';",
        )
        .expect("reader's page");
    let hidden = browser
        .run(
            "const p = document.getElementById('admin-panel'); \
             return [p.hidden, p.offsetParent === null];",
            &[],
        )
        .expect("script");
    assert_eq!(hidden, json!([true, true]), "no admin control shown");
    // The page's own way to the actions, called anyway: the API refuses them.
    browser.run("control('/reload');", &[]).expect("script");
    let refused = browser
        .wait_until(
            "the reload refused",
            SHOWN,
            "const t = document.getElementById('admin-result').textContent; \
             return t.startsWith('/reload: ') ? t : null;",
        )
        .expect("answered");
    assert!(
        refused
            .as_str()
            .is_some_and(|t| t.starts_with("/reload: 403")),
        "{refused}"
    );
    let cleared = r
        .launched
        .output
        .wait_for("refused: POST /reload needs the admin role", START_TIMEOUT);
    assert!(cleared.is_ok(), "the refusal is logged");
    let page = browser
        .run("return document.documentElement.outerHTML;", &[])
        .expect("page");
    let urls = browser.requested_urls().expect("network log");
    for token in [READER, ADMIN] {
        assert!(!page.to_string().contains(token), "no token in the page");
        assert!(!urls.iter().any(|u| u.contains(token)), "no token in a URL");
    }
    let foreign = foreign(&urls, &origin);
    assert!(foreign.is_empty(), "requests to other hosts: {foreign:#?}");
    let errors: Vec<String> = browser
        .console_errors()
        .expect("console")
        .into_iter()
        // The page's first request for its identity is answered 401 before the token.
        .filter(|e| !e.contains("/ui/whoami") && !e.contains("/reload"))
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    println!(
        "screenshot: {}",
        browser.screenshot("read-only").expect("png").display()
    );

    // Loaded again, the page has forgotten the token; the admin's shows and uses the controls.
    log_in(ADMIN);
    browser
        .wait_until(
            "the admin's page",
            SHOWN,
            "return document.getElementById('role').textContent === 'admin' \
             && !document.getElementById('admin-panel').hidden;",
        )
        .expect("admin's page");
    browser
        .run("document.getElementById('reload').click();", &[])
        .expect("click");
    let reloaded = browser
        .wait_until(
            "the reload done",
            SHOWN,
            "const t = document.getElementById('admin-result').textContent; \
             return t.startsWith('/reload: ') ? t : null;",
        )
        .expect("answered");
    assert!(
        reloaded
            .as_str()
            .is_some_and(|t| t.starts_with("/reload: 200")),
        "{reloaded}"
    );
    let value: Value = browser
        .wait_until(
            "the reload shown applied",
            SHOWN,
            "const li = document.querySelector('#changes li.ok'); return li ? li.textContent : null;",
        )
        .expect("applied shown");
    println!("applied change shown: {value}");
    drop(browser);
    r.stop();
}

/// A label a query carries in wire form: every character HTML gives a meaning to, as an
/// element that would mark the page if the page ever made HTML of it.
const HOSTILE_LABEL: &[u8] = br#"<img/src=x/onerror=window.pwned=1>"'&"#;

/// The page's requests that repeat on its own schedule (the top lists, the query log, the
/// statistics, the upstreams): at most this many a minute (the page makes 46), besides
/// [`FIRST_REQUESTS`] at its load and on the test's clicks.
const PERIODIC_PER_MINUTE: f64 = 60.0;
const FIRST_REQUESTS: f64 = 20.0;

/// The texts of the elements `selector` finds.
fn texts(browser: &Browser, selector: &str) -> Vec<String> {
    let value = browser
        .run(
            "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent);",
            &[json!(selector)],
        )
        .expect("script");
    serde_json::from_value(value).expect("texts")
}

#[test]
fn hostile_names_literally_a_trace_upstreams_rpz_zones_and_one_stream() {
    let (primary, r, target) = resolver_with_insight();
    let ui = serve_ui(&r);
    let (url, origin) = (&ui.url, &ui.origin);
    let browser = Browser::start(&r.dir.host("browser")).expect("browser");
    let opened = Instant::now();
    browser.open(url).expect("page");

    // The zone kept by transfer: its serial, the transfer that brought it and its expiry.
    let zone = browser
        .wait_until(
            "the RPZ zone shown",
            SHOWN,
            "const row = document.querySelector('#rpz tr[data-zone=\"blocklist.rpz.\"]'); \
             return row ? [...row.children].map((c) => c.textContent) : null;",
        )
        .expect("RPZ zone");
    assert_eq!(zone[1], "1", "the serial: {zone}");
    assert!(
        zone[2]
            .as_str()
            .is_some_and(|t| t.starts_with("axfr success at ")),
        "the transfer: {zone}"
    );
    assert!(
        zone[4].as_str().is_some_and(|t| !t.is_empty() && t != "–"),
        "the expiry: {zone}"
    );
    assert_eq!(
        (&zone[5], &zone[6]),
        (&json!("no"), &json!("yes")),
        "{zone}"
    );

    // A query whose name holds `<`, `>`, `"`, `'` and `&`, sent in wire form: the log and the
    // top names show the name as the API gives it, as text; nothing of it runs.
    let name = dns::wire_name(&[HOSTILE_LABEL, b"ui", b"test"]).expect("a name");
    let answer = dns::query_udp_wire(r.dns(), &name, dns::TYPE_A, DNS_TIMEOUT).expect("answer");
    assert_eq!(answer.rcode, dns::RCODE_NXDOMAIN, "a special-use name");
    let logged = logged_under(&r, ".ui.test.");
    for c in ['<', '>', '"', '\'', '&'] {
        assert!(logged.contains(c), "{c} in {logged}");
    }
    browser
        .wait_until(
            "the name in the query log and the top names",
            SHOWN,
            &format!(
                "const shown = (s) => [...document.querySelectorAll(s)].some((e) => e.textContent === {0}); \
                 return shown('#querylog td.name') && shown('[data-top=\"names\"] td.key') \
                 && shown('[data-top=\"nxdomain\"] td.key');",
                json!(logged)
            ),
        )
        .expect("hostile name shown");
    let ran = browser
        .run(
            "return [window.pwned === undefined, document.querySelectorAll('main img').length];",
            &[],
        )
        .expect("script");
    assert_eq!(ran, json!([true, 0]), "nothing of the name became HTML");
    browser
        .run(
            "document.getElementById('insight-panel').scrollIntoView();",
            &[],
        )
        .expect("scroll");
    println!(
        "screenshot: {}",
        browser.screenshot("query-log").expect("png").display()
    );

    // Queries through the forward target: the upstreams show it with a round-trip time (kresd
    // records from the page's first look on; new names go upstream, a cached one would not).
    let mut asked = 0;
    let within = (2 * SHOWN).saturating_sub(opened.elapsed());
    let rtt = testbed::wait_for("the target shown with an RTT", within, || {
        for _ in 0..4 {
            let name = format!("q{asked}.blocklist.rpz.");
            asked += 1;
            dns::query_udp(r.dns(), &name, dns::TYPE_SOA, DNS_TIMEOUT).expect("answer");
        }
        let shown = browser.run(
            "const c = document.querySelector('#upstreams tr[data-address=\"127.0.0.1\"] td.rtt'); \
             return c ? c.textContent : null;",
            &[],
        )?;
        Ok(shown.as_str().map(str::to_owned))
    })
    .expect("the target never shown with an RTT");
    assert!(rtt.ends_with(" ms"), "{rtt}");
    let forwards = texts(&browser, "#forwards li");
    assert_eq!(
        forwards,
        [format!("forward blocklist.rpz → {target}")],
        "the forward target as configured"
    );

    // The query log filtered: by name, then a filter the API refuses, named.
    browser
        .run(
            "document.getElementById('filter-name').value = 'ui.test'; \
             document.getElementById('filter-button').click();",
            &[],
        )
        .expect("filter");
    browser
        .wait_until(
            "only names under ui.test",
            SHOWN,
            "const names = [...document.querySelectorAll('#querylog td.name')].map((e) => e.textContent); \
             return names.length > 0 && names.every((n) => n.endsWith('.ui.test.'));",
        )
        .expect("filtered");
    browser
        .run(
            "document.getElementById('filter-qtype').value = 'NOT-A-TYPE'; \
             document.getElementById('filter-button').click();",
            &[],
        )
        .expect("filter");
    let refused = browser
        .wait_until(
            "the refused filter",
            SHOWN,
            "return document.getElementById('filter-error').textContent || null;",
        )
        .expect("refusal shown");
    assert!(
        refused.as_str().is_some_and(|t| t.contains("NOT-A-TYPE")),
        "{refused}"
    );

    // The admin's trace, through the page: the answer from the forward target, and kresd's
    // log naming it.
    browser
        .run(
            "document.getElementById('trace-name').value = 'blocklist.rpz.'; \
             document.getElementById('trace-type').value = 'SOA'; \
             document.getElementById('trace-button').click();",
            &[],
        )
        .expect("trace");
    let summary = browser
        .wait_until(
            "the trace shown",
            SHOWN,
            "const t = document.getElementById('trace-summary').textContent; \
             return t && t !== '…' ? t : null;",
        )
        .expect("traced");
    assert!(
        summary
            .as_str()
            .is_some_and(|t| t.starts_with("blocklist.rpz. SOA on kresd0: NOERROR in ")),
        "{summary}"
    );
    let records = texts(&browser, "#trace-answer li");
    assert!(
        records.len() == 1 && records[0].contains("SOA"),
        "{records:?}"
    );
    let log = browser
        .text_of("trace-log")
        .expect("log")
        .unwrap_or_default();
    let port = primary.port();
    assert!(
        log.lines().any(|l| l.contains("querying")
            && (l.contains(&format!("'127.0.0.1#{port}'"))
                || l.contains(&format!("'127.0.0.1#{port:05}'")))),
        "the log names the forward target: {log}"
    );
    println!(
        "screenshot: {}",
        browser.screenshot("trace").expect("png").display()
    );

    // One stream for the whole visit, and the page's own schedule of reads.
    assert_one_stream_and_schedule(&browser, origin, opened);
    let errors = browser.console_errors().expect("console");
    // The refused filter is a 400 the page shows.
    let errors: Vec<&String> = errors
        .iter()
        .filter(|e| !e.contains("/query-log?"))
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    assert_no_sideways_scroll(&browser, "insight");

    drop(browser);
    drop(ui);
    r.stop();
    drop(primary);
}

/// The name of an answer under `suffix` in the query log, once one is there.
fn logged_under(r: &Resolver, suffix: &str) -> String {
    let mut answers = Value::Null;
    testbed::wait_for(&format!("an answer under {suffix} logged"), SHOWN, || {
        answers = serde_json::from_slice(&r.http("GET", "/query-log", b"")?.body)?;
        Ok(answers.as_array().into_iter().flatten().find_map(|a| {
            let name = a["name"].as_str()?;
            name.ends_with(suffix).then(|| name.to_owned())
        }))
    })
    .unwrap_or_else(|e| panic!("{e}: {answers}"))
}

/// The page's requests since `opened`, from the browser's network log: none to another
/// host, one event stream, its periodic reads within its schedule.
fn assert_one_stream_and_schedule(browser: &Browser, origin: &str, opened: Instant) {
    let urls = browser.requested_urls().expect("network log");
    let foreign = foreign(&urls, origin);
    assert!(foreign.is_empty(), "requests to other hosts: {foreign:#?}");
    // The page's own requests, by path (the browser's own pages request chrome:// URLs).
    let paths: Vec<&str> = urls
        .iter()
        .filter_map(|u| u.strip_prefix(origin))
        .map(|u| u.split('?').next().unwrap_or_default())
        .collect();
    let streams = paths.iter().filter(|p| **p == "/events").count();
    assert_eq!(streams, 1, "one event stream: {paths:#?}");
    let periodic = paths
        .iter()
        .filter(|p| {
            ["/metrics/json", "/query-log", "/upstreams"].contains(p) || p.starts_with("/top/")
        })
        .count();
    let minutes = opened.elapsed().as_secs_f64() / 60.0;
    let mut by_path = std::collections::BTreeMap::new();
    for p in &paths {
        *by_path.entry(*p).or_insert(0) += 1;
    }
    println!("the page's requests by path: {by_path:?}");
    println!(
        "the page made {} requests in {minutes:.1} min, {periodic} of them periodic reads",
        paths.len(),
    );
    assert!(
        periodic as f64 <= FIRST_REQUESTS + PERIODIC_PER_MINUTE * minutes,
        "{periodic} periodic reads in {minutes:.2} min: {by_path:?}"
    );
}

/// knotd, the primary of an RPZ zone kept by transfer and the forward target of its subtree
/// (what the trace and the upstreams show); a resolver with the query log on, that zone and
/// that forward; the target's address as configured.
fn resolver_with_insight() -> (KnotPrimary, Resolver, String) {
    let bed = Bed::get().expect("bed");
    let primary = KnotPrimary::start(
        bed,
        PrimarySetup {
            zone: "blocklist.rpz.".into(),
            entries: 10,
            key: KeySetup::None,
            notify: None,
        },
    )
    .expect("knotd");
    let zones = bed.test_dir("ui-insight-zones").expect("dir");
    let (_, zone_file) = zones.join("blocklist.rpz");
    let target = format!("127.0.0.1@{}", primary.port());
    let r = common::start(&Setup::new("ui-insight").extra(&format!(
        "monitoring:\n  query-log:\n    enabled: true\nforward:\n  - subtree: blocklist.rpz\n    \
         servers: ['{target}']\n    options: {{authoritative: false, dnssec: false}}\n\
         local-data:\n  rpz:\n    - file: {}\n      transfer:\n        zone: blocklist.rpz.\n        \
         primaries: ['{target}']\n",
        zone_file.display()
    )))
    .expect("start");
    (primary, r, target)
}
