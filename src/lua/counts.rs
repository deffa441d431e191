//! The workers' own counts of what kresd's `stats` module lacks, for the manager's labelled
//! metrics: external queries by qtype, their answers by every rcode, cache hits and misses,
//! DNSSEC outcomes. A Lua layer at `finish` counts them in integer-indexed arrays held as
//! upvalues (no string is built, no table made per query); the manager reads them with the
//! statistics, in one control-socket call, through [`COLLECT_FUNCTION`].
//!
//! The layer is loaded as `stats` is: at the first collection (`monitoring.metrics: lazy`) or
//! at start (`always`). Nothing runs while the worker's configuration is read but the
//! definitions (and, with `always`, one call), so the file makes upstream's calls and
//! assignments plus those two names.

use super::{line, quote};

/// The query types counted under their own name, (number, name), in the order of their slots;
/// every other type is counted as `other`. The common types of stub resolvers, mail, service
/// discovery and DNSSEC, as CoreDNS's and unbound's exporters name them.
pub const NAMED_QTYPES: [(u16, &str); 16] = [
    (1, "A"),
    (28, "AAAA"),
    (5, "CNAME"),
    (15, "MX"),
    (2, "NS"),
    (12, "PTR"),
    (6, "SOA"),
    (33, "SRV"),
    (16, "TXT"),
    (43, "DS"),
    (48, "DNSKEY"),
    (65, "HTTPS"),
    (64, "SVCB"),
    (257, "CAA"),
    (35, "NAPTR"),
    (255, "ANY"),
];

/// The highest rcode counted by its number: 0–15 from the header, 16 (BADVERS, which kresd
/// answers to an EDNS version it does not know) from the header and the OPT record's extended
/// bits; any higher extended rcode is counted as `other`.
pub const HIGHEST_NUMBERED_RCODE: u16 = 16;

/// Extended DNS errors (RFC 8914) kresd sets when DNSSEC validation fails: DNSSEC Bogus (6),
/// Signature Expired (7), Signature Not Yet Valid (8), DNSKEY Missing (9), RRSIGs Missing
/// (10), No Zone Key Bit Set (11), NSEC Missing (12), Signature Expired before Valid (25).
pub const VALIDATION_FAILURES: [u16; 8] = [6, 7, 8, 9, 10, 11, 12, 25];

/// The global function the manager calls: `{stats = stats.list(), counts = {...}}`, loading
/// `stats` and the counting layer first if they are not loaded yet.
pub const COLLECT_FUNCTION: &str = "collect_labelled_statistics";

/// The global function that loads the counting layer (once; later calls do nothing).
pub const LOAD_FUNCTION: &str = "load_answer_counters";

/// The name of the kresd module the layer is loaded as.
const MODULE: &str = "answer_counters";

/// kresd's `rank` of a request whose whole answer it authenticated (`KR_RANK_SECURE`).
const RANK_SECURE: u8 = 32;

/// The definitions of [`LOAD_FUNCTION`] and [`COLLECT_FUNCTION`].
pub fn counting_functions(out: &mut String) {
    let other_qtype = NAMED_QTYPES.len() + 1;
    let other_rcode = HIGHEST_NUMBERED_RCODE + 1;
    let module_key = quote(&format!("kres_modules.{MODULE}"));
    line!(
        out,
        "-- counts kresd's statistics lack, for the labelled metrics: external queries by qtype,"
    );
    line!(
        out,
        "-- answers by rcode, cache hits and misses, DNSSEC outcomes (a layer at finish)"
    );
    line!(out, "do");
    line!(out, "\tlocal report");
    line!(out, "\tfunction {LOAD_FUNCTION}()");
    line!(
        out,
        "\t\tif package.loaded[{module_key}] ~= nil then return end"
    );
    line!(out, "\t\tlocal bit = require('bit')");
    line!(out, "\t\tlocal band, rshift = bit.band, bit.rshift");
    let slots: String = NAMED_QTYPES
        .iter()
        .enumerate()
        .map(|(i, (qtype, _))| format!("[{qtype}] = {}, ", i + 1))
        .collect();
    line!(out, "\t\tlocal slot = {{{slots}}}");
    line!(out, "\t\tlocal other = {other_qtype}");
    line!(out, "\t\tlocal queries = {{{}}}", zeros(1, other_qtype));
    line!(
        out,
        "\t\tlocal rcodes = {{[0] = 0, {}}}",
        zeros(1, usize::from(other_rcode))
    );
    let failures: String = VALIDATION_FAILURES
        .iter()
        .map(|code| format!("[{code}] = true, "))
        .collect();
    line!(out, "\t\tlocal failed = {{{failures}}}");
    line!(
        out,
        "\t\tlocal hits, misses, secure, insecure, bogus = 0, 0, 0, 0, 0"
    );
    finish_function(out, other_rcode);
    line!(out, "\t\treport = function()");
    line!(
        out,
        "\t\t\tlocal q, r = {{other = queries[other]}}, {{other = rcodes[{other_rcode}]}}"
    );
    line!(
        out,
        "\t\t\tfor qtype, i in pairs(slot) do q[tostring(qtype)] = queries[i] end"
    );
    line!(
        out,
        "\t\t\tfor rcode = 0, {HIGHEST_NUMBERED_RCODE} do r[tostring(rcode)] = rcodes[rcode] end"
    );
    line!(
        out,
        "\t\t\treturn {{queries = q, rcodes = r, cache = {{hit = hits, miss = misses}},"
    );
    line!(
        out,
        "\t\t\t\tdnssec = {{secure = secure, insecure = insecure, bogus = bogus}}}}"
    );
    line!(out, "\t\tend");
    line!(
        out,
        "\t\tpackage.loaded[{module_key}] = {{layer = {{finish = finish}}}}"
    );
    line!(out, "\t\tmodules.load({})", quote(MODULE));
    line!(out, "\tend");
    line!(out, "\tfunction {COLLECT_FUNCTION}()");
    line!(out, "\t\tif stats == nil then");
    line!(out, "\t\t\tmodules.load('stats')");
    line!(out, "\t\tend");
    line!(out, "\t\t{LOAD_FUNCTION}()");
    line!(
        out,
        "\t\treturn {{stats = stats.list(), counts = report()}}"
    );
    line!(out, "\tend");
    line!(out, "end");
}

