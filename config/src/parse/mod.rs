//! Turning configuration text into a plain JSON value, the way upstream's `utils/modeling/parsing.py`
//! does it: JSON first, then YAML (YAML 1.1 scalar rules like PyYAML's `SafeLoader`), duplicate keys
//! rejected in both, and several documents deep-merged with [`data_combine`].
//!
//! Everything here works on untrusted text, so nothing panics: every failure is a [`ParseError`].

use std::collections::HashMap;

use serde_json::{Map, Number, Value};

mod block;
mod json;

use super::engine::py_only_value;
use json::{parse_json, JsonFailure};
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

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

/// Parse text as JSON, and when it is not JSON, as YAML (upstream's `try_to_parse`).
pub fn parse_json_or_yaml(text: &str) -> Result<Value, ParseError> {
    // A document in the plain block form is never JSON (its first line is `key:`), and the
    // direct reader gives what the full YAML reader would.
    if let Some(value) = block::read(text) {
        return Ok(value);
    }
    match parse_json(text) {
        Ok(v) => Ok(v),
        Err(JsonFailure::Duplicate(k)) => Err(ParseError::JsonDuplicateKey(short(k))),
        // PyYAML skips a byte order mark at the start of the stream (JSON does not)
        Err(JsonFailure::Syntax(json)) => parse_yaml(text.strip_prefix('\u{feff}').unwrap_or(text))
            .map_err(|e| match e {
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
            }),
    }
}

