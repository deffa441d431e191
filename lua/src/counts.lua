-- counts kresd's statistics lack, for the labelled metrics: external queries by qtype,
-- answers by rcode, cache hits and misses, DNSSEC outcomes (a layer at finish)
do
	local report, upstream_report, counting_since
	-- the query log's recorder while the log is on (lua::query_log): called from this layer's
	-- finish with what it already read, so a logged answer costs no second layer
	local record
	function @ATTACH@(recorder)
		record = recorder
		@LOAD@()
	end
	function @LOAD@()
		if package.loaded[@MODULE_KEY@] ~= nil then return end
		counting_since = os.time()
		local bit = require('bit')
		local rshift = bit.rshift
		local slot = {@SLOTS@}
		local other = @OTHER_QTYPE@
		local queries = {@QUERY_ZEROS@}
		local rcodes = {[0] = 0, @RCODE_ZEROS@}
		local failed = {@FAILED@}
		local hits, misses, secure, insecure, bogus = 0, 0, 0, 0, 0
		local ffi = require('ffi')
		local C = ffi.C
		local sockaddr = ffi.typeof('const struct sockaddr *')
		local bytes = ffi.typeof('const char *')
		local address_offset = ffi.sizeof('void *')
		local sent, answered, refusing, tallied = {}, {}, {}, 0
		local function upstream_key(sa)
			local family = C.kr_inaddr_family(sa)
			if family ~= @AF_INET@ and family ~= @AF_INET6@ then return nil end
			return ffi.string(C.kr_inaddr(sa), C.kr_inaddr_len(sa))
		end
		local function checkout(state, req, pkt, dst, is_stream)
			if dst == nil then return state end
			local key = upstream_key(ffi.cast(sockaddr, dst))
			if key == nil then return state end
			local n = sent[key]
			if n == nil then
				if tallied >= @MAX_UPSTREAMS@ then return state end
				tallied = tallied + 1
				n, answered[key], refusing[key] = 0, 0, 0
			end
			sent[key] = n + 1
			return state
		end
		local function consume(state, req, pkt)
			local transport = req.upstream.transport
			if transport == nil or pkt == nil then return state end
			local qry = req.current_query
			if qry == nil or qry.flags.CACHED then return state end
			local key = upstream_key(ffi.cast(sockaddr, ffi.cast(bytes, transport) + address_offset))
			if key == nil or sent[key] == nil then return state end
			answered[key] = answered[key] + 1
			local rcode = pkt:rcode()
			if rcode ~= 0 and rcode ~= 3 then refusing[key] = refusing[key] + 1 end
			return state
		end
		local function bogus_in(array)
			for i = 0, tonumber(array.len) - 1 do
				if array.at[i].flags.DNSSEC_BOGUS then return true end
			end
			return false
		end
		local function finish(state, req, answer)
			local qsource = req.qsource
			if qsource.dst_addr == nil then return state end
			local query = qsource.packet
			local size = query ~= nil and query.qname_size or 0
			if size ~= 0 then
				local n = slot[query:qtype()] or other
				queries[n] = queries[n] + 1
			end
			if answer == nil then return state end
			local rcode = answer:rcode()
			local opt = answer.opt_rr
			if opt ~= nil then rcode = rshift(opt._ttl, 24) * 16 + rcode end
			local cached = false
			local rplan = req.rplan
			local resolved = tonumber(rplan.resolved.len)
			if resolved > 0 then
				local pending = tonumber(rplan.pending.len)
				local last = pending > 0 and rplan.pending.at[pending - 1] or rplan.resolved.at[resolved - 1]
				cached = last.flags.CACHED
				if cached then hits = hits + 1 else misses = misses + 1 end
			end
			if record ~= nil and size ~= 0 then record(req, query, answer, rcode, cached) end
			if rcode > @HIGHEST_RCODE@ then rcode = @OTHER_RCODE@ end
			rcodes[rcode] = rcodes[rcode] + 1
			if req.rank == @RANK_SECURE@ then
				secure = secure + 1
			elseif rcode == 2 and (failed[req.extended_error.info_code] or bogus_in(rplan.resolved) or bogus_in(rplan.pending)) then
				bogus = bogus + 1
			else
				insecure = insecure + 1
			end
			return state
		end
		report = function()
			local q, r = {other = queries[other]}, {other = rcodes[@OTHER_RCODE@]}
			for qtype, i in pairs(slot) do q[tostring(qtype)] = queries[i] end
			for rcode = 0, @HIGHEST_RCODE@ do r[tostring(rcode)] = rcodes[rcode] end
			return {queries = q, rcodes = r, cache = {hit = hits, miss = misses},
				dnssec = {secure = secure, insecure = insecure, bogus = bogus},
				query_log = @QL_DROPPED@ and {dropped = @QL_DROPPED@()} or nil}
		end
		upstream_report = function()
			local out = {}
			for key, n in pairs(sent) do
				local hex = key:gsub('.', function(c) return string.format('%02x', c:byte()) end)
				out[hex] = {sent = n, answered = answered[key], errors = refusing[key]}
			end
			return out
		end
		package.loaded[@MODULE_KEY@] = {layer = {finish = finish, checkout = checkout, consume = consume}}
		modules.load(@MODULE@)
	end
	function @COLLECT@()
		if stats == nil then
			modules.load('stats')
		end
		@LOAD@()
		return {stats = stats.list(), counts = report(),
			upstreams = {rtt = stats.upstreams(), tallies = upstream_report(), since = counting_since}}
	end
end
