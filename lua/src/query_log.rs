//! The query log's layer in every worker (`monitoring.query-log` on): at `finish`, one
//! compact binary record per answer to a client (`query_log::records` reads them), written
//! into a preallocated buffer and sent as one datagram to `<rundir>/query-log.sock` when the
//! buffer is full or at the next tick of a [`FLUSH_MS`] timer: no string is built, no table
//! made per answer, one `send` per batch. Everything the record holds is read from kresd's
//! structures as `lua::counts` reads them (the client from `qsource`, the name in wire form
//! from the query, the rcode and answer count from the answer's header and OPT record, the
//! cache use from the request's last query, the start from its first).
//!
//! kresd never waits for the log: the socket is non-blocking, and a batch that does not fit
//! (a slow or stopped reader) or finds no reader (a manager process being replaced) is
//! dropped, its records counted in [`DROPPED_FUNCTION`]'s count (read with the answer
//! counters, `lua::counts`, and told in every batch), and the socket connected again at the
//! next batch. Nothing is queued beyond the one buffer.

use std::path::Path;

use super::{line, quote, quote_path};
pub use kres_wire::query_log_format::DROPPED_FUNCTION;
use kres_wire::query_log_format::{BATCH_HEADER, MAGIC, MAX_DATAGRAM, RECORD_HEADER};

/// The global function that loads the layer (once; later calls do nothing).
pub const LOAD_FUNCTION: &str = "load_query_log";

/// The kresd module the layer is loaded as.
pub const MODULE: &str = "query_log";

/// Milliseconds between two sends of a batch not yet full: an answer reaches the manager
/// within this (and `kresctl querylog --follow` within twice this).
pub const FLUSH_MS: u32 = 50;

/// The longest socket path a `sockaddr_un` holds, without its terminating zero.
pub const MAX_PATH: usize = 107;

