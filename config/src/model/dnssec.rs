//! The `dnssec` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;

pub(super) fn dnssec() -> ObjectDef {
    let ta_file = section(
        "knot_resolver.datamodel.dnssec_schema.TrustAnchorFileSchema",
        Some("Trust-anchor zonefile configuration."),
        vec![
            req(
                "file",
                v(&vt::READABLE_FILE),
                "Path to the zonefile that stores trust-anchors.",
            ),
            f(
                "read-only",
                Ty::Bool,
                json!(false),
                "Blocks zonefile updates according to RFC 5011.",
            ),
        ],
    );
    section(
        "knot_resolver.datamodel.dnssec_schema.DnssecSchema",
        Some("DNSSEC configuration."),
        vec![
            f("enable", Ty::Bool, json!(true), "Enable/disable DNSSEC."),
            f("log-bogus", Ty::Bool, json!(false), "Enable logging for each DNSSEC validation failure if '/logging/level' is set to at least 'notice'."),
            f("sentinel", Ty::Bool, json!(true), "Allows users of DNSSEC validating resolver to detect which root keys are configured in resolver's chain of trust. (RFC 8509)"),
            f("signal-query", Ty::Bool, json!(true), "Signaling Trust Anchor Knowledge in DNSSEC Using Key Tag Query, according to (RFC 8145#section-5)."),
            f("trust-anchors", opt(list(v(&vt::ESCAPED_STR))), Value::Null, "Trust-anchors configuration."),
            f("trust-anchors-files", opt(list(obj(ta_file))), Value::Null, "List of zone-files where trust-anchors are stored."),
            f("negative-trust-anchors", opt(list(v(&vt::DOMAIN_NAME))), Value::Null, "List of domain names representing negative trust-anchors. (RFC 7646)"),
        ],
    )
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TrustAnchorFileSchema {
    pub file: PathBuf,
    pub read_only: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DnssecSchema {
    pub enable: bool,
    pub log_bogus: bool,
    pub sentinel: bool,
    pub signal_query: bool,
    pub trust_anchors: Option<Vec<EscapedStr>>,
    pub trust_anchors_files: Option<Vec<TrustAnchorFileSchema>>,
    pub negative_trust_anchors: Option<Vec<DomainName>>,
}