/// Like [`parse_json_or_yaml`], but only the top-level keys in `wanted` are kept (a document
/// that is not a mapping is returned whole). Whether the others' values are valid is not
/// decided: in a document in the plain block form they are passed over, or read only for
/// their form. A syntax error is reported when it lies in a wanted section, or when the
/// document is read whole.
pub fn parse_sections(text: &str, wanted: &[&str]) -> Result<Value, ParseError> {
    if let Some(part) = block::wanted_sections_text(text, wanted) {
        // The wanted sections alone, as a document of their own; when they do not read so,
        // the whole document is read, for its own error and line numbers.
        match parse_json_or_yaml(&part) {
            Ok(Value::Object(mut m)) => {
                m.retain(|k, _| wanted.contains(&k.as_str()));
                return Ok(Value::Object(m));
            }
            Ok(Value::Null) => return Ok(Value::Object(Map::new())),
            _ => {}
        }
    }
    if let Some(value) = block::read_sections(text, Some(wanted)) {
        return Ok(value);
    }
    Ok(match parse_json_or_yaml(text)? {
        Value::Object(mut m) => {
            m.retain(|k, _| wanted.contains(&k.as_str()));
            Value::Object(m)
        }
        other => other,
    })
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

// ---------------------------------------------------------------------------------------------
// YAML (1.1 scalar resolution, like PyYAML's SafeLoader)

enum YamlFailure {
    Duplicate { line: usize, column: usize },
    Other(String),
}

/// How big a finished node is: what an alias of it adds to the document.
#[derive(Debug, Clone, Copy, Default)]
struct Size {
    nodes: usize,
    /// Bytes of its scalars (strings by length, other scalars by a small constant).
    bytes: usize,
    /// Collection levels: 0 for a scalar.
    height: usize,
}

impl Size {
    /// The size of a resolved scalar (a Python-only value is a small mapping).
    fn of_scalar(v: &Value) -> Size {
        match v {
            Value::String(s) => Size {
                nodes: 1,
                bytes: s.len(),
                height: 0,
            },
            Value::Object(o) => Size {
                nodes: 1 + o.len(),
                bytes: o
                    .iter()
                    .map(|(k, v)| k.len() + v.as_str().map_or(8, str::len))
                    .sum(),
                height: 1,
            },
            _ => Size {
                nodes: 1,
                bytes: 8,
                height: 0,
            },
        }
    }

    /// Add a child.
    fn add(&mut self, child: Size) {
        self.nodes += child.nodes;
        self.bytes += child.bytes;
        self.height = self.height.max(child.height);
    }
}

/// A mapping key as Python compares keys: `1`, `1.0` and `True` are the same key.
#[derive(Debug, PartialEq, Eq, Hash)]
enum KeyForm {
    Number(u64),
    NaN,
    Null,
    Text(String),
    Other(String),
}

impl KeyForm {
    fn of(v: &Value) -> KeyForm {
        let num = match v {
            Value::Number(n) => n.as_f64(),
            Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
            _ => None,
        };
        match (num, v) {
            // NaN equals nothing, itself included: it never makes a duplicate, but it must
            // not collide with another key form either (each NaN is told apart by the caller).
            (Some(x), _) if x.is_nan() => KeyForm::NaN,
            (Some(x), _) => KeyForm::Number(if x == 0.0 { 0 } else { x.to_bits() }),
            (None, Value::Null) => KeyForm::Null,
            (None, Value::String(s)) => KeyForm::Text(s.clone()),
            (None, other) => KeyForm::Other(other.to_string()),
        }
    }
}

/// A node under construction.
enum Frame {
    Seq {
        items: Vec<Value>,
        anchor: usize,
        size: Size,
    },
    Map {
        map: Map<String, Value>,
        anchor: usize,
        size: Size,
        pending_key: Option<(String, Marker)>,
        /// The keys in order, kept for a `!!set` only (it is made of them).
        keys: Vec<Value>,
        /// The keys other than text as Python compares them, to find a duplicate in constant
        /// time (a text key is found in `map`).
        seen: std::collections::HashSet<KeyForm>,
        /// A `!!set` (a mapping whose keys are the items).
        set: bool,
    },
}

struct Builder {
    stack: Vec<Frame>,
    anchors: HashMap<usize, (Value, Size)>,
    documents: Vec<Value>,
    error: Option<YamlFailure>,
    /// Nodes and scalar bytes of the document so far, aliases expanded.
    expanded: Size,
}

impl Builder {
    fn fail(&mut self, e: YamlFailure) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    /// Count a node into the document's budget; false (and the error set) past a bound.
    fn spend(&mut self, size: Size) -> bool {
        self.expanded.nodes += size.nodes;
        self.expanded.bytes += size.bytes;
        if self.expanded.nodes > MAX_EXPANDED_NODES {
            self.fail(YamlFailure::Other(format!(
                "document expands to more than {MAX_EXPANDED_NODES} nodes through aliases"
            )));
            return false;
        }
        if self.expanded.bytes > MAX_EXPANDED_BYTES {
            self.fail(YamlFailure::Other(format!(
                "document expands to more than {MAX_EXPANDED_BYTES} bytes through aliases"
            )));
            return false;
        }
        true
    }

    /// Attach a finished node of `size`.
    fn push_node(&mut self, value: Value, size: Size, mark: Marker) {
        if let Some(Frame::Seq { size: parent, .. } | Frame::Map { size: parent, .. }) =
            self.stack.last_mut()
        {
            parent.add(size);
        }
        match self.stack.last_mut() {
            None => self.documents.push(value),
            Some(Frame::Seq { items, .. }) => items.push(value),
            Some(Frame::Map {
                map,
                pending_key,
                keys,
                seen,
                set,
                ..
            }) => match pending_key.take() {
                None => {
                    let key = match &value {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => if *b { "True" } else { "False" }.to_owned(),
                        Value::Null => "None".to_owned(),
                        Value::Array(_) | Value::Object(_) => {
                            let msg = format!(
                                "while constructing a mapping: found unacceptable key (unhashable type) at line {} column {}",
                                mark.line(),
                                mark.col() + 1
                            );
                            self.fail(YamlFailure::Other(msg));
                            return;
                        }
                    };
                    // Python's `key in mapping`: 1 == 1.0 == True, so compare the resolved values.
                    // A text key is its own map key: the map alone tells whether it was seen.
                    let dup = map.contains_key(&key)
                        || match &value {
                            Value::String(_) => false,
                            other => match KeyForm::of(other) {
                                KeyForm::NaN => false,
                                form => !seen.insert(form),
                            },
                        };
                    if dup {
                        self.fail(YamlFailure::Duplicate {
                            line: mark.line(),
                            column: mark.col() + 1,
                        });
                        return;
                    }
                    if *set {
                        keys.push(value);
                    }
                    *pending_key = Some((key, mark));
                }
                Some((key, _)) => {
                    map.insert(key, value);
                }
            },
        }
    }
}

impl Builder {
    /// An alias: a copy of its anchor's node, counted into the budget before it is made.
    fn on_alias(&mut self, id: usize, mark: Marker) {
        let Some((_, size)) = self.anchors.get(&id) else {
            self.fail(YamlFailure::Other(format!(
                "found undefined alias at line {}",
                mark.line()
            )));
            return;
        };
        let size = *size;
        // Checked before the copy is made: the copy itself is what must not grow.
        if self.stack.len() + size.height > MAX_DEPTH {
            self.fail(YamlFailure::Other(format!(
                "collections nest deeper than {MAX_DEPTH} levels through an alias at line {}",
                mark.line()
            )));
            return;
        }
        if !self.spend(size) {
            return;
        }
        let v = self
            .anchors
            .get(&id)
            .map(|(v, _)| v.clone())
            .unwrap_or_default();
        self.push_node(v, size, mark);
    }

    /// A scalar, resolved as PyYAML's `SafeLoader` would.
    fn on_scalar(
        &mut self,
        text: String,
        style: TScalarStyle,
        anchor: usize,
        tag: Option<&Tag>,
        mark: Marker,
    ) {
        match resolve_scalar(text, style, tag) {
            Ok(v) => {
                let size = Size::of_scalar(&v);
                if !self.spend(size) {
                    return;
                }
                if anchor > 0 {
                    self.anchors.insert(anchor, (v.clone(), size));
                }
                self.push_node(v, size, mark);
            }
            Err(msg) => self.fail(YamlFailure::Other(format!(
                "{msg} at line {} column {}",
                mark.line(),
                mark.col() + 1
            ))),
        }
    }

    /// A collection opens as `frame`, unless it would nest deeper than [`MAX_DEPTH`] or its
    /// tag is `refused` (why).
    fn open(&mut self, refused: Option<String>, frame: Frame) {
        if self.stack.len() >= MAX_DEPTH {
            self.fail(YamlFailure::Other(format!(
                "collections nest deeper than {MAX_DEPTH} levels"
            )));
            return;
        }
        if let Some(msg) = refused {
            self.fail(YamlFailure::Other(msg));
            return;
        }
        self.stack.push(frame);
    }

    /// A sequence opens.
    fn on_sequence_start(&mut self, anchor: usize, tag: Option<&Tag>) {
        let frame = Frame::Seq {
            items: Vec::new(),
            anchor,
            size: Size::default(),
        };
        self.open(check_collection_tag(tag, "seq"), frame);
    }

    /// A mapping (or a `!!set`) opens.
    fn on_mapping_start(&mut self, anchor: usize, tag: Option<&Tag>) {
        let set = tag.is_some_and(|t| t.handle == CORE_TAG && t.suffix == "set");
        let frame = Frame::Map {
            map: Map::new(),
            anchor,
            size: Size::default(),
            pending_key: None,
            keys: Vec::new(),
            seen: Default::default(),
            set,
        };
        self.open(check_collection_tag(tag, "map").filter(|_| !set), frame);
    }

    /// The innermost collection closes: it becomes a node of its parent (and its anchor's).
    fn on_collection_end(&mut self, mark: Marker) {
        let (value, anchor, inner) = match self.stack.pop() {
            Some(Frame::Seq {
                items,
                anchor,
                size,
            }) => (Value::Array(items), anchor, size),
            Some(Frame::Map {
                keys,
                anchor,
                size,
                set: true,
                ..
            }) => (py_only_value("set", Value::Array(keys)), anchor, size),
            Some(Frame::Map {
                map, anchor, size, ..
            }) => (Value::Object(map), anchor, size),
            None => {
                self.fail(YamlFailure::Other("unbalanced collection end".into()));
                return;
            }
        };
        let size = Size {
            nodes: inner.nodes + 1,
            bytes: inner.bytes,
            height: inner.height + 1,
        };
        if !self.spend(Size {
            nodes: 1,
            bytes: 0,
            height: 0,
        }) {
            return;
        }
        if anchor > 0 {
            self.anchors.insert(anchor, (value.clone(), size));
        }
        self.push_node(value, size, mark);
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        match ev {
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
            Event::Alias(id) => self.on_alias(id, mark),
            Event::Scalar(text, style, anchor, tag) => {
                self.on_scalar(text, style, anchor, tag.as_ref(), mark)
            }
            Event::SequenceStart(anchor, tag) => self.on_sequence_start(anchor, tag.as_ref()),
            Event::MappingStart(anchor, tag) => self.on_mapping_start(anchor, tag.as_ref()),
            Event::SequenceEnd | Event::MappingEnd => self.on_collection_end(mark),
        }
    }
}

const CORE_TAG: &str = "tag:yaml.org,2002:";

fn check_collection_tag(tag: Option<&Tag>, expected: &str) -> Option<String> {
    let tag = tag?;
    if tag.handle == CORE_TAG && tag.suffix == expected {
        return None;
    }
    Some(format!(
        "could not determine a constructor for the tag '{}{}'",
        tag.handle, tag.suffix
    ))
}

/// The scalar `text` as its tag, or as YAML 1.1's implicit resolution, says (taken whole when
/// it stays a string).
fn resolve_scalar(text: String, style: TScalarStyle, tag: Option<&Tag>) -> Result<Value, String> {
    if let Some(tag) = tag {
        let text = text.as_str();
        if tag.handle == "!" && tag.suffix.is_empty() {
            return Ok(Value::String(text.to_owned()));
        }
        if tag.handle != CORE_TAG {
            return Err(format!(
                "could not determine a constructor for the tag '{}{}'",
                tag.handle, tag.suffix
            ));
        }
        return match tag.suffix.as_str() {
            "str" => Ok(Value::String(text.to_owned())),
            "null" => Ok(Value::Null),
            "bool" => yaml_bool(text)
                .map(Value::Bool)
                .ok_or_else(|| format!("invalid boolean '{text}'")),
            "int" => yaml_int(text).ok_or_else(|| format!("invalid integer '{text}'")),
            "timestamp" => yaml_timestamp(text)
                .map(|class| py_only_value(class, Value::String(text.to_owned())))
                .ok_or_else(|| format!("invalid timestamp '{text}'")),
            "binary" => base64_decode(text)
                .map(|bytes| py_only_value("bytes", Value::String(py_bytes_repr(&bytes))))
                .ok_or_else(|| format!("failed to convert base64 data: '{text}'")),
            "float" => yaml_float(text)
                .or_else(|| yaml_int(text))
                .ok_or_else(|| format!("invalid float '{text}'")),
            other => Err(format!(
                "could not determine a constructor for the tag '{CORE_TAG}{other}'"
            )),
        };
    }
    if style != TScalarStyle::Plain {
        return Ok(Value::String(text));
    }
    // Every implicit type but text (null, booleans, numbers, timestamps, `.inf`, `<<`, `=`)
    // starts with a sign, a digit, a dot, one of these letters or a symbol: most names and
    // words are text at once.
    if text
        .as_bytes()
        .first()
        .is_some_and(|c| c.is_ascii_alphabetic() && !b"nNtTfFyYoO".contains(c))
    {
        return Ok(Value::String(text));
    }
    if text == "<<" {
        // PyYAML resolves `<<` to the merge tag, which upstream's loader cannot construct
        return Err(format!(
            "could not determine a constructor for the tag '{CORE_TAG}merge'"
        ));
    }
    if text == "=" {
        // likewise the YAML 1.1 value tag
        return Err(format!(
            "could not determine a constructor for the tag '{CORE_TAG}value'"
        ));
    }
    if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL") {
        return Ok(Value::Null);
    }
    if let Some(b) = yaml_bool(&text) {
        return Ok(Value::Bool(b));
    }
    if let Some(class) = yaml_timestamp(&text) {
        return Ok(py_only_value(class, Value::String(text)));
    }
    if let Some(v) = yaml_int(&text) {
        return Ok(v);
    }
    if let Some(v) = yaml_float(&text) {
        return Ok(v);
    }
    Ok(Value::String(text))
}

