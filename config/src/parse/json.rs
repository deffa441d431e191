//! The JSON reader, reading what Python's `json` reads: duplicate keys are refused (as
//! upstream's `_json_raise_duplicates` hook does), and `NaN`, `Infinity`, `-Infinity` and
//! integers beyond 64 bits, which `serde_json` does not read, become Python-only stand-ins.
//!
//! Both are kept out of band: the reader notes a repeated key in its own state (serde's error
//! text is never parsed), and each Python-only token is replaced by a plain `0` before
//! `serde_json` reads the text, its stand-in kept in a table by its place among the
//! document's scalar values (no string of the document can be taken for one).

use std::cell::{Cell, RefCell};
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::{big_int, py_only_value, Sign};

/// Why a text is not read as JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum JsonFailure {
    /// Not JSON: `serde_json`'s message.
    #[error("{0}")]
    Syntax(String),
    /// Valid JSON, but an object repeats this key.
    #[error("duplicate key {0}")]
    Duplicate(String),
}

/// A value Python's `json` reads and `serde_json` does not.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PythonToken {
    /// `NaN`, `Infinity` or `-Infinity`, as Python prints the float (`nan`, `inf`, `-inf`).
    Float(&'static str),
    /// An integer beyond 64 bits: its sign and decimal digits.
    BigInt { negative: bool, digits: String },
}

impl PythonToken {
    /// The stand-in the document holds for it.
    fn value(&self) -> Value {
        match self {
            PythonToken::Float(text) => py_only_value("float", Value::String((*text).to_owned())),
            PythonToken::BigInt { negative, digits } => {
                let sign = if *negative { Sign::Minus } else { Sign::Plus };
                big_int(sign, digits)
            }
        }
    }
}

/// The text with every Python-only token replaced by `0`, and each token by the index of the
/// scalar value it is (in document order, keys not counted). `None` when there are none.
struct Rewritten {
    text: String,
    tokens: Vec<(usize, PythonToken)>,
}

/// Find the Python-only tokens outside strings (`None` when there are none: the text is read
/// as it is). Scalar values are counted as `serde_json` visits them: strings not followed by
/// `:`, numbers, `true`, `false` and `null`. In a text that is not JSON the count may be off,
/// but such a text is refused whatever it holds.
fn rewrite_python_tokens(text: &str) -> Option<Rewritten> {
    let b = text.as_bytes();
    let mut out = String::new();
    let mut tokens = Vec::new();
    let mut scalars = 0;
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                let next = b.get(i..).unwrap_or_default();
                let after = next
                    .iter()
                    .find(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r'));
                if after != Some(&b':') {
                    scalars += 1;
                }
            }
            b't' | b'f' | b'n' => {
                scalars += 1;
                while i < b.len() && b[i].is_ascii_alphabetic() {
                    i += 1;
                }
            }
            b'N' | b'I' | b'-' | b'0'..=b'9' => {
                let start = i;
                let negative = b[i] == b'-';
                let body = if negative { i + 1 } else { i };
                let word = |w: &str| text.get(body..).is_some_and(|t| t.starts_with(w));
                let token = if word("NaN") && !negative {
                    i = body + 3;
                    Some(PythonToken::Float("nan"))
                } else if word("Infinity") {
                    i = body + 8;
                    Some(PythonToken::Float(if negative { "-inf" } else { "inf" }))
                } else {
                    i = body;
                    while i < b.len()
                        && matches!(b[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                    {
                        i += 1;
                    }
                    let lit = &text[start..i];
                    let integer = i > body && text[body..i].bytes().all(|c| c.is_ascii_digit());
                    let fits = lit.parse::<i64>().is_ok() || lit.parse::<u64>().is_ok();
                    (integer && !fits).then(|| PythonToken::BigInt {
                        negative,
                        digits: text[body..i].to_owned(),
                    })
                };
                if token.is_some() || i > body {
                    scalars += 1;
                }
                if i == start {
                    i += 1;
                }
                if let Some(token) = token {
                    out.push_str(&text[copied..start]);
                    out.push('0');
                    copied = i;
                    tokens.push((scalars - 1, token));
                }
            }
            _ => i += 1,
        }
    }
    if tokens.is_empty() {
        return None;
    }
    out.push_str(&text[copied.min(text.len())..]);
    Some(Rewritten { text: out, tokens })
}

