//! Property: hostile strings (quotes, brackets, `]]`, backslashes, newlines, NUL, UTF-8) placed
//! into the configuration's string and path fields reach Lua unchanged.
//!
//! Many random configurations are rendered with our generator, then one kresd run (its LuaJIT
//! is the real parser) loads every generated file in a sandbox whose globals are recording
//! stubs: each string passed to any call, assigned to any field or put in any table is written
//! to a file. The test then checks, byte for byte, that every hostile value arrived as one
//! whole string. A value that broke out of its literal would either fail to parse or arrive
//! altered.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kres_config::{validate, KresConfig, ValidationContext};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::json;
use testbed::Bed;

/// Configurations per kresd run.
const CASES: usize = 150;

/// Pieces that have a meaning somewhere in Lua, in its long strings or in our quoting.
const HOSTILE: &[&str] = &[
    "'",
    "\"",
    "\\",
    "]]",
    "[[",
    "]=]",
    "[==[",
    "\n",
    "\r",
    "\0",
    "\t",
    "é",
    "💥",
    "--",
    "\\0",
    "\\n",
    "\\'",
    "%s",
    "\x7f",
    "\u{80}",
    "..",
    "')..os.exit(1)..('",
    "\\ddd",
    "\\255",
    "1",
];

fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(proptest::sample::select(HOSTILE), 0..12)
            .prop_map(|parts| parts.concat()),
        proptest::collection::vec(
            prop_oneof![
                proptest::sample::select(HOSTILE).prop_map(str::to_owned),
                "[ -~]{0,3}"
            ],
            0..10
        )
        .prop_map(|parts| parts.concat()),
    ]
}

/// One generated case: the hostile values and where they go.
#[derive(Debug, Clone)]
struct Case {
    hostname: String,
    nsid: String,
    trust_anchor: String,
    prefill_url: String,
    records: String,
    rule_records: String,
    storage: String,
    hosts_file: String,
    rpz_file: String,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (hostile(), hostile(), hostile(), hostile(), hostile()),
        (hostile(), hostile(), hostile(), hostile()),
    )
        .prop_map(
            |(
                (hostname, nsid, trust_anchor, prefill_url, records),
                (rule_records, storage, hosts_file, rpz_file),
            )| Case {
                hostname,
                nsid,
                trust_anchor,
                prefill_url,
                // Empty zone-file text is not rendered at all; keep the checks simple.
                records: format!("x{records}"),
                rule_records: format!("y{rule_records}"),
                // Absolute, so the value is not resolved against a directory.
                storage: format!("/{storage}"),
                hosts_file: format!("/{hosts_file}"),
                rpz_file: format!("/{rpz_file}"),
            },
        )
}

impl Case {
    fn config(&self) -> serde_json::Value {
        json!({
            "hostname": self.hostname,
            "nsid": self.nsid,
            "rundir": "/run/kr",
            "dnssec": {"trust-anchors": [self.trust_anchor]},
            "cache": {
                "storage": self.storage,
                "prefill": [{"origin": ".", "url": self.prefill_url}],
            },
            "local-data": {
                "records": self.records,
                "addresses-files": [self.hosts_file],
                "rules": [{"records": self.rule_records}],
                "rpz": [{"file": self.rpz_file}],
            },
        })
    }

    /// The byte strings each file must pass to Lua whole, taken from the validated model for
    /// paths (which validation may normalise) and from the input for the rest.
    fn expected(&self, cfg: &KresConfig) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        use std::os::unix::ffi::OsStrExt as _;
        let path = |p: &Path| p.as_os_str().as_bytes().to_vec();
        let mut lmdb = b"lmdb://".to_vec();
        lmdb.extend(path(&cfg.cache.storage));
        let hosts = path(&cfg.local_data.addresses_files.as_ref().expect("hosts")[0]);
        let rpz = path(&cfg.local_data.rpz.as_ref().expect("rpz")[0].file);
        let worker = vec![
            self.hostname.clone().into_bytes(),
            // nsid.name(nsid .. worker.id): the stub's worker.id concatenates as nothing.
            self.nsid.clone().into_bytes(),
            self.trust_anchor.clone().into_bytes(),
            self.prefill_url.clone().into_bytes(),
            lmdb.clone(),
        ];
        let policy_loader = vec![
            self.records.clone().into_bytes(),
            self.rule_records.clone().into_bytes(),
            hosts,
            rpz,
            lmdb,
        ];
        (worker, policy_loader)
    }
}

