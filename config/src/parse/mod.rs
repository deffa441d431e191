//! Turning configuration text into a plain JSON value, the way upstream's `utils/modeling/parsing.py`
//! does it: JSON first, then YAML (YAML 1.1 scalar rules like PyYAML's `SafeLoader`), duplicate keys
//! rejected in both, and several documents deep-merged with [`data_combine`].
//!
//! One module per reader, tried in this order ([`read`], [`read_sections`]):
//! - `cut` (only some top-level sections wanted): the wanted sections cut out by the margin
//!   and read alone ([`CutDeclined`] says why not);
//! - `block` (the fast path of the full YAML reader for the plain block form): the document, or
//!   why it is not in that form ([`BlockDeclined`]);
//! - `json`: Python's `json`, duplicate keys noted by the reader itself;
//! - `yaml`: PyYAML's `SafeLoader`, which reads every document or gives the error.
//!
//! The [`Route`] says which reader answered and why each faster one declined; `scalar`
//! resolves YAML 1.1 scalars for both YAML readers.
//!
//! Everything here works on untrusted text, so nothing panics: every failure is a [`ParseError`].

use serde_json::{Map, Number, Value};

mod block;
mod cut;
mod json;
mod scalar;
mod yaml;

use super::engine::py_only_value;
pub use block::BlockDeclined;
pub use cut::CutDeclined;
use json::{parse_json, JsonFailure};
use scalar::{big_int, resolve_scalar, Sign};
use yaml::{parse_yaml, Size, YamlFailure};

/// Upper bound on the number of nodes an alias-heavy YAML document may expand to (a guard against
/// "billion laughs" documents; PyYAML shares aliased objects, we copy them).
pub const MAX_EXPANDED_NODES: usize = 1_000_000;

/// Upper bound on collection nesting, aliases included (deeper values would overflow the stack
/// when walked or dropped).
pub const MAX_DEPTH: usize = 256;

/// Upper bound on the bytes of scalars a YAML document may hold once its aliases are expanded
/// (one long string referenced many times must not become gigabytes).
pub const MAX_EXPANDED_BYTES: usize = 64 << 20;

/// Why a document could not be turned into data.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParseError {
    /// Syntactically valid JSON that repeats a key in one object.
    #[error("Duplicate attribute key detected: {0}")]
    JsonDuplicateKey(String),
    /// A YAML mapping that repeats a key (upstream prints PyYAML's mark with a snippet).
    #[error("duplicate key detected:   in \"<unicode string>\", line {line}, column {column}:\n    {snippet}\n    {caret:>column$}")]
    YamlDuplicateKey {
        line: usize,
        column: usize,
        snippet: String,
        caret: char,
    },
    /// Neither JSON nor YAML.
    #[error("failed to parse data, JSON: {json}, YAML: {yaml}")]
    NeitherJsonNorYaml { json: String, yaml: String },
    /// Invalid TOML.
    #[error("failed to parse TOML: {0}")]
    Toml(String),
    /// A merge of two documents hit the same non-mapping key twice.
    #[error("Configuration validation error detected:\n\t[{path}] duplicity key '{key}' with value in data")]
    Duplicity { path: String, key: String },
    /// The top level of a document is not a mapping.
    #[error("expected a mapping at the top level of the configuration, found {0}")]
    NotAMapping(&'static str),
}

/// The longest piece of a parser's message we repeat: parsers quote the input back, and an
/// answer must stay small whatever the input.
pub const MAX_QUOTED: usize = 300;

/// `text` cut to [`MAX_QUOTED`] bytes, saying how long it was.
pub fn short(text: String) -> String {
    super::cut(text, MAX_QUOTED)
}

/// The readers a configuration text may be read by. The block reader is the fast path of
/// the full YAML reader for the plain block form; JSON is tried before YAML, as upstream does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// `block`: the plain block form most configurations are written in.
    Block,
    /// `json`: Python's `json`.
    Json,
    /// `yaml`: PyYAML's `SafeLoader`; it reads every document, or says why not.
    Yaml,
}

/// Why a reader left the text to the next one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Declined {
    /// The wanted sections were not cut out of the text ([`parse_sections`] only).
    Cut(CutDeclined),
    /// The text is not in the plain block form.
    Block(BlockDeclined),
    /// The text is not JSON (`serde_json`'s message).
    Json(String),
}