/// What a reading keeps beside `serde_json`'s state.
struct Reading<'t> {
    /// The Python-only tokens, by the index of the scalar value each is.
    tokens: &'t [(usize, PythonToken)],
    /// The scalar values visited so far.
    scalars: Cell<usize>,
    /// The next entry of `tokens` to come.
    next_token: Cell<usize>,
    /// The first key an object repeated.
    duplicate: RefCell<Option<String>>,
}

impl Reading<'_> {
    /// The value of the scalar `parsed` that comes next: its stand-in when it replaced a
    /// Python-only token.
    fn scalar(&self, parsed: Value) -> Value {
        let index = self.scalars.get();
        self.scalars.set(index + 1);
        let next = self.next_token.get();
        match self.tokens.get(next) {
            Some((at, token)) if *at == index => {
                self.next_token.set(next + 1);
                token.value()
            }
            _ => parsed,
        }
    }
}

/// One value of the document, read with the reading's state.
#[derive(Clone, Copy)]
struct Node<'r, 't>(&'r Reading<'t>);

impl<'de> DeserializeSeed<'de> for Node<'_, '_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_, '_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(self.0.scalar(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(self.0.scalar(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(self.0.scalar(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(self
            .0
            .scalar(Number::from_f64(v).map_or(Value::Null, Value::Number)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(self.0.scalar(Value::String(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(self.0.scalar(Value::String(v)))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(self.0.scalar(Value::Null))
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(self.0.scalar(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let v = map.next_value_seed(self)?;
            if out.contains_key(&key) {
                // noted here; the error only stops the reading
                self.0.duplicate.borrow_mut().get_or_insert(key);
                return Err(de::Error::custom("duplicate key"));
            }
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// Read `text` as Python's `json` reads it.
pub(super) fn parse_json(text: &str) -> Result<Value, JsonFailure> {
    let rewritten = rewrite_python_tokens(text);
    let reading = Reading {
        tokens: rewritten.as_ref().map_or(&[], |r| &r.tokens),
        scalars: Cell::new(0),
        next_token: Cell::new(0),
        duplicate: RefCell::new(None),
    };
    let source = rewritten.as_ref().map_or(text, |r| &r.text);
    let mut de = serde_json::Deserializer::from_str(source);
    let parsed = Node(&reading)
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    parsed.map_err(|e| match reading.duplicate.take() {
        Some(key) => JsonFailure::Duplicate(key),
        None => JsonFailure::Syntax(e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_tokens_are_read_and_strings_like_them_stay_strings() {
        let v = parse_json(
            r#"{"a": NaN, "b": -Infinity, "c": [true, "x", 123456789012345678901234567890], "d": "NaN", "e": -98765432109876543210987}"#,
        )
        .unwrap();
        assert_eq!(v["a"], py_only_value("float", json!("nan")));
        assert_eq!(v["b"], py_only_value("float", json!("-inf")));
        assert_eq!(
            v["c"],
            json!([
                true,
                "x",
                py_only_value("int", json!("123456789012345678901234567890"))
            ])
        );
        assert_eq!(v["d"], json!("NaN"));
        assert_eq!(
            v["e"],
            py_only_value("int", json!("-98765432109876543210987"))
        );
        // The old in-band marker is an ordinary string now.
        let marker = parse_json(r#"{"a": "\u0000py-json:int:5", "b": Infinity}"#).unwrap();
        assert_eq!(marker["a"], json!("\u{0}py-json:int:5"));
        assert_eq!(marker["b"], py_only_value("float", json!("inf")));
        // Keys are not values: a key before a token does not shift it.
        let keyed = parse_json("{\"k\" :\n NaN, \"n\": null, \"i\": Infinity}").unwrap();
        assert_eq!(keyed["k"], py_only_value("float", json!("nan")));
        assert_eq!(keyed["n"], Value::Null);
        assert_eq!(keyed["i"], py_only_value("float", json!("inf")));
        assert!(rewrite_python_tokens(r#"{"a": [1, 2.5, -3]}"#).is_none());
    }

    #[test]
    fn the_reader_notes_a_repeated_key_itself() {
        assert_eq!(
            parse_json(r#"{"a": {"b": 1, "b": 2}}"#),
            Err(JsonFailure::Duplicate("b".into()))
        );
        // a key that reads like serde's own message is still just the key
        assert_eq!(
            parse_json(r#"{"x at line 1": 1, "x at line 1": 2}"#),
            Err(JsonFailure::Duplicate("x at line 1".into()))
        );
        assert!(matches!(
            parse_json(r#"{"a": 1,}"#),
            Err(JsonFailure::Syntax(_))
        ));
    }
}