/// Standard base64 (whitespace ignored, padding optional), for `!!binary`.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
    {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from(acc >> bits).unwrap_or(0));
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Python's `str(bytes)`: `b'…'` with non-printable bytes escaped.
fn py_bytes_repr(bytes: &[u8]) -> String {
    let quote = if bytes.contains(&b'\'') && !bytes.contains(&b'"') {
        '"'
    } else {
        '\''
    };
    let mut out = format!("b{quote}");
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            _ if char::from(b) == quote => {
                out.push('\\');
                out.push(quote);
            }
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push(quote);
    out
}

/// PyYAML's YAML 1.1 timestamp resolver: `yyyy-mm-dd` is a date, with a time part a datetime
/// (the class name of the Python value).
fn yaml_timestamp(t: &str) -> Option<&'static str> {
    // `s` is 1 to `max` ASCII digits (exactly `max` when `exact`)
    let num = |s: &str, max: usize, exact: bool| {
        let len_ok = if exact {
            s.len() == max
        } else {
            (1..=max).contains(&s.len())
        };
        len_ok && s.bytes().all(|c| c.is_ascii_digit())
    };
    let b = t.as_bytes();
    // both forms start with a four-digit year and a dash
    if b.len() < 5 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return None;
    }
    if b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && num(&t[..4], 4, true)
        && num(&t[5..7], 2, true)
        && num(&t[8..], 2, true)
    {
        return Some("datetime.date");
    }
    // [0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(\.[0-9]*)?
    //   ([ \t]*(Z|[-+][0-9]{1,2}(:[0-9]{2})?))?
    let (date, rest) = t.split_at(t.find(['T', 't', ' ', '\t'])?);
    let date: Vec<&str> = date.split('-').collect();
    let date_ok =
        matches!(date[..], [y, m, d] if num(y, 4, true) && num(m, 2, false) && num(d, 2, false));
    let rest = match rest.strip_prefix(['T', 't']) {
        Some(r) => r,
        None => rest.trim_start_matches([' ', '\t']),
    };
    let time_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == ':' || c == '.'))
        .unwrap_or(rest.len());
    let (time, zone) = rest.split_at(time_end);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let hms: Vec<&str> = hms.split(':').collect();
    let time_ok = matches!(hms[..], [h, m, s] if num(h, 2, false) && num(m, 2, true) && num(s, 2, true))
        && frac.bytes().all(|c| c.is_ascii_digit());
    let zone = zone.trim_start_matches([' ', '\t']);
    let zone_ok = zone.is_empty() || zone == "Z" || {
        let z = zone.strip_prefix(['+', '-']).unwrap_or("");
        let (zh, zm) = z.split_once(':').unwrap_or((z, "00"));
        num(zh, 2, false) && num(zm, 2, true)
    };
    (date_ok && time_ok && zone_ok).then_some("datetime.datetime")
}

