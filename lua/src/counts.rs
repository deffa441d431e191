//! The workers' own counts of what kresd's `stats` module lacks, for the manager's labelled
//! metrics: external queries by qtype, their answers by every rcode, cache hits and misses,
//! DNSSEC outcomes, the query log's dropped records (`lua::query_log`); and, for `GET /upstreams`, per upstream address the queries sent and the
//! answers received. A Lua layer at `finish` (the upstreams: `checkout` and `consume`)
//! counts them in integer-indexed arrays held as upvalues (no string is built, no table made
//! per query; an upstream's key is its address's bytes); the manager reads them with the
//! statistics and the upstreams' samples, in one control-socket call per scrape, through
//! [`COLLECT_FUNCTION`].
//!
//! The layer is loaded as `stats` is: at the first collection (`monitoring.metrics: lazy`) or
//! at start (`always`), and at start when the query log is on, whose recorder it calls
//! ([`ATTACH_FUNCTION`]). Without the log, nothing runs while the worker's configuration is
//! read but the definitions (and, with `always`, one call), so the file makes upstream's calls
//! and assignments plus these three names.

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

/// The global function the manager calls at every scrape: `{stats = stats.list(), counts =
/// {...}, upstreams = {rtt = stats.upstreams(), tallies = {...}, since = ...}}`, loading
/// `stats` and the counting layer first if they are not loaded yet. `since` is when the
/// worker began counting (Unix seconds); a tally is keyed by the address's bytes in hex
/// (kresd's `kr_inaddr`, no port) and holds `sent`, `answered` and `errors`.
pub const COLLECT_FUNCTION: &str = "collect_labelled_statistics";

/// Upstream addresses a worker keeps tallies of; queries to any further address are not
/// counted (a resolver iterating the whole Internet meets thousands, a forwarder a handful).
pub const MAX_UPSTREAMS: usize = 512;

/// The global function that loads the counting layer (once; later calls do nothing).
pub const LOAD_FUNCTION: &str = "load_answer_counters";

/// The global function the query log (`lua::query_log`) hands its recorder to: the counting
/// layer is loaded if it is not yet, and its `finish` calls the recorder for every answer to
/// a client with a question, with the rcode (extended bits included) and cache use it has
/// read for its own counts. One layer for both: a second Lua layer would cost a call from C
/// into Lua per answer of its own.
pub const ATTACH_FUNCTION: &str = "attach_query_log";

/// The name of the kresd module the layer is loaded as (`modules.unload` of it stops the
/// counting and the query log's records, `modules.load` resumes both with the same counts).
pub const MODULE: &str = "answer_counters";

/// The slot of the extended rcodes above [`HIGHEST_NUMBERED_RCODE`].
const OTHER_RCODE: u16 = HIGHEST_NUMBERED_RCODE + 1;

/// kresd's `rank` of a request whose whole answer it authenticated (`KR_RANK_SECURE`).
const RANK_SECURE: u8 = 32;

/// The counting functions, `@NAME@` standing for what [`counting_functions`] fills in.
///
/// `finish`: external requests only, as `stats` tells them (a destination address); the qtype
/// and the header's rcode through kresd's own packet accessors (`pkt:qtype()`,
/// `pkt:rcode()`); the extended bits from the answer's OPT record (`opt_rr._ttl`: kresd's Lua
/// has no accessor for them); the cache use of the request's last query as `stats` tells it (`kr_rplan_last`: the
/// last pending one, else the last resolved); the DNSSEC outcome from the request's rank
/// (secure) or, for a SERVFAIL, a DNSSEC failure's extended error or a query of the request
/// kresd flagged bogus (it gives some validation failures only EDE 0, "Other"). Lengths are
/// `size_t` (64-bit cdata in LuaJIT): `tonumber` makes them plain numbers.
///
/// `checkout` (each query sent to an upstream, a retry too) and `consume` (each answer
/// received): tallies per upstream address of the queries sent, the answers received and
/// the answers that were neither NOERROR nor NXDOMAIN; sent minus answered is what timed out
/// or failed to connect, which no sample of `stats.upstreams()` shows. `consume` passes over
/// answers made from the cache (`stats` does the same) and names the upstream as `stats`
/// does, by the request's transport: kres-gen leaves `struct kr_transport` a stub, and its
/// address (`union kr_sockaddr`) follows its first member, a pointer. Bounded: at most
/// [`MAX_UPSTREAMS`] addresses, each three numbers.
const TEMPLATE: &str = include_str!("counts.lua");

/// The definitions of [`LOAD_FUNCTION`] and [`COLLECT_FUNCTION`]: [`TEMPLATE`] filled in
/// (numbers, and the module's name through [`quote`]).
pub fn counting_functions(out: &mut String) {
    let other_qtype = NAMED_QTYPES.len() + 1;
    let slots: String = NAMED_QTYPES
        .iter()
        .enumerate()
        .map(|(i, (qtype, _))| format!("[{qtype}] = {}, ", i + 1))
        .collect();
    let failed: String = VALIDATION_FAILURES
        .iter()
        .map(|code| format!("[{code}] = true, "))
        .collect();
    let fills = [
        ("@LOAD@", LOAD_FUNCTION.to_owned()),
        ("@ATTACH@", ATTACH_FUNCTION.to_owned()),
        ("@COLLECT@", COLLECT_FUNCTION.to_owned()),
        ("@MAX_UPSTREAMS@", MAX_UPSTREAMS.to_string()),
        ("@AF_INET@", nix::libc::AF_INET.to_string()),
        ("@AF_INET6@", nix::libc::AF_INET6.to_string()),
        ("@MODULE_KEY@", quote(&format!("kres_modules.{MODULE}"))),
        ("@MODULE@", quote(MODULE)),
        ("@SLOTS@", slots),
        ("@OTHER_QTYPE@", other_qtype.to_string()),
        ("@QUERY_ZEROS@", zeros(other_qtype)),
        ("@RCODE_ZEROS@", zeros(usize::from(OTHER_RCODE))),
        ("@FAILED@", failed),
        ("@HIGHEST_RCODE@", HIGHEST_NUMBERED_RCODE.to_string()),
        ("@OTHER_RCODE@", OTHER_RCODE.to_string()),
        ("@RANK_SECURE@", RANK_SECURE.to_string()),
        (
            "@QL_DROPPED@",
            kres_wire::query_log_format::DROPPED_FUNCTION.to_owned(),
        ),
    ];
    let mut text = TEMPLATE.to_owned();
    for (placeholder, value) in fills {
        text = text.replace(placeholder, &value);
    }
    out.push_str(&text);
}

/// `0, 0, …`, `n` times.
fn zeros(n: usize) -> String {
    vec!["0"; n].join(", ")
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
        assert!(!out.contains('@'), "every placeholder filled in:\n{out}");
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
