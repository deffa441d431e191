//! Workers that misbehave towards the root, on real kresd: custom Lua makes every worker send
//! its notify socket a `STATUS=` of 4 KiB of control bytes. Each status is kept as one bounded,
//! printable line; the process table of all of them still reaches the manager process, so
//! configuration changes are applied and the API answers throughout, and the manager process
//! is never replaced.

mod common;

use std::time::Instant;

use common::{Setup, START_TIMEOUT};
use serde_json::{json, Value};

const WORKERS: usize = 12;

/// Lua that sends `STATUS=` and 4,080 control bytes (every one from 0x01 to 0x1f but the
/// newline) to `$NOTIFY_SOCKET`, through LuaJIT's FFI: what any worker's Lua can do.
const HOSTILE_STATUS: &str = r#"local ffi = require('ffi')
pcall(ffi.cdef, [[
struct hostile_sockaddr_un { unsigned short sun_family; char sun_path[108]; };
int socket(int domain, int type, int protocol);
long sendto(int fd, const void *buf, size_t len, int flags, const void *addr, unsigned int addrlen);
int close(int fd);
]])
local path = os.getenv('NOTIFY_SOCKET')
if path then
  local bytes = {}
  for i = 1, 4080 do
    local b = i % 31 + 1
    if b == 10 then b = 11 end
    bytes[i] = string.char(b)
  end
  local msg = 'STATUS=' .. table.concat(bytes)
  local addr = ffi.new('struct hostile_sockaddr_un')
  addr.sun_family = 1
  ffi.copy(addr.sun_path, path)
  local fd = ffi.C.socket(1, 2, 0)
  ffi.C.sendto(fd, msg, #msg, 0, addr, ffi.sizeof(addr))
  ffi.C.close(fd)
end
"#;

fn lua_section(extra: &str) -> String {
    let mut yaml = String::from("lua:\n  script: |\n");
    for line in HOSTILE_STATUS.lines().chain(extra.lines()) {
        yaml.push_str("    ");
        yaml.push_str(line);
        yaml.push('\n');
    }
    yaml
}

/// The workers in `GET /processes`.
fn workers(r: &common::Resolver) -> Vec<Value> {
    let resp = r
        .http("GET", "/processes/kresd", b"")
        .expect("GET /processes");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let table: Value = serde_json::from_slice(&resp.body).expect("JSON");
    table.as_array().cloned().unwrap_or_default()
}

/// Wait until every worker runs and shows its status.
fn every_status_shown(r: &common::Resolver) -> Vec<Value> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let table = workers(r);
        let shown = table
            .iter()
            .filter(|p| p["state"] == "running" && p["status_text"].is_string())
            .count();
        if shown == WORKERS {
            return table;
        }
        assert!(
            Instant::now() < deadline,
            "{shown} of {WORKERS} statuses shown: {table:#?}\n{}",
            r.launched.output.text()
        );
        let _ = r
            .launched
            .output
            .wait_for("never logged", std::time::Duration::from_millis(200));
    }
}

#[test]
fn statuses_of_control_bytes_disturb_neither_the_link_nor_the_api() {
    let setup = Setup::new("hostile-statuses")
        .workers(WORKERS as u32)
        .extra(&lua_section(""));
    let r = common::start(&setup).expect("start");
    for p in every_status_shown(&r) {
        let status = p["status_text"].as_str().unwrap_or_default();
        assert!(status.len() <= 512, "{} bytes", status.len());
        // Control bytes are replaced, a tab is a space.
        assert!(
            !status.is_empty()
                && status
                    .chars()
                    .all(|c| c == char::REPLACEMENT_CHARACTER || c == ' '),
            "{status:?}"
        );
    }
    // A change that restarts every worker (each sends its status again) is applied.
    let before = r.pids_named("kresd");
    let started = Instant::now();
    let resp = r.put_json(
        "/lua",
        json!({"script": format!("{HOSTILE_STATUS}-- changed\n")}),
    );
    assert!(resp.status / 100 == 2, "{}: {}", resp.status, resp.text());
    eprintln!(
        "a rolling restart of {WORKERS} workers sending hostile statuses answered {} in {:?}",
        resp.status,
        started.elapsed()
    );
    let after = every_status_shown(&r);
    let pids: Vec<i64> = after.iter().filter_map(|p| p["pid"].as_i64()).collect();
    assert!(
        pids.iter().all(|pid| !before.contains(&(*pid as i32))),
        "every worker restarted: {before:?} → {pids:?}"
    );
    // The manager process served throughout: never replaced.
    let log = r.launched.output.text();
    assert!(
        !log.contains("replacing it") && !log.contains("the manager process ended"),
        "{log}"
    );
    r.stop();
}
