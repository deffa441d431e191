-- monitoring.query-log: every answer as a record, sent to the manager in batches; written
-- from the answer counters' layer (lua::counts), which reads the rcode and cache use for both
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
	local dropped, loaded = 0, false
	function @DROPPED@() return dropped end
	function @LOAD@()
		if loaded then return end
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
		local band = bit.band
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
		local function record(req, query, answer, rcode, cached)
			local qsource = req.qsource
			local client = qsource.addr
			local wire = answer.wire
			if client == nil or wire == nil or answer.size < 12 then return end
			local len = C.kr_inaddr_len(client)
			if len ~= 4 and len ~= 16 then return end
			local name_len = query.qname_size
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
			r.ede = answer.opt_rr ~= nil and req.extended_error.info_code or -1
			r.rcode = rcode
			r.answers = wire[6] * 256 + wire[7]
			r.cached = cached and 1 or 0
			C.gettimeofday(now, nil)
			local now_us = tonumber(now.tv_sec) * 1000000 + tonumber(now.tv_usec)
			local initial = req.rplan.initial
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
		end
		loaded = true
		event.recurrent(@FLUSH_MS@, flush)
		@ATTACH@(record)
	end
	@LOAD@()
end
