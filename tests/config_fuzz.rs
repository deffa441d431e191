//! Property tests: arbitrary text never panics the parser, and arbitrary documents (random trees
//! built from the configuration's own key names and tricky scalars) never panic the validator,
//! which always answers with a model or with non-empty, well-formed errors.

use std::path::{Path, PathBuf};

use kres_config::{json_schema, parse_document, validate, PathChecks, ValidationContext};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
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

fn check_no_panic(doc: &Value, checks: PathChecks) {
    let ctx = ValidationContext {
        resolve_root: PathBuf::from("/nonexistent-root"),
        checks,
        logtarget_arg: Default::default(),
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
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, rng_seed: RngSeed::Fixed(256), ..ProptestConfig::default() })]

    #[test]
    fn parser_never_panics_on_text(text in ".{0,200}") {
        let _ = parse_document(&text, Path::new("x.yaml"));
        let _ = parse_document(&text, Path::new("x.toml"));
    }

    #[test]
    fn parser_never_panics_on_yamlish_text(text in "[a-z:\\-\\[\\]{}&*!|>'\"#@%, \n0-9.~<]{0,120}") {
        if let Ok(doc) = parse_document(&text, Path::new("x.yaml")) {
            check_no_panic(&doc, PathChecks::Lenient);
        }
    }

    #[test]
    fn validator_never_panics(
        doc in document(schema_keys()),
        checks in prop_oneof![
            Just(PathChecks::Lenient),
            Just(PathChecks::Strict),
            Just(PathChecks::Manager),
        ],
    ) {
        check_no_panic(&doc, checks);
    }

    #[test]
    fn validator_never_panics_on_sections(section in prop::sample::select(schema_keys()), value in document(schema_keys())) {
        let mut root = Map::new();
        root.insert(section, value);
        check_no_panic(&Value::Object(root), PathChecks::Lenient);
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
            check_no_panic(&doc, PathChecks::Lenient);
        }
        let text = format!("{}1", "- ".repeat(depth / 10));
        let _ = parse_document(&text, Path::new("deep.yaml"));
    }
}

/// Nodes, scalar bytes and depth of a value, walked without recursion.
fn weight(v: &Value) -> (usize, usize, usize) {
    let (mut nodes, mut bytes, mut depth) = (0, 0, 0);
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        nodes += 1;
        depth = depth.max(d);
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|c| (c, d + 1))),
            Value::Object(m) => {
                bytes += m.keys().map(String::len).sum::<usize>();
                stack.extend(m.values().map(|c| (c, d + 1)));
            }
            Value::String(s) => bytes += s.len(),
            _ => bytes += 8,
        }
    }
    (nodes, bytes, depth)
}

/// Within the bounds every accepted document keeps.
fn within_bounds(v: &Value) -> bool {
    use kres_config::{MAX_DEPTH, MAX_EXPANDED_BYTES, MAX_EXPANDED_NODES};
    let (nodes, bytes, depth) = weight(v);
    // Keys count as nodes for the patch budget, not for the parser's: allow both.
    nodes <= 2 * MAX_EXPANDED_NODES
        && bytes <= MAX_EXPANDED_BYTES + (1 << 20)
        && depth <= MAX_DEPTH + 1
}

/// Run `f` on a thread with a 2 MiB stack (a test thread's): no input may overflow it.
fn on_test_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .expect("thread")
        .join()
        .expect("no panic, no overflow")
}

/// YAML whose anchors build on each other: `levels` anchors, each holding `fan` aliases of
/// the previous one, nested `nest` levels deep, with a long string at the bottom.
fn alias_chain(levels: usize, fan: usize, nest: usize, long: usize) -> String {
    let mut text = format!("a0: &a0 {}\n", "x".repeat(long.max(1)));
    for i in 1..levels {
        let item = format!("*a{}", i - 1);
        let inner = vec![item; fan].join(", ");
        let open = "[".repeat(nest);
        let close = "]".repeat(nest);
        text.push_str(&format!("a{i}: &a{i} {open}{inner}{close}\n"));
    }
    text
}

/// One JSON Patch operation over a few paths, sometimes nested in each other.
fn patch_op() -> impl Strategy<Value = Value> {
    let path = prop::sample::select(vec![
        "/a", "/a/-", "/a/0", "/a/a", "/a/a/a", "/b", "/b/-", "/b/0", "/c", "",
    ]);
    (
        prop::sample::select(vec!["add", "copy", "move", "remove", "replace", "test"]),
        path.clone(),
        path,
        prop_oneof![
            Just(Value::Array(vec![])),
            Just(serde_json::json!({"a": []})),
            Just(Value::String("y".repeat(100_000))),
            (0u64..5).prop_map(Value::from),
        ],
    )
        .prop_map(|(op, path, from, value)| {
            serde_json::json!({"op": op, "path": path, "from": from, "value": value})
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, rng_seed: RngSeed::Fixed(64), ..ProptestConfig::default() })]

    #[test]
    fn alias_chains_stay_within_bounds_in_every_format(
        levels in 1usize..400,
        fan in 1usize..12,
        nest in 0usize..4,
        long in prop::sample::select(vec![1usize, 100, 10_000]),
    ) {
        let text = alias_chain(levels, fan, nest, long);
        let parsed = on_test_stack(move || parse_document(&text, Path::new("chain.yaml")));
        if let Ok(doc) = parsed {
            prop_assert!(within_bounds(&doc));
            // The same data as JSON and TOML parses (or is refused) within the bounds too.
            let json = serde_json::to_string(&doc).expect("json");
            let toml = toml::to_string(&doc).unwrap_or_default();
            let (j, t) = on_test_stack(move || {
                (
                    parse_document(&json, Path::new("chain.json")),
                    parse_document(&toml, Path::new("chain.toml")),
                )
            });
            if let Ok(j) = j {
                prop_assert!(within_bounds(&j));
            }
            if let Ok(t) = t {
                prop_assert!(within_bounds(&t));
            }
            check_no_panic(&doc, PathChecks::Lenient);
        }
    }

    #[test]
    fn patch_sequences_never_outgrow_their_budget(ops in prop::collection::vec(patch_op(), 1..60)) {
        let ops = Value::Array(ops);
        let start = serde_json::json!({"a": [], "b": ["x"]});
        let result = on_test_stack(move || kres_daemon::api::pointer::patch(&start, &ops));
        if let Ok(doc) = result {
            prop_assert!(within_bounds(&doc));
        }
    }
}
