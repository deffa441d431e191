//! The `defer` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;

pub(super) fn defer() -> ObjectDef {
    section(
        "knot_resolver.datamodel.defer_schema.DeferSchema",
        Some("Configuration of request prioritization (defer)."),
        vec![
            f(
                "enable",
                Ty::Bool,
                json!(true),
                "Use request prioritization.",
            ),
            f(
                "log-period",
                v(&vt::TIME_UNIT),
                json!("0s"),
                "Minimal time between two log messages, or '0s' to disable.",
            ),
        ],
    )
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DeferSchema {
    pub enable: bool,
    pub log_period: TimeUnit,
}