/// How a text was read: which reader gave the answer, and why each one tried before it did
/// not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Whether only the wanted sections, cut out of the text, were read.
    pub cut: bool,
    /// Why the readers before it left the text, in the order they were tried.
    pub declined: Vec<Declined>,
    /// The reader whose value, or error, is the answer.
    pub taken: Reader,
}

/// Parse text as JSON, and when it is not JSON, as YAML (upstream's `try_to_parse`).
pub fn parse_json_or_yaml(text: &str) -> Result<Value, ParseError> {
    read(text).0
}

/// [`parse_json_or_yaml`], with the route the text took.
pub fn read(text: &str) -> (Result<Value, ParseError>, Route) {
    let mut declined = Vec::new();
    // A document in the plain block form is never JSON (its first line is `key:`), and the
    // direct reader gives what the full YAML reader would.
    match block::read(text) {
        Ok(value) => return (Ok(value), route(declined, Reader::Block)),
        Err(why) => declined.push(Declined::Block(why)),
    }
    let (result, taken) = json_then_yaml(text, &mut declined);
    (result, route(declined, taken))
}

fn route(declined: Vec<Declined>, taken: Reader) -> Route {
    Route {
        cut: false,
        declined,
        taken,
    }
}

/// The JSON reader's answer, or, when the text is not JSON, the full YAML reader's.
fn json_then_yaml(text: &str, declined: &mut Vec<Declined>) -> (Result<Value, ParseError>, Reader) {
    let json = match parse_json(text) {
        Ok(v) => return (Ok(v), Reader::Json),
        Err(JsonFailure::Duplicate(k)) => {
            return (Err(ParseError::JsonDuplicateKey(short(k))), Reader::Json)
        }
        Err(JsonFailure::Syntax(json)) => json,
    };
    declined.push(Declined::Json(json.clone()));
    // PyYAML skips a byte order mark at the start of the stream (JSON does not)
    let yaml = parse_yaml(text.strip_prefix('\u{feff}').unwrap_or(text)).map_err(|e| match e {
        YamlFailure::Duplicate { line, column } => {
            let snippet = text
                .lines()
                .nth(line.saturating_sub(1))
                .unwrap_or_default()
                .chars()
                .take(75)
                .collect();
            ParseError::YamlDuplicateKey {
                line,
                column,
                snippet,
                caret: '^',
            }
        }
        YamlFailure::Other(yaml) => ParseError::NeitherJsonNorYaml {
            json: short(json),
            yaml: short(yaml),
        },
    });
    (yaml, Reader::Yaml)
}

/// Like [`parse_json_or_yaml`], but only the top-level keys in `wanted` are kept (a document
/// that is not a mapping is returned whole). Whether the others' values are valid is not
/// decided: in a document in the plain block form they are passed over, or read only for
/// their form. A syntax error is reported when it lies in a wanted section, or when the
/// document is read whole.
pub fn parse_sections(text: &str, wanted: &[&str]) -> Result<Value, ParseError> {
    read_sections(text, wanted).0
}

/// [`parse_sections`], with the route the text took.
pub fn read_sections(text: &str, wanted: &[&str]) -> (Result<Value, ParseError>, Route) {
    let keep_wanted = |v: Value| match v {
        Value::Object(mut m) => {
            m.retain(|k, _| wanted.contains(&k.as_str()));
            Value::Object(m)
        }
        other => other,
    };
    let mut declined = Vec::new();
    match cut::wanted_sections_text(text, wanted) {
        // The wanted sections alone, as a document of their own; when they do not read so,
        // the whole document is read, for its own error and line numbers.
        Ok(part) => match read(&part) {
            (Ok(v @ Value::Object(_)), route) => {
                return (Ok(keep_wanted(v)), Route { cut: true, ..route })
            }
            (Ok(Value::Null), route) => {
                return (Ok(Value::Object(Map::new())), Route { cut: true, ..route })
            }
            _ => declined.push(Declined::Cut(CutDeclined::Unreadable)),
        },
        Err(why) => declined.push(Declined::Cut(why)),
    }
    match block::read_sections(text, Some(wanted)) {
        Ok(value) => return (Ok(value), route(declined, Reader::Block)),
        Err(why) => declined.push(Declined::Block(why)),
    }
    let (result, taken) = json_then_yaml(text, &mut declined);
    (result.map(keep_wanted), route(declined, taken))
}

/// Parse TOML text into the same JSON data model.
pub fn parse_toml(text: &str) -> Result<Value, ParseError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ParseError::Toml(short(e.to_string())))?;
    Ok(toml_to_json(toml::Value::Table(table)))
}

