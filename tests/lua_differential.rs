//! Differential check of the Lua generation against upstream's: for every upstream reference
//! configuration and for section-rich configurations of ours (`tests/data/lua/`), upstream's
//! `kresctl convert` (run in the test bed) and ours render both Lua files, and real kresd loads
//! each of them. Ours must load wherever upstream's does, and our section-rich files must load
//! everywhere (upstream cannot even render `lua.script-file`).
//!
//! Beyond loading, both files run in a sandbox of recording stubs (LuaJIT in kresd), and the
//! sequences of calls and assignments they make, with every argument, must be equal, apart
//! from the control-socket block where we differ on purpose.
//!
//! Each kresd runs in its own network namespace with only the loopback up, so listening on
//! privileged or fixed ports cannot collide with anything on the machine.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use testbed::{os, Bed, TestDir};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Which Lua file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    PolicyLoader,
    Worker,
}

impl Kind {
    fn arg(self) -> &'static str {
        match self {
            Kind::PolicyLoader => "policy-loader",
            Kind::Worker => "worker",
        }
    }
}

/// Whose generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Generator {
    Upstream,
    Ours,
}

impl Generator {
    fn name(self) -> &'static str {
        match self {
            Generator::Upstream => "upstream",
            Generator::Ours => "ours",
        }
    }
}

/// The outcome of rendering and loading one file.
#[derive(Debug)]
enum Outcome {
    /// The generator refused or failed (with its error output).
    NotRendered(String),
    /// kresd failed to load the file (with its output).
    LoadFailed(String),
    Loaded,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::NotRendered(e) => write!(f, "not rendered:\n{e}"),
            Outcome::LoadFailed(out) => write!(f, "kresd failed to load it:\n{out}"),
            Outcome::Loaded => f.write_str("loaded"),
        }
    }
}

/// Brings the loopback up in a fresh network namespace (the rootfs has no `ip`).
const LOOPBACK_UP: &str = "python3 -c 'import socket,fcntl,struct; fcntl.ioctl(socket.socket(), 0x8914, struct.pack(\"16sH\", b\"lo\", 0x41))'";

/// Run a shell script inside the bed in a private network namespace; returns success and the
/// output (stdout is folded into stderr, which the bed collects).
fn run_netns(bed: &Bed, script: &str) -> (bool, String) {
    let full = format!("exec 1>&2; {LOOPBACK_UP} && {script}");
    let mut launched = bed
        .launch_installed(
            Path::new("/usr/bin/unshare"),
            &[
                OsStr::new("--net"),
                OsStr::new("--"),
                OsStr::new("sh"),
                OsStr::new("-c"),
                OsStr::new(&full),
            ],
            &[],
        )
        .expect("launch in the bed");
    let status = launched.wait(RUN_TIMEOUT).expect("finishes in time");
    launched.output.wait_eof(Duration::from_secs(5));
    (status.success(), launched.output.text())
}

/// Render `kind` for `configs` (bed paths) with `generator` into `out` (a bed path).
fn render(
    bed: &Bed,
    generator: Generator,
    kind: Kind,
    configs: &[PathBuf],
    out: &Path,
) -> Result<(), String> {
    let mut args: Vec<std::ffi::OsString> = vec![
        os("convert"),
        os("--type"),
        os(kind.arg()),
        os("-o"),
        os(out),
    ];
    args.extend(configs.iter().map(os));
    match generator {
        Generator::Upstream => {
            let args: Vec<&str> = args.iter().map(|a| a.to_str().expect("utf-8")).collect();
            let output = bed
                .run_installed("/usr/bin/kresctl", &args)
                .expect("run upstream kresctl");
            if output.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&output.stderr).into_owned())
            }
        }
        Generator::Ours => {
            let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
            let mut launched = bed
                .launch(Path::new(common::KRESCTL), &args, &[])
                .expect("launch our kresctl");
            let status = launched.wait(RUN_TIMEOUT).expect("kresctl finishes");
            launched.output.wait_eof(Duration::from_secs(5));
            if status.success() {
                Ok(())
            } else {
                Err(launched.output.text())
            }
        }
    }
}