/// The layer, `@NAME@` standing for what [`query_log`] fills in. `struct
/// kres_query_log_batch` and `struct kres_query_log_record` are laid out as the manager reads
/// them (`records`; checked by size at load). The C functions are declared each in its own
/// `pcall` (another module may have declared them already); `send` never blocks
/// (`MSG_DONTWAIT`). A record is written only when the largest one fits after it (a name is
/// at most 255 bytes); the buffer is sent first otherwise.
const TEMPLATE: &str = "\
-- monitoring.query-log: every answer as a record, sent to the manager in batches
do
	local ffi = require('ffi')
	local bit = require('bit')
	local C = ffi.C
	for _, declaration in ipairs({
		'int socket(int, int, int);',
		'int connect(int, const void *, unsigned int);',
		'long send(int, const void *, unsigned long, int);',
		'int close(int);',
	}) do pcall(ffi.cdef, declaration) end
	pcall(ffi.cdef, [[
		struct kres_query_log_batch { uint32_t magic; uint32_t worker; uint32_t records; uint32_t pad; uint64_t dropped; };
		struct kres_query_log_record {
			uint64_t start; uint32_t latency; uint16_t port; uint16_t qtype; uint16_t rcode; uint16_t answers;
			int32_t ede; uint8_t addr[16]; uint8_t family; uint8_t transport; uint8_t cached; uint8_t name_len; uint8_t pad[4];
		};
		struct kres_query_log_sun { unsigned short family; char path[108]; };
	]])
	local dropped = 0
	function @DROPPED@() return dropped end
	function @LOAD@()
		if package.loaded[@MODULE_KEY@] ~= nil then return end
		local size = ffi.sizeof('struct kres_query_log_record')
		if ffi.sizeof('struct kres_query_log_batch') ~= @BATCH_HEADER@ or size ~= @RECORD_HEADER@ then
			log_warn(C.LOG_GRP_SYSTEM, 'query log unavailable: a record is ' .. size .. ' bytes')
			return
		end
		local capacity = @MAX_DATAGRAM@
		local buf = ffi.new('uint8_t[?]', capacity)
		local header = ffi.cast('struct kres_query_log_batch *', buf)
		header.magic = @MAGIC@
		header.worker = tonumber(os.getenv('SYSTEMD_INSTANCE') or '') or 0
		local record_t = ffi.typeof('struct kres_query_log_record *')
		local last = capacity - size - 263
		local band, rshift = bit.band, bit.rshift
		local sun = ffi.new('struct kres_query_log_sun')
		sun.family = @AF_UNIX@
		ffi.copy(sun.path, @PATH@)
		local now = ffi.new('struct timeval')
		local pos, n, fd = @BATCH_HEADER@, 0, -1
		local function flush()
			if n == 0 then return end
			header.records = n
			header.dropped = dropped
			if fd < 0 then
				fd = C.socket(@AF_UNIX@, @SOCK_DGRAM@, 0)
				if fd >= 0 and C.connect(fd, sun, ffi.sizeof(sun)) ~= 0 then
					C.close(fd)
					fd = -1
				end
			end
			if fd < 0 or C.send(fd, buf, pos, @MSG_DONTWAIT@) < 0 then
				dropped = dropped + n
				if fd >= 0 then
					C.close(fd)
					fd = -1
				end
			end
			pos, n = @BATCH_HEADER@, 0
		end
		local function finish(state, req, answer)
			local qsource = req.qsource
			local client, query = qsource.addr, qsource.packet
			if qsource.dst_addr == nil or client == nil or query == nil or answer == nil then
				return state
			end
			local name_len = query.qname_size
			local wire = answer.wire
			if name_len == 0 or wire == nil or answer.size < 12 then return state end
			local len = C.kr_inaddr_len(client)
			if len ~= 4 and len ~= 16 then return state end
			if pos > last then flush() end
			local r = ffi.cast(record_t, buf + pos)
			ffi.copy(r.addr, C.kr_inaddr(client), len)
			r.family = len == 4 and 4 or 6
			r.port = C.kr_inaddr_port(client)
			local flags = qsource.flags
			r.transport = flags.http and 4 or flags.quic and 7 or flags.tls and 3 or flags.tcp and 2 or 1
			local q = query.wire + 12
			r.qtype = q[name_len] * 256 + q[name_len + 1]
			ffi.copy(buf + pos + size, q, name_len)
			r.name_len = name_len
			local rcode = band(wire[3], 15)
			local opt = answer.opt_rr
			if opt ~= nil then
				rcode = rshift(opt._ttl, 24) * 16 + rcode
				r.ede = req.extended_error.info_code
			else
				r.ede = -1
			end
			r.rcode = rcode
			r.answers = wire[6] * 256 + wire[7]
			local cached = 0
			local rplan = req.rplan
			local resolved = tonumber(rplan.resolved.len)
			if resolved > 0 then
				local pending = tonumber(rplan.pending.len)
				local last_query = pending > 0 and rplan.pending.at[pending - 1] or rplan.resolved.at[resolved - 1]
				if last_query.flags.CACHED then cached = 1 end
			end
			r.cached = cached
			C.gettimeofday(now, nil)
			local now_us = tonumber(now.tv_sec) * 1000000 + tonumber(now.tv_usec)
			local initial = rplan.initial
			if initial ~= nil then
				local ts = initial.timestamp
				local start = tonumber(ts.tv_sec) * 1000000 + tonumber(ts.tv_usec)
				local latency = now_us - start
				if latency < 0 then latency = 0 elseif latency > 4294967294 then latency = 4294967294 end
				r.start = start
				r.latency = latency
			else
				r.start = now_us
				r.latency = 4294967295
			end
			pos = pos + band(size + name_len + 7, -8)
			n = n + 1
			return state
		end
		package.loaded[@MODULE_KEY@] = {layer = {finish = finish}}
		modules.load(@MODULE@)
		event.recurrent(@FLUSH_MS@, flush)
	end
	@LOAD@()
end
";

/// The layer sending to `socket`, loaded at once; nothing but a comment when the path does
/// not fit a `sockaddr_un` (the manager could not bind it either).
pub fn query_log(out: &mut String, socket: &Path) {
    if socket.as_os_str().len() > MAX_PATH {
        line!(
            out,
            "-- monitoring.query-log: unavailable, the socket's path is longer than {MAX_PATH} bytes"
        );
        return;
    }
    let fills = [
        ("@LOAD@", LOAD_FUNCTION.to_owned()),
        ("@DROPPED@", DROPPED_FUNCTION.to_owned()),
        ("@MODULE_KEY@", quote(&format!("kres_modules.{MODULE}"))),
        ("@MODULE@", quote(MODULE)),
        ("@BATCH_HEADER@", BATCH_HEADER.to_string()),
        ("@RECORD_HEADER@", RECORD_HEADER.to_string()),
        ("@MAX_DATAGRAM@", MAX_DATAGRAM.to_string()),
        ("@MAGIC@", MAGIC.to_string()),
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
        query_log(&mut out, Path::new("/run/kr/it's.sock"));
        assert!(!out.contains('@'), "{out}");
        assert!(
            out.contains(r"ffi.copy(sun.path, '/run/kr/it\'s.sock')"),
            "{out}"
        );
        assert!(out.contains("event.recurrent(50, flush)"), "{out}");
        assert!(out.contains("header.magic = 827085131"), "{out}");
        let long = format!("/{}/query-log.sock", "d".repeat(100));
        let mut out = String::new();
        query_log(&mut out, Path::new(&long));
        assert!(!out.contains("socket("), "{out}");
    }
}
