//! Property tests: arbitrary text never panics the parser, and arbitrary documents (random trees
//! built from the configuration's own key names and tricky scalars) never panic the validator,
//! which always answers with a model or with non-empty, well-formed errors.

use std::path::{Path, PathBuf};

use knot_resolver::config::{json_schema, parse_document, validate, ValidationContext};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Every property name of the schema, so random documents hit real sections.
fn schema_keys() -> Vec<String> {
    fn walk(node: &Value, out: &mut Vec<String>) {
        match node {
            Value::Object(m) => {
                if let Some(Value::Object(props)) = m.get("properties") {
                    out.extend(props.keys().cloned());
                }
                m.values().for_each(|v| walk(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut keys = Vec::new();
    walk(&json_schema(), &mut keys);
    keys.sort();
    keys.dedup();
    keys
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (0u64..70000).prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop::sample::select(vec![
            "auto",
            "1s",
            "100M",
            "127.0.0.1",
            "::1@53",
            "127.0.0.1@5353",
            "eth0",
            "10.0.0.0/8",
            "64:ff9b::/96",
            "example.com",
            ".",
            "-x",
            "a..b",
            "příklad.cz",
            "tls",
            "dot",
            "from-arg",
            "1.2.3.4!",
            "",
            "@",
            "%",
            "/tmp/x",
            "relative/path",
            "d6qzRu9zOECb90Uez27xWltNsj0e1Md7GkYYkVoZWmM=",
            "t1",
            "\n",
            "~",
            "0us",
        ])
        .prop_map(|s| Value::String(s.to_owned())),
        ".{0,12}".prop_map(Value::String),
    ]
}

fn document(keys: Vec<String>) -> impl Strategy<Value = Value> {
    let key = prop_oneof![4 => prop::sample::select(keys), 1 => "[a-z_-]{1,8}"];
    scalar().prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

fn check_no_panic(doc: &Value, strict: bool) {
    let ctx = ValidationContext {
        resolve_root: PathBuf::from("/nonexistent-root"),
        strict,
    };
    if let Err(errors) = validate(doc, &ctx) {
        assert!(!errors.0.is_empty());
        for e in &errors.0 {
            assert!(
                e.path.is_empty() || e.path.starts_with('/'),
                "bad path {:?}",
                e.path
            );
            assert!(!e.message.is_empty());
        }
        assert!(!errors.to_string().is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn parser_never_panics_on_text(text in ".{0,200}") {
        let _ = parse_document(&text, Path::new("x.yaml"));
        let _ = parse_document(&text, Path::new("x.toml"));
    }

    #[test]
    fn parser_never_panics_on_yamlish_text(text in "[a-z:\\-\\[\\]{}&*!|>'\"#@%, \n0-9.~<]{0,120}") {
        if let Ok(doc) = parse_document(&text, Path::new("x.yaml")) {
            check_no_panic(&doc, false);
        }
    }

    #[test]
    fn validator_never_panics(doc in document(schema_keys()), strict in any::<bool>()) {
        check_no_panic(&doc, strict);
    }

    #[test]
    fn validator_never_panics_on_sections(section in prop::sample::select(schema_keys()), value in document(schema_keys())) {
        let mut root = Map::new();
        root.insert(section, value);
        check_no_panic(&Value::Object(root), false);
    }
}

#[test]
fn alias_bombs_are_refused() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    assert!(parse_document(&text, Path::new("bomb.yaml")).is_err());
}

#[test]
fn deep_nesting_does_not_overflow() {
    for depth in [2_000, 200_000] {
        let text = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let _ = parse_document(&text, Path::new("deep.yaml"));
        let text = format!(
            "lua:\n  script: {}1{}",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        if let Ok(doc) = parse_document(&text, Path::new("deep.yaml")) {
            check_no_panic(&doc, false);
        }
        let text = format!("{}1", "- ".repeat(depth / 10));
        let _ = parse_document(&text, Path::new("deep.yaml"));
    }
}
