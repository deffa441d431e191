//! The `options` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;

pub(super) fn options() -> ObjectDef {
    section(
        "knot_resolver.datamodel.options_schema.OptionsSchema",
        Some("Fine-tuning global parameters of DNS resolver operation."),
        vec![
            f("glue-checking", Ty::Literal(&["normal", "strict", "permissive"]), json!("normal"), "Glue records strictness checking level."),
            f("minimize", Ty::Bool, json!(true), "Send minimum amount of information in recursive queries to enhance privacy."),
            f("query-loopback", Ty::Bool, json!(false), "Permits queries to loopback addresses."),
            f("reorder-rrset", Ty::Bool, json!(true), "Controls whether resource records within a RRSet are reordered each time it is served from the cache."),
            f("query-case-randomization", Ty::Bool, json!(true), "Randomize Query Character Case."),
            f("priming", Ty::Bool, json!(true), "Initializing DNS resolver cache with Priming Queries (RFC 8109)"),
            f("rebinding-protection", Ty::Bool, json!(false), "Protection against DNS Rebinding attack."),
            f("refuse-no-rd", Ty::Bool, json!(true), "Queries without RD (recursion desired) bit set in query are answered with REFUSED."),
            f("time-jump-detection", Ty::Bool, json!(true), "Detection of difference between local system time and expiration time bounds in DNSSEC signatures for '. NS' records."),
            f("violators-workarounds", Ty::Bool, json!(false), "Workarounds for known DNS protocol violators."),
            f("serve-stale", Ty::Bool, json!(false), "Allows using timed-out records in case DNS resolver is unable to contact upstream servers."),
        ],
    )
}

/// Glue records strictness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GlueChecking {
    Normal,
    Strict,
    Permissive,
}

impl GlueChecking {
    /// The configuration spelling, which is also kresd's `mode()` argument.
    pub fn as_str(self) -> &'static str {
        match self {
            GlueChecking::Normal => "normal",
            GlueChecking::Strict => "strict",
            GlueChecking::Permissive => "permissive",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OptionsSchema {
    pub glue_checking: GlueChecking,
    pub minimize: bool,
    pub query_loopback: bool,
    pub reorder_rrset: bool,
    pub query_case_randomization: bool,
    pub priming: bool,
    pub rebinding_protection: bool,
    pub refuse_no_rd: bool,
    pub time_jump_detection: bool,
    pub violators_workarounds: bool,
    pub serve_stale: bool,
}