fn yaml_bool(t: &str) -> Option<bool> {
    match t {
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => Some(true),
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

/// The sign of a number as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sign {
    /// No sign, or `+`.
    Plus,
    /// `-`.
    Minus,
}

impl Sign {
    /// How the sign prefixes a number's text: `-` or nothing.
    fn prefix(self) -> &'static str {
        match self {
            Sign::Plus => "",
            Sign::Minus => "-",
        }
    }
}

/// A number's sign and the text after it.
fn split_sign(t: &str) -> (Sign, &str) {
    match t.as_bytes().first() {
        Some(b'-') => (Sign::Minus, &t[1..]),
        Some(b'+') => (Sign::Plus, &t[1..]),
        _ => (Sign::Plus, t),
    }
}

/// An integer as JSON holds it; beyond 64 bits, the stand-in for a Python int (PyYAML's ints
/// are unbounded).
fn int_value(sign: Sign, magnitude: u128) -> Option<Value> {
    let fits = match sign {
        Sign::Minus => i64::try_from(magnitude).map(|m| Value::from(-m)).ok(),
        Sign::Plus => u64::try_from(magnitude).map(Value::from).ok(),
    };
    Some(fits.unwrap_or_else(|| big_int(sign, &magnitude.to_string())))
}

/// The stand-in for an integer beyond 64 bits, from its decimal digits.
fn big_int(sign: Sign, digits: &str) -> Value {
    let digits = digits.trim_start_matches('0');
    py_only_value("int", Value::String(format!("{}{digits}", sign.prefix())))
}