/// Render both files with one generator and load them in kresd, the policy-loader first (it
/// builds the rules DB the worker opens), each generator in its own working directory.
fn render_and_load(
    bed: &Bed,
    dir: &TestDir,
    generator: Generator,
    configs: &[PathBuf],
) -> [(Kind, Outcome); 2] {
    let wd = format!("wd-{}", generator.name());
    std::fs::create_dir_all(dir.host(&wd)).expect("working directory");
    let quit = dir.bed("quit.lua");
    [Kind::PolicyLoader, Kind::Worker].map(|kind| {
        let lua = dir.bed(&format!("{}-{}.lua", generator.name(), kind.arg()));
        if let Err(e) = render(bed, generator, kind, configs, &lua) {
            return (kind, Outcome::NotRendered(e));
        }
        let extra = match kind {
            Kind::PolicyLoader => "-c -".to_owned(),
            Kind::Worker => format!("-c {}", quit.display()),
        };
        let script = format!(
            "cd {} && SYSTEMD_INSTANCE=0 exec kresd -n -c {} {extra}",
            dir.bed(&wd).display(),
            lua.display()
        );
        let (ok, output) = run_netns(bed, &script);
        let outcome = if ok {
            Outcome::Loaded
        } else {
            Outcome::LoadFailed(output)
        };
        (kind, outcome)
    })
}