fn toml_to_json(v: toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => {
            Value::Object(t.into_iter().map(|(k, v)| (k, toml_to_json(v))).collect())
        }
    }
}

/// Deep-merge `additional` into `data` (upstream's `data_combine`): mappings merge recursively, any
/// other collision is an error.
pub fn data_combine(
    data: &mut Map<String, Value>,
    additional: Map<String, Value>,
    path: &str,
) -> Result<(), ParseError> {
    for (key, val) in additional {
        match (data.get_mut(&key), val) {
            (None, val) => {
                data.insert(key, val);
            }
            (Some(Value::Object(existing)), Value::Object(more)) => {
                let sub = format!("{path}/{key}");
                data_combine(existing, more, &sub)?;
            }
            (Some(_), _) => {
                return Err(ParseError::Duplicity {
                    path: path.to_owned(),
                    key,
                });
            }
        }
    }
    Ok(())
}

/// Name of a JSON value's kind, for messages.
pub fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::yaml::pyyaml_stray_tab;
    use super::*;
    use serde_json::json;

    #[track_caller]
    fn yaml(text: &str) -> Value {
        match parse_json_or_yaml(text) {
            Ok(v) => v,
            Err(e) => panic!("{text:?}: {e}"),
        }
    }

    #[test]
    fn yaml_scalars_follow_yaml_1_1() {
        let cases = [
            ("a: yes", json!({"a": true})),
            ("a: No", json!({"a": false})),
            ("a: on", json!({"a": true})),
            ("a: ~", json!({"a": null})),
            ("a:", json!({"a": null})),
            ("a: 010", json!({"a": 8})),
            ("a: 0x1f", json!({"a": 31})),
            ("a: 1_000", json!({"a": 1000})),
            ("a: 1:20", json!({"a": 80})),
            ("a: 1e5", json!({"a": "1e5"})),
            ("a: 1.5", json!({"a": 1.5})),
            ("a: 1.0e+2", json!({"a": 100.0})),
            ("a: '5'", json!({"a": "5"})),
            ("a: 100M", json!({"a": "100M"})),
            ("a: !!str 5", json!({"a": "5"})),
            ("a: 09", json!({"a": "09"})),
            ("a: -5", json!({"a": -5})),
        ];
        for (text, expected) in cases {
            assert_eq!(yaml(text), expected, "{text}");
        }
    }

    #[test]
    fn json_reads_what_python_json_reads() {
        let v = yaml(
            r#"{"a": NaN, "b": -Infinity, "c": 123456789012345678901234567890, "d": "NaN -1e999", "e": [1, -2, 1.5e3]}"#,
        );
        assert_eq!(v["a"], py_only_value("float", json!("nan")));
        assert_eq!(v["b"], py_only_value("float", json!("-inf")));
        assert_eq!(
            v["c"],
            py_only_value("int", json!("123456789012345678901234567890"))
        );
        assert_eq!(v["d"], json!("NaN -1e999"));
        assert_eq!(v["e"], json!([1, -2, 1500.0]));
    }

    #[test]
    fn tabs_are_rejected_where_pyyaml_rejects_them() {
        for text in [
            "workers: 1\t\n",
            "forward:\n  - {subtree: a.example,\tservers: [192.0.2.1]}\n",
            "cache:\n\tsize-max: 1M\n",
            "nsid: a\tb\n",
            "- 'a'\t\n",
        ] {
            assert!(pyyaml_stray_tab(text).is_some(), "{text:?}");
            assert!(parse_json_or_yaml(text).is_err(), "{text:?}");
        }
        for text in [
            "nsid: 'a\tb'\n",
            "nsid: \"a\\\"\tb\"\n",
            "workers: 1 #\tcomment\n",
            "lua:\n  script: |\n    a\tb\n\tc\n  \n",
            "lua:\n  script: |\n    x = 1\n    y\t= 2\nworkers: 1\n",
            "lua:\n  script: |\n    a\n    \tb\n",
            "lua:\n  script: >-\n    a\n\n    \tb\nworkers: 2\n",
            "a: \"x\n\ty\"\n",
            "a: [1, 2]  # c\t\n",
            "nsid: it's\n",
        ] {
            let blocked = pyyaml_stray_tab(text);
            let expect_tab_error = text.contains("\n\tc");
            assert_eq!(blocked.is_some(), expect_tab_error, "{text:?}");
        }
        // JSON allows tabs as whitespace, and JSON is tried first
        assert_eq!(yaml("{\"workers\":\t1}"), json!({"workers": 1}));
    }

    #[test]
    fn anchors_and_aliases_are_resolved() {
        let v = yaml("x: &a {p: 1}\ny: *a\nz: [&b 5, *b]");
        assert_eq!(v, json!({"x": {"p": 1}, "y": {"p": 1}, "z": [5, 5]}));
    }

    #[test]
    fn duplicate_keys_are_rejected() {
        assert!(matches!(
            parse_json_or_yaml("a: 1\na: 2"),
            Err(ParseError::YamlDuplicateKey { .. })
        ));
        assert!(matches!(
            parse_json_or_yaml("1: 1\n1.0: 2"),
            Err(ParseError::YamlDuplicateKey { .. })
        ));
        assert_eq!(
            parse_json_or_yaml(r#"{"a": 1, "a": 2}"#),
            Err(ParseError::JsonDuplicateKey("a".into()))
        );
        assert!(matches!(
            parse_json_or_yaml("1: 1\ntrue: 2"),
            Err(ParseError::YamlDuplicateKey { .. })
        ));
        // Many keys: every one is checked against every other without comparing each pair.
        let many: String = (0..50_000).map(|i| format!("k{i}: {i}\n")).collect();
        assert_eq!(yaml(&many).as_object().map(|o| o.len()), Some(50_000));
        let dup = format!("{many}k49999: again\n");
        assert!(matches!(
            parse_json_or_yaml(&dup),
            Err(ParseError::YamlDuplicateKey { line: 50001, .. })
        ));
    }

    /// Run `f` on a thread with a small stack, as a proof that it does not recurse per level.
    fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(f)
            .expect("thread")
            .join()
            .expect("no overflow")
    }

    #[test]
    fn aliases_cannot_nest_past_the_depth_limit() {
        // Each anchor nests the previous one a level deeper: 22,000 levels from a few KB.
        let mut doc = String::from("a0: &a0 [x]\n");
        for i in 1..22_000 {
            doc.push_str(&format!("a{i}: &a{i} [*a{}]\n", i - 1));
        }
        let err = on_small_stack(move || parse_json_or_yaml(&doc).expect_err("refused"));
        assert!(err.to_string().contains("deeper than 256 levels"), "{err}");
        // Up to the limit it is fine.
        let mut doc = String::from("a0: &a0 [x]\n");
        for i in 1..200 {
            doc.push_str(&format!("a{i}: &a{i} [*a{}]\n", i - 1));
        }
        assert!(parse_json_or_yaml(&doc).is_ok());
    }

    #[test]
    fn aliases_cannot_amplify_past_the_size_limit() {
        let long = "x".repeat(10_000);
        let mut doc = format!("s: &s {long}\nl:\n");
        for _ in 0..50_000 {
            doc.push_str("  - *s\n");
        }
        let err = parse_json_or_yaml(&doc).expect_err("refused");
        let text = err.to_string();
        assert!(text.contains("bytes through aliases"), "{text}");
        // The error does not quote the value back.
        assert!(text.len() < 2_000, "{} bytes of error", text.len());
    }

    #[test]
    fn deep_json_and_toml_are_refused_without_overflow() {
        let json = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let err = on_small_stack(move || parse_json_or_yaml(&json).expect_err("refused"));
        assert!(err.to_string().len() < 2_000);
        let toml = format!("a = {}{}", "[".repeat(100_000), "]".repeat(100_000));
        let err = on_small_stack(move || parse_toml(&toml).expect_err("refused"));
        assert!(err.to_string().len() < 2_000, "{err}");
        let yaml = format!("a: {}{}", "[".repeat(100_000), "]".repeat(100_000));
        let err = on_small_stack(move || parse_json_or_yaml(&yaml).expect_err("refused"));
        assert!(err.to_string().len() < 2_000);
    }

    #[test]
    fn each_document_takes_one_route_and_says_why_the_faster_ones_declined() {
        let block = Declined::Block;
        let not_json = |text: &str| match parse_json(text) {
            Err(JsonFailure::Syntax(message)) => Declined::Json(message),
            other => panic!("{text:?} is JSON: {other:?}"),
        };
        let check = |text: &str, declined: Vec<Declined>, taken: Reader| {
            let (result, route) = read(text);
            assert!(result.is_ok() || taken != Reader::Block, "{text:?}");
            let expected = Route {
                cut: false,
                declined,
                taken,
            };
            assert_eq!(route, expected, "{text:?}");
        };
        check("a: 1\nb:\n  - x\n", vec![], Reader::Block);
        check(
            r#"{"a": 1}"#,
            vec![block(BlockDeclined::Construct)],
            Reader::Json,
        );
        // a repeated JSON key is JSON's answer
        check(
            r#"{"a": 1, "a": 2}"#,
            vec![block(BlockDeclined::Construct)],
            Reader::Json,
        );
        check(
            "a: {b: 1}\n",
            vec![block(BlockDeclined::Construct), not_json("a: {b: 1}\n")],
            Reader::Yaml,
        );
        check(
            "a: 1\na: 2\n",
            vec![block(BlockDeclined::DuplicateKey), not_json("a: 1\na: 2\n")],
            Reader::Yaml,
        );
        check(
            "a: \u{e9}\n",
            vec![
                block(BlockDeclined::NotPrintableAscii),
                not_json("a: \u{e9}\n"),
            ],
            Reader::Yaml,
        );
        check(
            "",
            vec![block(BlockDeclined::Empty), not_json("")],
            Reader::Yaml,
        );
    }

    #[test]
    fn sections_are_cut_out_or_the_document_is_read_and_the_route_says_which() {
        let wanted = ["rundir", "logging"];
        let sections = |text: &str| {
            let (result, route) = read_sections(text, &wanted);
            (result.map_err(|e| e.to_string()), route)
        };
        // cut out, then read by the block reader
        let (value, route) = sections("rundir: /r\nother:\n  - x\nlogging:\n  level: info\n");
        assert_eq!(
            value,
            Ok(json!({"rundir": "/r", "logging": {"level": "info"}}))
        );
        assert_eq!(
            route,
            Route {
                cut: true,
                declined: vec![],
                taken: Reader::Block
            }
        );
        // not cut (a quote in a section passed over), read by the block reader whole
        let (value, route) = sections("rundir: /r\nother: 'x'\n");
        assert_eq!(value, Ok(json!({"rundir": "/r"})));
        assert_eq!(
            route,
            Route {
                cut: false,
                declined: vec![Declined::Cut(CutDeclined::FlowPassedOver)],
                taken: Reader::Block
            }
        );
        // the cut reads as no mapping: the whole document gives its error, from YAML
        let text = "rundir: a: b\n";
        let (value, route) = sections(text);
        assert!(value.is_err());
        assert_eq!(route.taken, Reader::Yaml);
        assert_eq!(
            route.declined[..2],
            [
                Declined::Cut(CutDeclined::Unreadable),
                Declined::Block(BlockDeclined::Construct)
            ]
        );
        // JSON is never cut
        let (value, route) = sections(r#"{"rundir": "/r", "x": 1}"#);
        assert_eq!(value, Ok(json!({"rundir": "/r"})));
        assert_eq!(route.taken, Reader::Json);
        assert_eq!(
            route.declined,
            [
                Declined::Cut(CutDeclined::MarginLine),
                Declined::Block(BlockDeclined::Construct)
            ]
        );
    }

    #[test]
    fn json_is_tried_first() {
        assert_eq!(yaml(r#"{"a": [1, 2.5, "x"]}"#), json!({"a": [1, 2.5, "x"]}));
    }

    #[test]
    fn data_combine_merges_maps_and_rejects_scalars() {
        let mut a = json!({"x": {"y": 1}, "k": 1})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let b = json!({"x": {"z": 2}})
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert_eq!(data_combine(&mut a, b, ""), Ok(()));
        assert_eq!(
            Value::Object(a.clone()),
            json!({"x": {"y": 1, "z": 2}, "k": 1})
        );
        let c = json!({"x": {"y": 3}})
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            data_combine(&mut a, c, ""),
            Err(ParseError::Duplicity {
                path: "/x".into(),
                key: "y".into()
            })
        );
    }

    #[test]
    fn multiple_documents_and_garbage_fail() {
        assert!(parse_json_or_yaml("a: 1\n---\nb: 2").is_err());
        assert!(parse_json_or_yaml("a: [").is_err());
        assert!(parse_json_or_yaml("a: !foo x").is_err());
        assert!(parse_json_or_yaml("a: =").is_err());
        assert!(parse_json_or_yaml("a: <<").is_err());
        assert_eq!(parse_json_or_yaml("a: '='"), Ok(json!({"a": "="})));
    }

    #[test]
    fn toml_parses() {
        assert_eq!(
            parse_toml("workers = 2\n[cache]\nsize-max = '10M'"),
            Ok(json!({"workers": 2, "cache": {"size-max": "10M"}}))
        );
    }
}
