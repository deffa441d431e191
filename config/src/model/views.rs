//! The `views` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;

pub(super) fn views() -> ObjectDef {
    let options = section(
        "knot_resolver.datamodel.view_schema.ViewOptionsSchema",
        Some("Configuration options for clients identified by the view."),
        vec![
            f(
                "minimize",
                Ty::Bool,
                json!(true),
                "Send minimum amount of information in recursive queries to enhance privacy.",
            ),
            f("dns64", Ty::Bool, json!(true), "Enable/disable DNS64."),
            f(
                "price-factor",
                v(&vt::FLOAT_0_65535),
                json!(1.0),
                "Multiplies rate-limiting and defer prices of operations, use 0 to whitelist.",
            ),
            f(
                "fallback",
                Ty::Bool,
                json!(true),
                "Enable/disable fallback on resolution failure.",
            ),
        ],
    );
    let mut d = section(
        "knot_resolver.datamodel.view_schema.ViewSchema",
        Some("Configuration parameters that allow you to create personalized policy rules and other."),
        vec![
            req("subnets", list(v(&vt::IP_NETWORK)), "Identifies the client based on his subnet.  Rule with more precise subnet takes priority."),
            f("dst-subnet", opt(v(&vt::IP_NETWORK)), Value::Null, "Destination subnet, as an additional condition."),
            f("protocols", opt(list(Ty::Literal(&["udp53", "tcp53", "dot", "doh", "doq"]))), Value::Null, "Transport protocol, as an additional condition."),
            f("tags", opt(list(v(&vt::ID_PATTERN_TYPE))), Value::Null, "Tags to link with other policy rules."),
            f("answer", opt(Ty::Literal(&["allow", "refused", "noanswer"])), Value::Null, "Direct approach how to handle request from clients identified by the view."),
            f("options", obj(options), json!({}), "Configuration options for clients identified by the view."),
        ],
    );
    d.validate = Some(|m, _, path| {
        if is_set(m, "tags") == is_set(m, "answer") {
            return fail(
                path,
                "exactly one of 'tags' and 'answer' must be configured",
            );
        }
        Ok(())
    });
    d
}

/// View protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViewProtocol {
    Udp53,
    Tcp53,
    Dot,
    Doh,
    Doq,
}

/// Direct answers of a view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViewAnswer {
    Allow,
    Refused,
    Noanswer,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ViewOptionsSchema {
    pub minimize: bool,
    pub dns64: bool,
    pub price_factor: f64,
    pub fallback: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ViewSchema {
    pub subnets: Vec<IpNetwork>,
    pub dst_subnet: Option<IpNetwork>,
    pub protocols: Option<Vec<ViewProtocol>>,
    pub tags: Option<Vec<IdPattern>>,
    pub answer: Option<ViewAnswer>,
    pub options: ViewOptionsSchema,
}
