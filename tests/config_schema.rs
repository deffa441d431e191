//! The generated JSON schema has upstream's property tree: every property path of the reference
//! schema (6.5.0) exists in ours with a compatible type, the same enums and the same defaults.

use std::path::Path;

use serde_json::Value;

fn reference() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/config.schema.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("reference schema"))
        .expect("valid JSON")
}

/// The JSON types a schema node allows (`anyOf` merged).
fn types_of(node: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match node.get("type") {
        Some(Value::String(t)) => out.push(t.clone()),
        Some(Value::Array(ts)) => {
            out.extend(ts.iter().filter_map(Value::as_str).map(str::to_owned))
        }
        _ => {}
    }
    if let Some(Value::Array(variants)) = node.get("anyOf") {
        for v in variants {
            out.extend(types_of(v));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Defaults whose value depends on the machine the schema was generated on.
const MACHINE_DEPENDENT_DEFAULTS: &[&str] = &[
    // `watchdog: auto` resolves to whether upstream's optional Python library was installed
    "/network",
    "/network/tls",
];

fn compare(reference: &Value, ours: &Value, path: &str, problems: &mut Vec<String>) {
    let (rt, ot) = (types_of(reference), types_of(ours));
    if rt != ot {
        problems.push(format!("{path}: types {rt:?} != {ot:?}"));
    }
    for key in ["enum", "pattern", "minimum", "maximum", "minLength"] {
        if reference.get(key) != ours.get(key) {
            problems.push(format!(
                "{path}: {key} {:?} != {:?}",
                reference.get(key),
                ours.get(key)
            ));
        }
    }
    if reference.get("default") != ours.get("default")
        && !MACHINE_DEPENDENT_DEFAULTS.contains(&path)
    {
        problems.push(format!(
            "{path}: default {:?} != {:?}",
            reference.get("default"),
            ours.get("default")
        ));
    }
    if reference.get("description") != ours.get("description") {
        problems.push(format!(
            "{path}: description {:?} != {:?}",
            reference.get("description"),
            ours.get("description")
        ));
    }
    if let Some(Value::Object(props)) = reference.get("properties") {
        let our_props = ours.get("properties").and_then(Value::as_object);
        for (name, sub) in props {
            match our_props.and_then(|p| p.get(name)) {
                Some(our_sub) => compare(sub, our_sub, &format!("{path}/{name}"), problems),
                None => problems.push(format!("{path}/{name}: missing")),
            }
        }
        if let Some(our_props) = our_props {
            for name in our_props.keys() {
                if !props.contains_key(name) {
                    problems.push(format!("{path}/{name}: not in the reference"));
                }
            }
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = reference.get(key) {
            match ours.get(key) {
                Some(our_sub) => compare(sub, our_sub, &format!("{path}[{key}]"), problems),
                None => problems.push(format!("{path}: {key} missing")),
            }
        }
    }
    if let Some(Value::Array(variants)) = reference.get("anyOf") {
        let ours_variants = ours.get("anyOf").and_then(Value::as_array);
        if ours_variants.map(Vec::len) != Some(variants.len()) {
            problems.push(format!("{path}: anyOf has a different number of variants"));
        } else if let Some(ours_variants) = ours_variants {
            for (i, (r, o)) in variants.iter().zip(ours_variants).enumerate() {
                compare(r, o, &format!("{path}|{i}"), problems);
            }
        }
    }
}

/// Our schema without what upstream's lacks on purpose: `local-data.rpz[].transfer` (RPZ by
/// zone transfer), `local-data.rpz[].url` and its options (subscribed lists), `monitoring.query-log` (the query log) and `fleet` (a fleet's shared
/// configuration on etcd), extensions of ours.
fn without_extensions(mut schema: Value) -> Value {
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        props.shift_remove("fleet");
    }
    if let Some(props) = schema["properties"]["monitoring"]
        .get_mut("properties")
        .and_then(Value::as_object_mut)
    {
        props.shift_remove("query-log");
    }
    if let Some(default) = schema["properties"]["monitoring"]
        .get_mut("default")
        .and_then(Value::as_object_mut)
    {
        default.shift_remove("query_log");
    }
    let rpz = &mut schema["properties"]["local-data"]["properties"]["rpz"]["items"];
    if let Some(props) = rpz.get_mut("properties").and_then(Value::as_object_mut) {
        for key in [
            "transfer",
            "url",
            "format",
            "refresh",
            "max-size",
            "sha256",
            "action-override",
        ] {
            props.shift_remove(key);
        }
    }
    schema
}

#[test]
fn schema_matches_the_reference() {
    let ours = without_extensions(kres_config::json_schema());
    let mut problems = Vec::new();
    compare(&reference(), &ours, "", &mut problems);
    assert!(
        problems.is_empty(),
        "{} differences:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn schema_top_level_metadata() {
    let ours = kres_config::json_schema();
    let reference = reference();
    for key in ["$schema", "$id", "title", "description", "type"] {
        assert_eq!(ours.get(key), reference.get(key), "{key}");
    }
}

/// Set every TLS `watchdog` default to null (it depends on the generating machine).
fn without_watchdog_defaults(mut schema: Value) -> Value {
    schema["properties"]["network"]["default"]["tls"]["watchdog"] = Value::Null;
    schema["properties"]["network"]["properties"]["tls"]["default"]["watchdog"] = Value::Null;
    schema
}

#[test]
fn schema_is_identical_to_the_reference_apart_from_the_watchdog() {
    let ours = without_watchdog_defaults(without_extensions(kres_config::json_schema()));
    let reference = without_watchdog_defaults(reference());
    assert_eq!(
        serde_json::to_string_pretty(&ours).expect("serializable"),
        serde_json::to_string_pretty(&reference).expect("serializable")
    );
}

#[test]
fn machine_dependent_defaults_differ_only_in_the_watchdog() {
    let ours = kres_config::json_schema();
    let mut reference_network = reference()["properties"]["network"]["default"].clone();
    let mut our_network = ours["properties"]["network"]["default"].clone();
    reference_network["tls"]["watchdog"] = Value::Null;
    our_network["tls"]["watchdog"] = Value::Null;
    assert_eq!(our_network, reference_network);
}