/// PyYAML's YAML 1.1 int resolver: binary, octal, decimal, hex and base-60, `_` allowed.
fn yaml_int(t: &str) -> Option<Value> {
    let (sign, body) = split_sign(t);
    let parse_radix = |digits: &str, radix: u32| -> Option<u128> {
        let cleaned: String = digits.chars().filter(|c| *c != '_').collect();
        if cleaned.is_empty() {
            // PyYAML: "0b_" resolves as int but then fails to construct; treat as not-an-int
            return None;
        }
        u128::from_str_radix(&cleaned, radix).ok()
    };
    let all = |s: &str, f: fn(char) -> bool| !s.is_empty() && s.chars().all(|c| f(c) || c == '_');
    if let Some(d) = body.strip_prefix("0b") {
        if all(d, |c| c == '0' || c == '1') {
            return int_value(sign, parse_radix(d, 2)?);
        }
        return None;
    }
    if let Some(d) = body.strip_prefix("0x") {
        if all(d, |c| c.is_ascii_hexdigit()) {
            return int_value(sign, parse_radix(d, 16)?);
        }
        return None;
    }
    if body == "0" {
        return Some(Value::from(0));
    }
    if let Some(d) = body.strip_prefix('0') {
        if all(d, |c| ('0'..='7').contains(&c)) {
            return int_value(sign, parse_radix(d, 8)?);
        }
        return None;
    }
    if body.starts_with(|c: char| ('1'..='9').contains(&c)) {
        if all(body, |c| c.is_ascii_digit()) {
            return match parse_radix(body, 10) {
                Some(m) => int_value(sign, m),
                None => Some(big_int(sign, &body.replace('_', ""))),
            };
        }
        // base 60: [1-9][0-9_]*(:[0-5]?[0-9])+
        let mut parts = body.split(':');
        let first = parts.next()?;
        if !all(first, |c| c.is_ascii_digit()) {
            return None;
        }
        let mut acc = parse_radix(first, 10)?;
        let mut any = false;
        for p in parts {
            let ok = matches!(p.len(), 1 | 2)
                && p.chars().all(|c| c.is_ascii_digit())
                && (p.len() == 1 || p.as_bytes()[0] <= b'5');
            if !ok {
                return None;
            }
            acc = acc.checked_mul(60)?.checked_add(p.parse::<u128>().ok()?)?;
            any = true;
        }
        if any {
            return int_value(sign, acc);
        }
    }
    None
}

