//! Configurations larger than kresd takes in one Lua chunk: LuaJIT refuses a function with more
//! than 65,536 constants, and a policy-loader file with one statement per entry of 70,000
//! `local-data.addresses` has more. The generated Lua splits long runs into functions; the
//! resolver starts and answers the last entry. The root process reads the same files at its
//! start; their parse does not stay its memory. (The addresses are written as one flow
//! mapping: a file in the plain block form would be read by the root for its form only, with
//! no values made.)

mod common;

use common::{Setup, DNS_TIMEOUT};
use testbed::dns;

#[test]
fn seventy_thousand_local_addresses_load_and_answer() {
    const N: usize = 70_000;
    let mut extra = String::from("local-data:\n  addresses: {\n");
    for i in 0..N {
        extra.push_str(&format!(
            "    h{i}.large.test: 10.{}.{}.{},\n",
            (i >> 16) & 255,
            (i >> 8) & 255,
            i & 255
        ));
    }
    extra.push_str("  }\n");
    let r = common::start(&Setup::new("large-addresses").extra(&extra)).expect("starts");
    let last = N - 1;
    let name = format!("h{last}.large.test.");
    let resp = dns::query_udp(r.dns(), &name, dns::TYPE_A, DNS_TIMEOUT).expect("DNS");
    assert_eq!(
        resp.a(),
        vec![std::net::Ipv4Addr::new(
            10,
            (last >> 16) as u8,
            (last >> 8) as u8,
            last as u8
        )]
    );
    // The root parsed the 2.5 MB file too (tens of MiB of heap while it did): what it keeps
    // is its own small state, as with a configuration of ten lines.
    let root = r.launched.pid();
    let anonymous = testbed::procs::anonymous_kib(root).expect("the root's smaps_rollup");
    assert!(
        anonymous < ROOT_ANONYMOUS_KIB,
        "the root keeps {anonymous} KiB of anonymous memory after parsing {N} addresses"
    );
    r.stop();
}

/// The root's anonymous memory after READY, whatever the configuration's size; about 2 MiB
/// with a small one.
const ROOT_ANONYMOUS_KIB: u64 = 8 * 1024;
