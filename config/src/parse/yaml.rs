//! The full YAML reader, as PyYAML's `SafeLoader` reads (YAML 1.1 scalars through
//! `scalar`, tabs where PyYAML refuses them, duplicate keys as Python compares them), with
//! aliases expanded within bounds ([`super::MAX_EXPANDED_NODES`], [`super::MAX_EXPANDED_BYTES`],
//! [`super::MAX_DEPTH`]). It reads every document; the block reader (`block`) is its fast
//! path for the plain block form.

use std::collections::HashMap;

use serde_json::{Map, Value};
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use super::scalar::{resolve_scalar, ScalarError, CORE_TAG};
use super::{py_only_value, MAX_DEPTH, MAX_EXPANDED_BYTES, MAX_EXPANDED_NODES};

pub(super) enum YamlFailure {
    Duplicate { line: usize, column: usize },
    Other(String),
}

/// How big a finished node is: what an alias of it adds to the document.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Size {
    /// Nodes, the node itself included.
    pub(super) nodes: usize,
    /// Bytes of its scalars (strings by length, other scalars by a small constant).
    pub(super) bytes: usize,
    /// Collection levels: 0 for a scalar.
    pub(super) height: usize,
}

impl Size {
    /// The size of a resolved scalar (a Python-only value is a small mapping).
    pub(super) fn of_scalar(v: &Value) -> Size {
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

/// Why a collection's `tag` has no constructor, unless it is none or the core tag `expected`.
fn check_collection_tag(tag: Option<&Tag>, expected: &str) -> Option<String> {
    let tag = tag?;
    if tag.handle == CORE_TAG && tag.suffix == expected {
        return None;
    }
    let tag = format!("{}{}", tag.handle, tag.suffix);
    Some(ScalarError::NoConstructor(tag).to_string())
}

/// PyYAML never skips a tab between tokens ("Do not use tabs in YAML!"): a tab is accepted only
/// inside a quoted scalar, a comment, or the content of a block scalar. Everywhere else (as
/// indentation, after a value, after a flow comma, inside a plain scalar) it is a scanner error,
/// where a YAML 1.2 parser such as `yaml-rust2` accepts some of them. Returns the position
/// (1-based line, 1-based column) of the first offending tab.
pub(super) fn pyyaml_stray_tab(text: &str) -> Option<(usize, usize)> {
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

pub(super) fn parse_yaml(text: &str) -> Result<Value, YamlFailure> {
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
