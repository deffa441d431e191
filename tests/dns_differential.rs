//! The same configuration run by upstream's manager and by ours on real kresd, the same
//! questions, identical answers (rcode, answer records, TTLs within a second).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{Setup, DNS_TIMEOUT, STOP_TIMEOUT};
use nix::sys::signal::Signal;
use testbed::dns;

/// Sections that shape answers without any network access.
const POLICY: &str = r#"local-data:
  ttl: 120s
  addresses:
    a.diff.test: 192.0.2.21
    both.diff.test: [192.0.2.22, 2001:db8::22]
  records: |
    r.diff.test. 300 A 192.0.2.23
    r.diff.test. 300 TXT "quotes \"and\" ]] brackets"
    alias.diff.test. 300 CNAME r.diff.test.
  rules:
    - name: [blocked.diff.test]
      subtree: nxdomain
    - name: [empty.diff.test]
      subtree: empty
    - name: [redirect.diff.test]
      subtree: redirect
      address: 192.0.2.24
dns64:
  enable: true
"#;

const QUESTIONS: &[(&str, u16)] = &[
    ("a.diff.test.", dns::TYPE_A),
    ("a.diff.test.", dns::TYPE_AAAA),
    ("both.diff.test.", dns::TYPE_A),
    ("both.diff.test.", dns::TYPE_AAAA),
    ("r.diff.test.", dns::TYPE_A),
    ("r.diff.test.", dns::TYPE_TXT),
    ("r.diff.test.", dns::TYPE_AAAA),
    ("alias.diff.test.", dns::TYPE_A),
    ("blocked.diff.test.", dns::TYPE_A),
    ("x.blocked.diff.test.", dns::TYPE_A),
    ("empty.diff.test.", dns::TYPE_A),
    ("x.empty.diff.test.", dns::TYPE_A),
    ("redirect.diff.test.", dns::TYPE_A),
    ("deep.x.redirect.diff.test.", dns::TYPE_A),
];

/// What we compare: rcode and the answer section, TTLs rounded to seconds apart by at most 1.
fn summary(
    server: SocketAddr,
    name: &str,
    qtype: u16,
) -> (u8, Vec<(String, u16, String)>, Vec<u32>) {
    let r = dns::query_udp(server, name, qtype, DNS_TIMEOUT)
        .unwrap_or_else(|e| panic!("{name}/{qtype}: {e}"));
    let mut answers: Vec<(String, u16, String)> = r
        .answers
        .iter()
        .map(|rec| {
            (
                rec.name.to_ascii_lowercase(),
                rec.rtype,
                format!("{:?}", rec.data),
            )
        })
        .collect();
    answers.sort();
    let mut ttls: Vec<u32> = r.answers.iter().map(|rec| rec.ttl).collect();
    ttls.sort_unstable();
    (r.rcode, answers, ttls)
}

#[test]
fn upstream_and_ours_answer_identically() {
    let setup = Setup::new("diff-ours").workers(2).extra(POLICY);
    let mut ours = common::start(&setup).expect("our resolver starts");

    let mut upstream = common::start_upstream(&Setup {
        name: "diff-upstream",
        ..setup
    })
    .expect("upstream starts");
    let theirs = upstream.dns();

    let mut compared = 0;
    for (name, qtype) in QUESTIONS {
        let (rc_o, ans_o, ttl_o) = summary(ours.dns(), name, *qtype);
        let (rc_u, ans_u, ttl_u) = summary(theirs, name, *qtype);
        assert_eq!(
            (rc_o, &ans_o),
            (rc_u, &ans_u),
            "{name} type {qtype}: ours vs upstream"
        );
        assert_eq!(ttl_o.len(), ttl_u.len());
        for (a, b) in ttl_o.iter().zip(&ttl_u) {
            assert!(a.abs_diff(*b) <= 1, "{name} type {qtype}: TTL {a} vs {b}");
        }
        compared += 1;
    }
    assert_eq!(compared, QUESTIONS.len());
    // The comparison is meaningful only if the answers are real: anchor a few absolutely.
    let (rc, ans, _) = summary(ours.dns(), "a.diff.test.", dns::TYPE_A);
    assert_eq!((rc, ans.len()), (dns::RCODE_NOERROR, 1));
    assert!(ans[0].2.contains("192.0.2.21"), "{ans:?}");
    assert_eq!(
        summary(ours.dns(), "x.blocked.diff.test.", dns::TYPE_A).0,
        dns::RCODE_NXDOMAIN
    );
    let (_, synthesized, _) = summary(ours.dns(), "r.diff.test.", dns::TYPE_AAAA);
    assert!(
        synthesized
            .iter()
            .any(|a| a.2.contains("64:ff9b::c000:217")),
        "dns64: {synthesized:?}"
    );

    upstream
        .launched
        .signal(Signal::SIGINT)
        .expect("stop upstream");
    assert!(upstream
        .launched
        .wait(Duration::from_secs(60))
        .expect("upstream exits")
        .success());
    ours.launched.signal(Signal::SIGINT).expect("stop ours");
    assert_eq!(
        ours.launched.wait(STOP_TIMEOUT).expect("exit").code(),
        Some(0)
    );
}