/// Copy a case into a fresh bed directory, with the files it refers to and an overlay that
/// points rundir and cache into the directory. Returns the config paths as the bed sees them.
fn prepare(bed: &Bed, name: &str, config: &Path) -> (TestDir, Vec<PathBuf>) {
    let dir = bed.test_dir(name).expect("test dir");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/lua");
    for aux in [
        "hosts",
        "blocklist.rpz",
        "second-blocklist.rpz",
        "worker.lua",
        "policy.lua",
    ] {
        std::fs::copy(data.join(aux), dir.host(aux)).expect("copy auxiliary file");
    }
    std::fs::copy(config, dir.host("config.yaml")).expect("copy config");
    std::fs::create_dir_all(dir.host("run")).expect("rundir");
    std::fs::create_dir_all(dir.host("cache")).expect("cache dir");
    testbed::write(
        &dir.host("overlay.yaml"),
        &format!(
            "rundir: {}\ncache:\n  storage: {}\n  size-max: 10M\nmanagement:\n  unix-socket: {}\n",
            dir.bed("run").display(),
            dir.bed("cache").display(),
            dir.bed("run/kres-api.sock").display()
        ),
    )
    .expect("overlay");
    testbed::write(&dir.host("quit.lua"), "quit()\n").expect("quit.lua");
    let configs = vec![dir.bed("config.yaml"), dir.bed("overlay.yaml")];
    (dir, configs)
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// Runs one case; returns a description of every violation.
fn check(bed: &Bed, config: &Path, ours_must_load: bool) -> (Vec<String>, usize) {
    let name = config.file_stem().and_then(OsStr::to_str).unwrap_or("case");
    let (dir, configs) = prepare(bed, name, config);
    let upstream = render_and_load(bed, &dir, Generator::Upstream, &configs);
    let ours = render_and_load(bed, &dir, Generator::Ours, &configs);
    let mut violations = Vec::new();
    let mut upstream_loaded = 0;
    for ((kind, up), (_, our)) in upstream.iter().zip(ours.iter()) {
        let up_loaded = matches!(up, Outcome::Loaded);
        if up_loaded {
            upstream_loaded += 1;
        }
        if (up_loaded || ours_must_load) && !matches!(our, Outcome::Loaded) {
            violations.push(format!(
                "{name} {kind:?}: upstream {up}\nours {our}\nour Lua:\n{}",
                std::fs::read_to_string(dir.host(&format!("ours-{}.lua", kind.arg())))
                    .unwrap_or_default()
            ));
        }
        if !matches!(up, Outcome::NotRendered(_)) && !matches!(our, Outcome::NotRendered(_)) {
            violations.extend(compare_traces(bed, &dir, name, *kind));
        }
    }
    (violations, upstream_loaded)
}

/// Runs a generated file in a sandbox whose globals are recording stubs and writes one line per
/// effect, in order: every call (`path(args)`) and every assignment (`path=value`), with tables
/// serialised with sorted keys and arithmetic on stubs kept symbolic. Two files with the same
/// trace make the same calls with the same values in the same order.
const TRACE_HARNESS: &str = r#"
local out = assert(io.open(TRACE_OUT, 'wb'))
local mt = {}
local function stub(path) return setmetatable({ [mt] = path }, mt) end
local function ser(v, depth)
	depth = depth or 0
	if type(v) == 'string' then return string.format('%q', v) end
	if type(v) ~= 'table' then return type(v) == 'function' and 'function' or tostring(v) end
	if rawget(v, mt) then return '<' .. rawget(v, mt) .. '>' end
	if depth > 8 then return '{...}' end
	local items = {}
	for k, x in pairs(v) do items[#items + 1] = '[' .. ser(k, depth + 1) .. ']=' .. ser(x, depth + 1) end
	table.sort(items)
	return '{' .. table.concat(items, ',') .. '}'
end
local function emit(line) out:write((line:gsub('\n', '\\n')), '\n') end
mt.__index = function(t, k) return stub(rawget(t, mt) .. '.' .. tostring(k)) end
mt.__newindex = function(t, k, v)
	if k == 'input_str' and type(v) == 'string' then
		-- Upstream's long string: `]]` escaped as `\]\]`, a newline added.
		v = v:gsub('\\%]\\%]', ']]'):gsub('\n+$', '')
	end
	emit(rawget(t, mt) .. '.' .. tostring(k) .. '=' .. ser(v))
end
mt.__call = function(t, ...)
	local args = {}
	for i = 1, select('#', ...) do args[i] = ser((select(i, ...))) end
	emit(rawget(t, mt) .. '(' .. table.concat(args, ',') .. ')')
	return stub(rawget(t, mt) .. '()')
end
mt.__concat = function(a, b)
	local function s(x) return type(x) == 'table' and ser(x) or tostring(x) end
	return s(a) .. s(b)
end
for _, op in ipairs({'__add', '__sub', '__mul', '__div', '__mod', '__pow'}) do
	mt[op] = function(a, b) return stub('(' .. ser(a) .. op .. ser(b) .. ')') end
end
mt.__unm = function(a) return stub('-' .. ser(a)) end
local globals = setmetatable({}, {
	__index = function(_, k) return stub(k) end,
	__newindex = function(_, k, v) emit(k .. '=' .. ser(v)) end,
})
local chunk = assert(loadfile(TRACE_IN))
setfenv(chunk, globals)
chunk()
out:close()
quit()
"#;

/// Effects of the control-socket and statistics block, where we differ on purpose: the
/// configured rundir instead of the working directory, no warning-level log of the path, the
/// block kept with `lua.script-only`, and the answer counters of the labelled metrics and the
/// upstreams (three functions defined; with `monitoring.metrics: always` the loading one called, as `stats` is
/// loaded: everything else they do happens inside those calls, which the stubs do not run).
const CONTROL_SOCKET_EFFECTS: &[&str] = &[
    "/control/",
    "\"path = \"",
    "require(\"ffi\")",
    "os.getenv(\"SYSTEMD_INSTANCE\")",
    "collect_lazy_statistics=function",
    "collect_statistics=function",
    "collect_labelled_statistics=function",
    "attach_query_log=function",
    "load_answer_counters=function",
    "load_answer_counters()",
];

/// The effects of one generated file (see [`TRACE_HARNESS`]), without
/// [`CONTROL_SOCKET_EFFECTS`].
fn trace(bed: &Bed, dir: &TestDir, lua: &str) -> Result<Vec<String>, String> {
    let harness = format!(
        "TRACE_IN = '{}'\nTRACE_OUT = '{}'\n{TRACE_HARNESS}",
        dir.bed(lua).display(),
        dir.bed(&format!("{lua}.trace")).display()
    );
    let harness_name = format!("{lua}.harness");
    testbed::write(&dir.host(&harness_name), &harness).expect("harness");
    // Work in the test's own directory: kresd keeps files there (its default `defer`), and
    // parallel runs must not share them.
    let wd = format!("{lua}.wd");
    std::fs::create_dir_all(dir.host(&wd)).expect("working directory");
    let (ok, output) = run_netns(
        bed,
        &format!(
            "cd {} && exec kresd -n -c {} -c -",
            dir.bed(&wd).display(),
            dir.bed(&harness_name).display()
        ),
    );
    if !ok {
        return Err(output);
    }
    let text =
        std::fs::read_to_string(dir.host(&format!("{lua}.trace"))).map_err(|e| e.to_string())?;
    Ok(text
        .lines()
        .filter(|l| !CONTROL_SOCKET_EFFECTS.iter().any(|e| l.contains(e)))
        // Upstream's control-socket block declares `local ffi` at the top level, so later code
        // sees that local instead of the global; both are the same module in kresd.
        .map(|l| l.replace("require().C", "ffi.C"))
        .collect())
}

/// Upstream's and our file of `kind` must have the same trace.
fn compare_traces(bed: &Bed, dir: &TestDir, name: &str, kind: Kind) -> Option<String> {
    let up = trace(bed, dir, &format!("upstream-{}.lua", kind.arg()));
    let ours = trace(bed, dir, &format!("ours-{}.lua", kind.arg()));
    match (up, ours) {
        (Ok(up), Ok(ours)) if up == ours => None,
        (Ok(up), Ok(ours)) => {
            let only_up: Vec<&String> = up.iter().filter(|l| !ours.contains(l)).collect();
            let only_ours: Vec<&String> = ours.iter().filter(|l| !up.contains(l)).collect();
            Some(format!(
                "{name} {kind:?}: the traces differ\nonly upstream: {only_up:#?}\nonly ours: {only_ours:#?}\n(order or multiplicity differs if both are empty)"
            ))
        }
        (up, ours) => Some(format!(
            "{name} {kind:?}: tracing failed: upstream {:?}, ours {:?}",
            up.err(),
            ours.err()
        )),
    }
}

/// [`check`] every config, the cases in parallel (most of the time is upstream's Python start-up).
fn check_all(bed: &Bed, configs: &[PathBuf], ours_must_load: bool) -> Vec<(Vec<String>, usize)> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = configs
            .iter()
            .map(|config| scope.spawn(move || check(bed, config, ours_must_load)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("case thread"))
            .collect()
    })
}

