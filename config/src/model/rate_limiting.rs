//! The `rate-limiting` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;

pub(super) fn rate_limiting() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.rate_limiting_schema.RateLimitingSchema",
        Some("Configuration of rate limiting."),
        vec![
            f("enable", Ty::Bool, json!(false), "Enable/disable rate limiting"),
            f("rate-limit", opt(int_positive()), Value::Null, "Maximal number of allowed queries per second from a single host."),
            f("instant-limit", int_positive(), json!(50), "Maximal number of allowed queries at a single point in time from a single host."),
            f("capacity", int_positive(), json!(524288), "Expected maximal number of blocked networks/hosts at the same time."),
            f("slip", int("Int0_32", Some(0), Some(32)), json!(2), "Number of restricted responses out of which one is sent as truncated, the others are dropped."),
            f("log-period", v(&vt::TIME_UNIT), json!("0s"), "Minimal time between two log messages, or '0s' to disable."),
            f("dry-run", Ty::Bool, json!(false), "Perform only classification and logging but no restrictions."),
        ],
    );
    d.validate = Some(|m, _, path| {
        if is_true(m, "enable") && !is_set(m, "rate-limit") {
            return fail(
                path,
                "'rate-limit' has to be configured to enable rate limiting",
            );
        }
        let max_instant: u64 = (1u64 << 32) / 768 - 1;
        let instant = m
            .get("instant-limit")
            .and_then(Value::as_u64)
            .unwrap_or(u64::MAX);
        if instant > max_instant {
            return fail(
                path,
                format!("'instant-limit' has to be in range 1..{max_instant}"),
            );
        }
        if let Some(rate) = m.get("rate-limit").and_then(Value::as_u64) {
            if u128::from(rate) > 1000 * u128::from(instant) {
                return fail(
                    path,
                    "'rate-limit' has to be in range 1..(1000 * instant-limit)",
                );
            }
        }
        Ok(())
    });
    d
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RateLimitingSchema {
    pub enable: bool,
    pub rate_limit: Option<u64>,
    pub instant_limit: u64,
    pub capacity: u64,
    pub slip: u8,
    pub log_period: TimeUnit,
    pub dry_run: bool,
}
