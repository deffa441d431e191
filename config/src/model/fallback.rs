//! The `fallback` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;
use super::forward::{forward_server, ForwardServer};

pub(super) fn fallback() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.forward_schema.FallbackSchema",
        Some("Configuration for fallback after resolution failure."),
        vec![
            f(
                "enable",
                Ty::Bool,
                json!(false),
                "Enable/disable the fallback.",
            ),
            f(
                "servers",
                opt(list(forward_server())),
                Value::Null,
                "Forward servers configuration for fallback.",
            ),
        ],
    );
    d.validate = Some(|m, _, path| {
        if is_true(m, "enable") && !is_set(m, "servers") {
            return fail(path, "Fallback enabled without configuring servers.");
        }
        Ok(())
    });
    d
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FallbackSchema {
    pub enable: bool,
    pub servers: Option<Vec<ForwardServer>>,
}