/// The layer's `finish`: what `stats` counts as external (a destination address), the qtype
/// from the query's wire, the rcode from the answer's header and OPT record, the cache use of
/// the request's last query as `stats` tells it (`kr_rplan_last`: the last pending one, else the
/// last resolved), the DNSSEC outcome from the request's rank
/// (secure) or, for a SERVFAIL, a DNSSEC failure's extended error or a query of the request
/// kresd flagged bogus (it gives some validation failures only EDE 0, "Other").
fn finish_function(out: &mut String, other_rcode: u16) {
    line!(out, "\t\tlocal function bogus_in(queries)");
    line!(out, "\t\t\tfor i = 0, tonumber(queries.len) - 1 do");
    line!(
        out,
        "\t\t\t\tif queries.at[i].flags.DNSSEC_BOGUS then return true end"
    );
    line!(out, "\t\t\tend");
    line!(out, "\t\t\treturn false");
    line!(out, "\t\tend");
    line!(out, "\t\tlocal function finish(state, req, answer)");
    line!(out, "\t\t\tlocal qsource = req.qsource");
    line!(
        out,
        "\t\t\tif qsource.dst_addr == nil then return state end"
    );
    line!(out, "\t\t\tlocal query = qsource.packet");
    line!(out, "\t\t\tlocal size = query.qname_size");
    line!(out, "\t\t\tif size ~= 0 then");
    line!(out, "\t\t\t\tlocal wire = query.wire");
    line!(
        out,
        "\t\t\t\tlocal n = slot[wire[12 + size] * 256 + wire[13 + size]] or other"
    );
    line!(out, "\t\t\t\tqueries[n] = queries[n] + 1");
    line!(out, "\t\t\tend");
    line!(out, "\t\t\tif answer == nil then return state end");
    line!(out, "\t\t\tlocal rcode = band(answer.wire[3], 15)");
    line!(out, "\t\t\tlocal opt = answer.opt_rr");
    line!(out, "\t\t\tif opt ~= nil then");
    line!(out, "\t\t\t\tlocal ext = rshift(opt._ttl, 24)");
    line!(out, "\t\t\t\tif ext ~= 0 then");
    line!(out, "\t\t\t\t\trcode = ext * 16 + rcode");
    line!(
        out,
        "\t\t\t\t\tif rcode > {HIGHEST_NUMBERED_RCODE} then rcode = {other_rcode} end"
    );
    line!(out, "\t\t\t\tend");
    line!(out, "\t\t\tend");
    line!(out, "\t\t\trcodes[rcode] = rcodes[rcode] + 1");
    line!(out, "\t\t\tlocal rplan = req.rplan");
    line!(out, "\t\t\tlocal resolved = tonumber(rplan.resolved.len)");
    line!(out, "\t\t\tif resolved > 0 then");
    line!(out, "\t\t\t\tlocal pending = tonumber(rplan.pending.len)");
    line!(
        out,
        "\t\t\t\tlocal last = pending > 0 and rplan.pending.at[pending - 1] or rplan.resolved.at[resolved - 1]"
    );
    line!(
        out,
        "\t\t\t\tif last.flags.CACHED then hits = hits + 1 else misses = misses + 1 end"
    );
    line!(out, "\t\t\tend");
    line!(out, "\t\t\tif req.rank == {RANK_SECURE} then");
    line!(out, "\t\t\t\tsecure = secure + 1");
    line!(
        out,
        "\t\t\telseif rcode == 2 and (failed[req.extended_error.info_code] or bogus_in(rplan.resolved) or bogus_in(rplan.pending)) then"
    );
    line!(out, "\t\t\t\tbogus = bogus + 1");
    line!(out, "\t\t\telse");
    line!(out, "\t\t\t\tinsecure = insecure + 1");
    line!(out, "\t\t\tend");
    line!(out, "\t\t\treturn state");
    line!(out, "\t\tend");
}

/// `0, 0, …` for the slots `from..=to`.
fn zeros(from: usize, to: usize) -> String {
    vec!["0"; to + 1 - from].join(", ")
}

/// The call that loads the counting layer at start (`monitoring.metrics: always`).
pub fn load_at_start(out: &mut String) {
    line!(out, "{LOAD_FUNCTION}()");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_is_initialised_and_named_once() {
        let mut out = String::new();
        counting_functions(&mut out);
        assert!(
            out.contains(&format!("local queries = {{{}}}", ["0"; 17].join(", "))),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "local rcodes = {{[0] = 0, {}}}",
                ["0"; 17].join(", ")
            )),
            "{out}"
        );
        assert!(out.contains("[1] = 1, [28] = 2, "), "{out}");
        assert!(out.contains("[255] = 16, }"), "{out}");
        let mut numbers: Vec<u16> = NAMED_QTYPES.iter().map(|(n, _)| *n).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), NAMED_QTYPES.len());
    }
}