/// PyYAML's YAML 1.1 float resolver (a dot is required; exponents need a sign).
fn yaml_float(t: &str) -> Option<Value> {
    let (sign, body) = split_sign(t);
    // JSON cannot hold infinities and NaN: Python-only stand-ins
    if matches!(body, ".inf" | ".Inf" | ".INF") {
        let text = format!("{}inf", sign.prefix());
        return Some(py_only_value("float", Value::String(text)));
    }
    if matches!(t, ".nan" | ".NaN" | ".NAN") {
        return Some(py_only_value("float", Value::String("nan".into())));
    }
    let digits_ = |s: &str| s.chars().all(|c| c.is_ascii_digit() || c == '_');
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => {
            let exp = &body[i + 1..];
            let (_, exp_digits) = split_sign(exp);
            if !(exp.starts_with(['+', '-'])
                && !exp_digits.is_empty()
                && exp_digits.chars().all(|c| c.is_ascii_digit()))
            {
                return None;
            }
            (&body[..i], Some(exp))
        }
        None => (body, None),
    };
    let (int_part, frac) = mantissa.split_once('.')?;
    let valid = if int_part.is_empty() {
        // \.[0-9][0-9_]* — no sign allowed in this alternative
        sign == Sign::Plus
            && !t.starts_with('+')
            && frac.starts_with(|c: char| c.is_ascii_digit())
            && digits_(frac)
    } else if int_part.contains(':') {
        exponent.is_none() && digits_(frac) && int_part.starts_with(|c: char| c.is_ascii_digit())
    } else {
        int_part.starts_with(|c: char| c.is_ascii_digit()) && digits_(int_part) && digits_(frac)
    };
    if !valid {
        return None;
    }
    let value = if int_part.contains(':') {
        let mut acc = 0f64;
        for (i, p) in int_part.split(':').enumerate() {
            let p: String = p.chars().filter(|c| *c != '_').collect();
            let ok =
                i == 0 || (matches!(p.len(), 1 | 2) && (p.len() == 1 || p.as_bytes()[0] <= b'5'));
            if !ok || p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            acc = acc * 60.0 + p.parse::<f64>().ok()?;
        }
        let frac: String = frac.chars().filter(|c| *c != '_').collect();
        acc + format!("0.{frac}0").parse::<f64>().ok()?
    } else {
        let cleaned: String = format!(
            "{int_part}.{frac}{}",
            exponent.map(|e| format!("e{e}")).unwrap_or_default()
        )
        .chars()
        .filter(|c| *c != '_')
        .collect();
        let cleaned = if cleaned.starts_with('.') {
            format!("0{cleaned}")
        } else {
            cleaned
        };
        let cleaned = cleaned.replace(".e", ".0e");
        let cleaned = if cleaned.ends_with('.') {
            format!("{cleaned}0")
        } else {
            cleaned
        };
        cleaned.parse::<f64>().ok()?
    };
    let value = match sign {
        Sign::Plus => value,
        Sign::Minus => -value,
    };
    Number::from_f64(value).map(Value::Number)
}