/// Loads each file named in `files.txt` in a sandbox of recording stubs and writes, per file,
/// `F\n` and then every string seen as `<length>:<bytes>\n`.
const HARNESS: &str = r#"
local real_io, real_setfenv, real_loadfile, real_pcall = io, setfenv, loadfile, pcall
local out = assert(real_io.open(HARNESS_OUT, 'wb'))
local seen
local mt = {}
local stub = setmetatable({}, mt)
local function record(v, depth)
	if type(v) == 'string' then
		seen[#seen + 1] = v
	elseif type(v) == 'table' and v ~= stub and (depth or 0) < 10 then
		for k, x in pairs(v) do
			record(k, (depth or 0) + 1)
			record(x, (depth or 0) + 1)
		end
	end
end
mt.__index = function() return stub end
mt.__newindex = function(_, _, v) record(v) end
mt.__call = function(_, ...)
	for i = 1, select('#', ...) do record((select(i, ...))) end
	return stub
end
mt.__concat = function(a, b)
	return (type(a) == 'string' and a or '') .. (type(b) == 'string' and b or '')
end
for _, op in ipairs({'__add', '__sub', '__mul', '__div', '__mod', '__pow', '__unm'}) do
	mt[op] = function() return 0 end
end
for path in real_io.lines(HARNESS_LIST) do
	seen = {}
	local chunk, err = real_loadfile(path)
	out:write('F\n')
	if not chunk then
		out:write('E', (tostring(err):gsub('\n', ' ')), '\n')
	else
		local env = setmetatable({}, mt)
		real_setfenv(chunk, env)
		local ok, perr = real_pcall(chunk)
		if not ok then out:write('E', (tostring(perr):gsub('\n', ' ')), '\n') end
		for _, s in ipairs(seen) do out:write(#s, ':', s, '\n') end
	end
end
out:close()
quit()
"#;

/// What the harness saw in one file.
#[derive(Debug, Default)]
struct Seen {
    error: Option<String>,
    strings: Vec<Vec<u8>>,
}

fn parse_seen(mut bytes: &[u8]) -> Vec<Seen> {
    let mut files: Vec<Seen> = Vec::new();
    while !bytes.is_empty() {
        if let Some(rest) = bytes.strip_prefix(b"F\n") {
            files.push(Seen::default());
            bytes = rest;
        } else if let Some(rest) = bytes.strip_prefix(b"E") {
            let end = rest.iter().position(|&b| b == b'\n').expect("error line");
            files.last_mut().expect("file").error =
                Some(String::from_utf8_lossy(&rest[..end]).into_owned());
            bytes = &rest[end + 1..];
        } else {
            let colon = bytes.iter().position(|&b| b == b':').expect("length");
            let len: usize = std::str::from_utf8(&bytes[..colon])
                .expect("digits")
                .parse()
                .expect("length");
            let start = colon + 1;
            files
                .last_mut()
                .expect("file")
                .strings
                .push(bytes[start..start + len].to_vec());
            bytes = &bytes[start + len + 1..];
        }
    }
    files
}

#[test]
fn hostile_strings_reach_lua_unchanged() {
    let bed = Bed::get().expect("test bed");
    let dir = bed.test_dir("lua-escaping").expect("dir");
    let ctx = ValidationContext {
        resolve_root: PathBuf::from("/"),
        checks: kres_config::PathChecks::Lenient,
        logtarget_arg: Default::default(),
    };
    let mut runner = TestRunner::deterministic();
    let strategy = case();
    let mut cases = Vec::new();
    let mut list = String::new();
    while cases.len() < CASES {
        let case = strategy.new_tree(&mut runner).expect("value").current();
        let cfg = match validate(&case.config(), &ctx) {
            Ok(cfg) => cfg,
            Err(e) => panic!("hostile strings must be accepted: {case:?}\n{e}"),
        };
        let n = cases.len();
        for (kind, text) in [
            ("worker", kres_lua::render_worker(&cfg)),
            ("policy-loader", kres_lua::render_policy_loader(&cfg)),
        ] {
            let name = format!("{n}-{kind}.lua");
            std::fs::write(dir.host(&name), text).expect("write Lua");
            list.push_str(&format!("{}\n", dir.bed(&name).display()));
        }
        cases.push((case, cfg));
    }
    testbed::write(&dir.host("files.txt"), &list).expect("list");
    let harness = format!(
        "HARNESS_LIST = {}\nHARNESS_OUT = {}\n{HARNESS}",
        kres_lua::quote(&dir.bed("files.txt").display().to_string()),
        kres_lua::quote(&dir.bed("seen.bin").display().to_string()),
    );
    testbed::write(&dir.host("harness.lua"), &harness).expect("harness");

    let mut kresd = bed
        .launch_installed(
            Path::new("/bin/sh"),
            &[
                OsStr::new("-c"),
                OsStr::new(&format!(
                    "cd {} && exec kresd -n -c harness.lua -c -",
                    dir.bed("").display()
                )),
            ],
            &[],
        )
        .expect("launch kresd");
    let status = kresd.wait(Duration::from_secs(120)).expect("kresd exits");
    kresd.output.wait_eof(Duration::from_secs(5));
    assert!(status.success(), "kresd: {}", kresd.output.text());

    let seen = parse_seen(&std::fs::read(dir.host("seen.bin")).expect("harness output"));
    assert_eq!(seen.len(), 2 * CASES, "one record per generated file");
    for (i, (case, cfg)) in cases.iter().enumerate() {
        let (worker, policy_loader) = case.expected(cfg);
        for (file, expected) in [(&seen[2 * i], worker), (&seen[2 * i + 1], policy_loader)] {
            assert!(file.error.is_none(), "{case:?}: {:?}", file.error);
            for value in expected {
                assert!(
                    file.strings.contains(&value),
                    "{case:?}: {:?} did not reach Lua whole; seen: {:?}",
                    String::from_utf8_lossy(&value),
                    file.strings
                        .iter()
                        .map(|s| String::from_utf8_lossy(s))
                        .collect::<Vec<_>>()
                );
            }
        }
    }
}
