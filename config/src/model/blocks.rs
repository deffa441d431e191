//! Building blocks for describing sections, and the imports every section shares.

pub(super) use std::path::PathBuf;
pub(super) use std::sync::Arc;

pub(super) use serde::Deserialize;
pub(super) use serde_json::{json, Map, Value};

pub(super) use super::WATCHDOG_AVAILABLE;
pub(super) use crate::engine::{
    child_path, flat_union, Ctx, Default, Failure, Field, IntRange, ObjectDef, Ty,
};
pub(super) use crate::types::{
    DomainName, EscapedStr, EtcdEndpoint, IdPattern, InterfaceOptionalPort, IpAddressEm,
    IpAddressOptionalPort, IpAddressPort, IpNetwork, PinSha256, SizeUnit, TimeUnit,
};
pub(super) use crate::value_types as vt;

pub(super) fn f(name: &'static str, ty: Ty, default: Value, doc: &'static str) -> Field {
    Field {
        name,
        ty,
        default: Default::Value(default),
        doc,
    }
}

pub(super) fn req(name: &'static str, ty: Ty, doc: &'static str) -> Field {
    Field {
        name,
        ty,
        default: Default::Required,
        doc,
    }
}

pub(super) fn opt(ty: Ty) -> Ty {
    Ty::Optional(Box::new(ty))
}

pub(super) fn list(ty: Ty) -> Ty {
    Ty::List(Box::new(ty))
}

pub(super) fn loi(ty: Ty) -> Ty {
    Ty::ListOrItem(Box::new(ty))
}

pub(super) fn v(t: &'static crate::engine::ValueType) -> Ty {
    Ty::Value(t)
}

pub(super) fn int(class: &'static str, min: Option<i64>, max: Option<i64>) -> Ty {
    Ty::Int(IntRange { class, min, max })
}

pub(super) fn int_positive() -> Ty {
    int("IntPositive", Some(1), None)
}

pub(super) fn int_non_negative() -> Ty {
    int("IntNonNegative", Some(0), None)
}

pub(super) fn percent() -> Ty {
    int("Percent", Some(0), Some(100))
}

pub(super) fn port_number() -> Ty {
    int("PortNumber", Some(1), Some(65535))
}

pub(super) fn ip_address() -> Ty {
    Ty::Union(vec![v(&vt::IPV4_ADDRESS), v(&vt::IPV6_ADDRESS)])
}

pub(super) fn obj(def: ObjectDef) -> Ty {
    Ty::Object(Arc::new(def))
}

pub(super) fn section(
    class: &'static str,
    doc: Option<&'static str>,
    fields: Vec<Field>,
) -> ObjectDef {
    ObjectDef {
        class,
        doc,
        fields,
        transform: None,
        validate: None,
        retype: None,
    }
}

pub(super) fn fail(path: &str, msg: impl Into<String>) -> Result<(), Vec<Failure>> {
    Err(vec![Failure::new(path, msg)])
}

pub(super) fn is_set(m: &Map<String, Value>, key: &str) -> bool {
    m.get(key).is_some_and(|v| !v.is_null())
}

/// Python truthiness of a plain `str` field: `None` and `""` are false.
pub(super) fn is_nonempty_str(m: &Map<String, Value>, key: &str) -> bool {
    m.get(key)
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
}

pub(super) fn is_true(m: &Map<String, Value>, key: &str) -> bool {
    m.get(key).and_then(Value::as_bool).unwrap_or(false)
}

pub(super) fn resolve_watchdog(m: &mut Map<String, Value>) {
    if m.get("watchdog").and_then(Value::as_str) == Some("auto") {
        m.insert("watchdog".into(), Value::Bool(WATCHDOG_AVAILABLE));
    }
}

pub(super) fn watchdog_ty() -> Ty {
    Ty::Union(vec![Ty::Literal(&["auto"]), Ty::Bool])
}

/// Python's `repr` of a list of strings.
pub(super) fn py_str_list(items: &[String]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|s| format!("'{s}'"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}