/// PyYAML never skips a tab between tokens ("Do not use tabs in YAML!"): a tab is accepted only
/// inside a quoted scalar, a comment, or the content of a block scalar. Everywhere else (as
/// indentation, after a value, after a flow comma, inside a plain scalar) it is a scanner error,
/// where a YAML 1.2 parser such as `yaml-rust2` accepts some of them. Returns the position
/// (1-based line, 1-based column) of the first offending tab.
fn pyyaml_stray_tab(text: &str) -> Option<(usize, usize)> {
    if !text.contains('\t') {
        return None;
    }
    enum Quoted {
        No,
        Single,
        Double,
    }
    let mut quoted = Quoted::No;
    let mut flow_level = 0usize;
    // the parent indentation of the block scalar we are inside
    let mut block: Option<usize> = None;
    for (lineno, raw_line) in text.split('\n').enumerate() {
        let line = raw_line.strip_suffix('\r').unwrap_or(raw_line);
        let indent = line.len() - line.trim_start_matches(' ').len();
        if let Some(parent) = block {
            let rest = &line[indent..];
            if rest.is_empty() || indent > parent {
                continue;
            }
            block = None;
        }
        let chars: Vec<char> = line.chars().collect();
        let mut in_plain = false;
        let mut after_space = true;
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let next = chars.get(i + 1).copied();
            match quoted {
                Quoted::Single => {
                    if c == '\'' {
                        if next == Some('\'') {
                            i += 1;
                        } else {
                            quoted = Quoted::No;
                        }
                    }
                    i += 1;
                    continue;
                }
                Quoted::Double => {
                    if c == '\\' {
                        i += 1;
                    } else if c == '"' {
                        quoted = Quoted::No;
                    }
                    i += 1;
                    continue;
                }
                Quoted::No => {}
            }
            let token_start = !in_plain;
            match c {
                '\t' => return Some((lineno + 1, i + 1)),
                ' ' => {
                    after_space = true;
                    i += 1;
                    continue;
                }
                '#' if after_space => break,
                ':' if next.is_none_or(|n| n == ' ') || flow_level > 0 => in_plain = false,
                ',' if flow_level > 0 => in_plain = false,
                '[' | '{' if token_start || flow_level > 0 => flow_level += 1,
                ']' | '}' if flow_level > 0 => {
                    flow_level -= 1;
                    in_plain = false;
                }
                '-' | '?' if token_start && next.is_none_or(|n| n == ' ') => {}
                '\'' if token_start => quoted = Quoted::Single,
                '"' if token_start => quoted = Quoted::Double,
                '|' | '>' if token_start && flow_level == 0 => {
                    block = Some(indent);
                    break;
                }
                '&' | '*' | '!' if token_start => {
                    while i + 1 < chars.len() && !matches!(chars[i + 1], ' ' | '\t') {
                        i += 1;
                    }
                }
                _ => in_plain = true,
            }
            after_space = false;
            i += 1;
        }
    }
    None
}

fn parse_yaml(text: &str) -> Result<Value, YamlFailure> {
    if let Some((line, column)) = pyyaml_stray_tab(text) {
        let snippet: String = text
            .lines()
            .nth(line - 1)
            .unwrap_or_default()
            .chars()
            .take(75)
            .collect();
        return Err(YamlFailure::Other(format!(
            "while scanning for the next token\nfound character '\\t' that cannot start any token\n  \
             in \"<unicode string>\", line {line}, column {column}:\n    {snippet}\n    {caret:>column$}",
            caret = '^'
        )));
    }
    let mut builder = Builder {
        stack: Vec::new(),
        anchors: HashMap::new(),
        documents: Vec::new(),
        error: None,
        expanded: Size::default(),
    };
    // drive the parser event by event: its own `load` recurses once per nesting level
    let mut parser = Parser::new_from_str(text);
    loop {
        let (event, mark) = parser
            .next_token()
            .map_err(|e| YamlFailure::Other(e.to_string()))?;
        let end = event == Event::StreamEnd;
        builder.on_event(event, mark);
        if let Some(e) = builder.error.take() {
            return Err(e);
        }
        if end {
            break;
        }
    }
    match builder.documents.len() {
        0 => Ok(Value::Null),
        1 => Ok(builder.documents.pop().unwrap_or(Value::Null)),
        _ => Err(YamlFailure::Other(
            "expected a single document in the stream, but found another document".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
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
