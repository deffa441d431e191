//! The query log's cache marks: whether each answer came from the cache, which kresd's dnstap
//! stream cannot say (its module fills no field from the request's cache use). A Lua layer at
//! `finish`, loaded at the start of a worker with `monitoring.query-log` on, writes one
//! fixed-size record per answer into a preallocated array and sends the array as one datagram
//! to `<rundir>/query-log-marks.sock` ([`crate::query_log::marks`]) when it is full or at the
//! next tick of a timer: no string is built, no table made per answer, one `send` per batch.
//!
//! kresd never waits for the marks: the socket is non-blocking and a batch that does not fit
//! (a stopped reader) or finds no reader (a manager process being replaced) is dropped, and
//! the socket connected again at the next batch. The manager joins a mark to its answer by
//! the client's address and port and the message ID, as it pairs a query with its answer.

use std::path::Path;

use super::{line, quote_path};
use crate::query_log::marks::RECORD_SIZE;

/// The global function that loads the layer (once; later calls do nothing).
pub const LOAD_FUNCTION: &str = "load_query_log_marks";

/// The kresd module the layer is loaded as.
pub const MODULE: &str = "query_log_marks";

/// Records a worker sends at once: 256 of [`RECORD_SIZE`] bytes, 6 KiB a datagram.
pub const BATCH: usize = 256;

/// Milliseconds between two sends of a batch not yet full.
pub const FLUSH_MS: u32 = 50;

/// The longest socket path a `sockaddr_un` holds, without its terminating zero.
pub const MAX_PATH: usize = 107;

/// The layer, `@NAME@` standing for what [`cache_marks`] fills in. `struct
/// kres_query_log_mark` is a record of [`RECORD_SIZE`] bytes as the manager reads it. The C
/// functions are
/// declared each in its own `pcall` (another module may have declared them already); `send`
/// never blocks (`MSG_DONTWAIT`); the cache use is the request's last query's, as the
/// answer counters read it.
const TEMPLATE: &str = "\
-- monitoring.query-log: whether each answer came from the cache, sent to the manager in
-- batches (kresd's dnstap stream has no field for it)
do
	local ffi = require('ffi')
	local C = ffi.C
	for _, declaration in ipairs({
		'int socket(int, int, int);',
		'int connect(int, const void *, unsigned int);',
		'long send(int, const void *, unsigned long, int);',
		'int close(int);',
	}) do pcall(ffi.cdef, declaration) end
	pcall(ffi.cdef, [[
		struct kres_query_log_mark {
			uint8_t addr[16]; uint16_t port; uint16_t id; uint8_t family; uint8_t cached; uint8_t pad[2];
		};
		struct kres_query_log_sun { unsigned short family; char path[108]; };
	]])
	function @LOAD@()
		if package.loaded[@MODULE_KEY@] ~= nil then return end
		local capacity = @BATCH@
		local batch = ffi.new('struct kres_query_log_mark[?]', capacity)
		local size = ffi.sizeof('struct kres_query_log_mark')
		if size ~= @RECORD_SIZE@ then
			log_warn(ffi.C.LOG_GRP_SYSTEM, 'query log: no cache marks, a record is ' .. size .. ' bytes')
			return
		end
		local sun = ffi.new('struct kres_query_log_sun')
		sun.family = @AF_UNIX@
		ffi.copy(sun.path, @PATH@)
		local n, fd = 0, -1
		local function flush()
			if n == 0 then return end
			if fd < 0 then
				fd = C.socket(@AF_UNIX@, @SOCK_DGRAM@, 0)
				if fd >= 0 and C.connect(fd, sun, ffi.sizeof(sun)) ~= 0 then
					C.close(fd)
					fd = -1
				end
			end
			if fd >= 0 and C.send(fd, batch, n * size, @MSG_DONTWAIT@) < 0 then
				C.close(fd)
				fd = -1
			end
			n = 0
		end
		local function finish(state, req, answer)
			local qsource = req.qsource
			local client = qsource.addr
			if qsource.dst_addr == nil or client == nil or answer == nil or answer.wire == nil then
				return state
			end
			local len = C.kr_inaddr_len(client)
			if len ~= 4 and len ~= 16 then return state end
			local record = batch[n]
			ffi.copy(record.addr, C.kr_inaddr(client), len)
			record.family = len == 4 and 4 or 6
			record.port = C.kr_inaddr_port(client)
			record.id = answer.wire[0] * 256 + answer.wire[1]
			local cached = 0
			local rplan = req.rplan
			local resolved = tonumber(rplan.resolved.len)
			if resolved > 0 then
				local pending = tonumber(rplan.pending.len)
				local last = pending > 0 and rplan.pending.at[pending - 1] or rplan.resolved.at[resolved - 1]
				if last.flags.CACHED then cached = 1 end
			end
			record.cached = cached
			n = n + 1
			if n == capacity then flush() end
			return state
		end
		package.loaded[@MODULE_KEY@] = {layer = {finish = finish}}
		modules.load(@MODULE@)
		event.recurrent(@FLUSH_MS@, flush)
	end
	@LOAD@()
end
";

/// The layer for marks sent to `socket`, loaded at once; nothing when the path does not fit
/// a `sockaddr_un` (the manager could not bind it either).
pub fn cache_marks(out: &mut String, socket: &Path) {
    if socket.as_os_str().len() > MAX_PATH {
        line!(
            out,
            "-- monitoring.query-log: no cache marks, the socket's path is longer than {MAX_PATH} bytes"
        );
        return;
    }
    let fills = [
        ("@LOAD@", LOAD_FUNCTION.to_owned()),
        (
            "@MODULE_KEY@",
            super::quote(&format!("kres_modules.{MODULE}")),
        ),
        ("@MODULE@", super::quote(MODULE)),
        ("@BATCH@", BATCH.to_string()),
        ("@RECORD_SIZE@", RECORD_SIZE.to_string()),
        ("@FLUSH_MS@", FLUSH_MS.to_string()),
        ("@PATH@", quote_path(socket)),
        ("@AF_UNIX@", nix::libc::AF_UNIX.to_string()),
        (
            "@SOCK_DGRAM@",
            (nix::libc::SOCK_DGRAM | nix::libc::SOCK_NONBLOCK | nix::libc::SOCK_CLOEXEC)
                .to_string(),
        ),
        ("@MSG_DONTWAIT@", nix::libc::MSG_DONTWAIT.to_string()),
    ];
    let mut text = TEMPLATE.to_owned();
    for (placeholder, value) in fills {
        text = text.replace(placeholder, &value);
    }
    out.push_str(&text);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled_and_a_long_path_leaves_the_layer_out() {
        let mut out = String::new();
        cache_marks(&mut out, Path::new("/run/kr/query-log-marks.sock"));
        assert!(!out.contains('@'), "{out}");
        assert!(
            out.contains("ffi.copy(sun.path, '/run/kr/query-log-marks.sock')"),
            "{out}"
        );
        assert!(out.contains("event.recurrent(50, flush)"), "{out}");
        let long = format!("/{}/query-log-marks.sock", "d".repeat(100));
        let mut out = String::new();
        cache_marks(&mut out, Path::new(&long));
        assert!(!out.contains("socket("), "{out}");
    }
}