#[test]
fn ours_loads_wherever_upstreams_loads_on_the_reference_configs() {
    let bed = Bed::get().expect("test bed");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference-configs");
    let results = check_all(bed, &yaml_files(&dir), false);
    let upstream_loaded: usize = results.iter().map(|(_, n)| n).sum();
    let violations: Vec<String> = results.into_iter().flat_map(|(v, _)| v).collect();
    assert!(violations.is_empty(), "{}", violations.join("\n\n"));
    // Not vacuous: upstream's files load for most reference configs.
    assert!(
        upstream_loaded >= 12,
        "only {upstream_loaded} upstream files loaded"
    );
}

#[test]
fn section_rich_configs_load_in_kresd_and_make_upstreams_calls() {
    let bed = Bed::get().expect("test bed");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/lua");
    let violations: Vec<String> = check_all(bed, &yaml_files(&dir), true)
        .into_iter()
        .flat_map(|(v, _)| v)
        .collect();
    assert!(violations.is_empty(), "{}", violations.join("\n\n"));
}

#[test]
fn sections_needing_files_or_modules_make_the_same_calls() {
    let bed = Bed::get().expect("test bed");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/lua/needs-files");
    let violations: Vec<String> = check_all(bed, &yaml_files(&dir), false)
        .into_iter()
        .flat_map(|(v, _)| v)
        .collect();
    assert!(violations.is_empty(), "{}", violations.join("\n\n"));
}
