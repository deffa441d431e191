//! The validation engine: a small re-implementation of upstream's `utils/modeling` object mapper.
//!
//! The configuration model is described once as a tree of [`Ty`] nodes ([`ObjectDef`] for
//! sections). The same description drives validation (type strictness, defaults, unknown keys,
//! transformations such as `auto`, cross-field rules, error aggregation with JSON-pointer paths)
//! and the generation of the JSON schema. Validation turns a raw document into a *normalized*
//! JSON value (defaults applied, `auto` resolved, paths resolved) that the typed model is then
//! deserialized from.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::value_error::ValueError;

/// What validation needs to know about its surroundings (the short name the hooks and value
/// types use).
pub(crate) use super::ValidationContext as Ctx;

/// One validation failure; `children` are the per-variant failures of a union.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub path: String,
    pub message: String,
    pub children: Vec<Failure>,
}

impl Failure {
    pub fn new(path: &str, message: impl Into<String>) -> Self {
        Failure {
            path: path.to_owned(),
            message: message.into(),
            children: Vec::new(),
        }
    }
}

pub(crate) type Outcome = Result<Value, Vec<Failure>>;

/// A custom value type: validates and normalizes one JSON value.
pub(crate) struct ValueType {
    /// The Python class, for messages.
    pub class: &'static str,
    /// Checks the value and returns its normalized form, or upstream's message.
    pub check: fn(&Value, Container, &Ctx) -> Result<Value, ValueError>,
    /// The JSON-schema fragment upstream publishes for this type.
    pub schema: fn() -> Value,
}

/// A bounded integer type (upstream's `IntRangeBase` subclasses).
#[derive(Clone, Copy)]
pub(crate) struct IntRange {
    pub class: &'static str,
    pub min: Option<i64>,
    pub max: Option<i64>,
}

/// A node of the model description.
#[derive(Clone)]
pub(crate) enum Ty {
    /// Python `None` (a union variant): only `null`.
    Null,
    /// Python `bool`: only real booleans.
    Bool,
    /// Python `int`: only real integers.
    PlainInt,
    /// A bounded integer.
    Int(IntRange),
    /// Python `str`: strings and numbers (converted), never booleans.
    Str,
    /// A custom value type.
    Value(&'static ValueType),
    /// One of the given strings.
    Literal(&'static [&'static str]),
    /// `null` or the inner type.
    Optional(Box<Ty>),
    /// The first variant that accepts the value.
    Union(Vec<Ty>),
    /// A non-empty list.
    List(Box<Ty>),
    /// An item or a non-empty list of items; normalized to a list.
    ListOrItem(Box<Ty>),
    /// A mapping with typed keys and values, normalized to a list of `[key, value]` pairs in
    /// document order: its model field reads it pair by pair, and a mapping of 100,000
    /// entries is not built a second time to be walked once. The key type must give a text
    /// back as it was (as `DomainName` does), so the pairs' keys are the document's own,
    /// each once.
    Dict(Box<Ty>, Box<Ty>),
    /// A section.
    Object(Arc<ObjectDef>),
}

/// How a field behaves when it is missing.
#[derive(Clone)]
pub(crate) enum Default {
    /// The field must be given.
    Required,
    /// The field defaults to this raw value (validated like user input).
    Value(Value),
}

/// One field of a section.
#[derive(Clone)]
pub(crate) struct Field {
    /// The dash-case key.
    pub name: &'static str,
    pub ty: Ty,
    pub default: Default,
    pub doc: &'static str,
}

/// A post-processing step of a section, run once all fields are valid (upstream's `_LAYER` transformation
/// functions and `_validate`). Messages are reported at the section's path.
pub(crate) type Hook = fn(&mut Map<String, Value>, &Ctx, &str) -> Result<(), Vec<Failure>>;

/// A section (upstream's `ConfigSchema` subclass).
pub(crate) struct ObjectDef {
    /// The Python class name, for messages.
    pub class: &'static str,
    /// The section description (`None` when the upstream class has no docstring).
    pub doc: Option<&'static str>,
    pub fields: Vec<Field>,
    /// Resolves `auto` and similar raw-layer values.
    pub transform: Option<Hook>,
    /// Cross-field rules.
    pub validate: Option<Hook>,
    /// A field whose type depends on the section's other fields as given (`None`: every
    /// field has its described type).
    pub retype: Option<Retype>,
}

/// The type a field takes in this section as given, when not its described one: the field's
/// name and the section's raw mapping in, `Some(type)` out.
pub(crate) type Retype = fn(&str, &Map<String, Value>) -> Option<Ty>;

/// Append one JSON-pointer segment.
pub(crate) fn child_path(path: &str, segment: &str) -> String {
    let mut out = String::with_capacity(path.len() + 1 + segment.len());
    set_child_path(&mut out, path, segment);
    out
}

/// [`child_path`] into `out` (its old text replaced): one buffer serves a whole mapping.
fn set_child_path(out: &mut String, path: &str, segment: &str) {
    out.clear();
    out.push_str(path);
    out.push('/');
    if !segment.contains(['~', '/']) {
        out.push_str(segment);
        return;
    }
    for c in segment.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
}

/// How upstream hands a value to its type, which shows in messages ([`py_type`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Container {
    /// A field's value (and the document): containers come as upstream's renaming wrappers
    /// (`RenamedList`, `RenamedDict`).
    Renamed,
    /// A list item or a dict value: containers come as a plain `list` or `dict` (upstream
    /// unwraps the renaming container first).
    Plain,
}

/// Prefix of the single key of a mapping that stands for a value Python has and JSON does not
/// (PyYAML makes them): `{"\0py:int": "<digits>"}` an integer beyond 64 bits, `{"\0py:set":
/// [...]}` a `!!set`, `{"\0py:<class>": "<str()>"}` a date, datetime or `!!binary` bytes. No
/// configuration key can start with NUL, so these never collide with real mappings.
pub(crate) const PY_ONLY_PREFIX: &str = "\u{0}py:";

/// A value only Python has (see [`PY_ONLY_PREFIX`]).
pub(crate) enum PyOnly<'a> {
    /// An integer too large for 64 bits, as decimal digits (with a sign when negative).
    BigInt(&'a str),
    /// A set, with its items.
    Set(&'a [Value]),
    /// A value of another class (`datetime.date`, `datetime.datetime`, `bytes`), as `str()` shows it.
    Other { class: &'a str, text: &'a str },
}

/// Build the JSON stand-in of a Python-only value.
pub(crate) fn py_only_value(kind: &str, payload: Value) -> Value {
    let mut m = Map::new();
    m.insert(format!("{PY_ONLY_PREFIX}{kind}"), payload);
    Value::Object(m)
}

/// Recognize the JSON stand-in of a Python-only value.
pub(crate) fn py_only(v: &Value) -> Option<PyOnly<'_>> {
    let Value::Object(o) = v else { return None };
    if o.len() != 1 {
        return None;
    }
    let (k, payload) = o.iter().next()?;
    match (k.strip_prefix(PY_ONLY_PREFIX)?, payload) {
        ("int", Value::String(d)) => Some(PyOnly::BigInt(d)),
        ("set", Value::Array(items)) => Some(PyOnly::Set(items)),
        (class, Value::String(text)) => Some(PyOnly::Other { class, text }),
        _ => None,
    }
}

/// The digits of a big integer stand-in.
fn big_int(v: &Value) -> Option<&str> {
    match py_only(v) {
        Some(PyOnly::BigInt(d)) => Some(d),
        _ => None,
    }
}

/// The `str()` of a Python float that JSON cannot hold (`inf`, `-inf`, `nan`).
pub(crate) fn py_special_float(v: &Value) -> Option<&str> {
    match py_only(v) {
        Some(PyOnly::Other {
            class: "float",
            text,
        }) => Some(text),
        _ => None,
    }
}

/// A big integer as a float (float fields take ints).
pub(crate) fn big_int_as_float(v: &Value) -> Option<f64> {
    big_int(v).and_then(|d| d.parse().ok())
}

/// A big integer saturated into JSON (for the few places that take any int).
fn saturated(digits: &str) -> Value {
    if digits.starts_with('-') {
        Value::from(i64::MIN)
    } else {
        Value::from(u64::MAX)
    }
}

/// Python's `type(x)` as printed in messages.
pub(crate) fn py_type(v: &Value, container: Container) -> &'static str {
    let plain = container == Container::Plain;
    match py_only(v) {
        Some(PyOnly::BigInt(_)) => return "<class 'int'>",
        Some(PyOnly::Set(_)) => return "<class 'set'>",
        Some(PyOnly::Other { class, .. }) => {
            return match class {
                "datetime.date" => "<class 'datetime.date'>",
                "datetime.datetime" => "<class 'datetime.datetime'>",
                "float" => "<class 'float'>",
                _ => "<class 'bytes'>",
            }
        }
        None => {}
    }
    match v {
        Value::Array(_) if !plain => "<class 'knot_resolver.utils.modeling.renaming.RenamedList'>",
        Value::Object(_) if !plain => "<class 'knot_resolver.utils.modeling.renaming.RenamedDict'>",
        Value::Null => "<class 'NoneType'>",
        Value::Bool(_) => "<class 'bool'>",
        Value::Number(n) if n.is_f64() => "<class 'float'>",
        Value::Number(_) => "<class 'int'>",
        Value::String(_) => "<class 'str'>",
        Value::Array(_) => "<class 'list'>",
        Value::Object(_) => "<class 'dict'>",
    }
}

/// Python's `str(x)` for a JSON value, as printed in messages.
pub(crate) fn py_str(v: &Value) -> String {
    match py_only(v) {
        Some(PyOnly::BigInt(d)) => return d.to_owned(),
        Some(PyOnly::Set([])) => return "set()".into(),
        Some(PyOnly::Set(items)) => {
            let items: Vec<String> = items.iter().map(py_repr).collect();
            return format!("{{{}}}", items.join(", "));
        }
        Some(PyOnly::Other { text, .. }) => return text.to_owned(),
        None => {}
    }
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => py_float(f),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(py_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => {
            let items: Vec<String> = o
                .iter()
                .map(|(k, v)| format!("'{k}': {}", py_repr(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

fn py_repr(v: &Value) -> String {
    match v {
        Value::String(s) => py_str_repr(s),
        other => py_str(other),
    }
}

/// Python's `repr(str)`: single quotes unless only double quotes avoid escaping, and
/// backslashes, the quote and control characters escaped.
fn py_str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::from(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            _ if c == quote => {
                out.push('\\');
                out.push(c);
            }
            _ if u32::from(c) < 0x20 || (0x7f..0xa0).contains(&u32::from(c)) => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            _ => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `str(float)`.
pub(crate) fn py_float(f: f64) -> String {
    if f.is_finite() && f == f.trunc() && f.abs() < 1e16 {
        format!("{f:.1}")
    } else {
        let s = format!("{f:?}");
        if let Some((m, e)) = s.split_once('e') {
            let e: i32 = e.parse().unwrap_or(0);
            format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
        } else {
            s
        }
    }
}

/// Upstream's `StrBase` input rule: a string or an integer (not a float, not a bool).
pub(crate) fn str_base(
    v: &Value,
    container: Container,
    class: &'static str,
) -> Result<String, ValueError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) if !n.is_f64() => Ok(n.to_string()),
        Value::Object(_) if big_int(v).is_some() => Ok(big_int(v).unwrap_or_default().to_owned()),
        other => Err(ValueError::NotStrBase {
            class,
            got: py_str(other),
            ty: py_type(other, container),
        }),
    }
}

/// Python's `str()` of a type as upstream prints it: a class as `<class '…'>`, a generic alias
/// as its `repr` (Python 3.14: `typing.List[…]`, unions as `A | B`, classes inside as `module.Name`).
fn ty_name(ty: &Ty) -> String {
    match ty {
        Ty::Null
        | Ty::Bool
        | Ty::PlainInt
        | Ty::Str
        | Ty::Int(_)
        | Ty::Value(_)
        | Ty::Object(_) => {
            format!("<class '{}'>", ty_arg(ty))
        }
        _ => ty_arg(ty),
    }
}

/// A type as it appears inside a generic alias (`typing._type_repr`).
fn ty_arg(ty: &Ty) -> String {
    match ty {
        Ty::Null => "NoneType".into(),
        Ty::Bool => "bool".into(),
        Ty::PlainInt => "int".into(),
        Ty::Str => "str".into(),
        Ty::Int(r) => format!("knot_resolver.datamodel.types.types.{}", r.class),
        Ty::Value(vt) => format!("knot_resolver.datamodel.types.{}", vt.class),
        Ty::Object(o) => o.class.to_owned(),
        Ty::Literal(l) => format!(
            "typing.Literal[{}]",
            l.iter()
                .map(|s| format!("'{s}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Ty::Optional(i) => format!("{} | None", ty_arg(i)),
        Ty::Union(v) => v.iter().map(ty_arg).collect::<Vec<_>>().join(" | "),
        Ty::List(i) => format!("typing.List[{}]", ty_arg(i)),
        Ty::ListOrItem(i) => format!(
            "knot_resolver.datamodel.types.generic_types.ListOrItem[{}]",
            ty_arg(i)
        ),
        Ty::Dict(k, v) => format!("typing.Dict[{}, {}]", ty_arg(k), ty_arg(v)),
    }
}

/// Python flattens nested `Union`s; so do we, which matters for error trees and the schema.
pub(crate) fn flat_union(variants: Vec<Ty>) -> Ty {
    let mut flat = Vec::with_capacity(variants.len());
    for v in variants {
        match v {
            Ty::Union(inner) => match flat_union(inner) {
                Ty::Union(vs) => flat.extend(vs),
                other => flat.push(other),
            },
            other => flat.push(other),
        }
    }
    Ty::Union(flat)
}

fn list_or_item_union(inner: &Ty) -> Ty {
    flat_union(vec![Ty::List(Box::new(inner.clone())), inner.clone()])
}

/// Validate `v`, handed to its type as `container` says, against `ty`; `path` is the JSON
/// pointer of `v`.
pub(crate) fn map_value(
    ty: &Ty,
    v: &Value,
    container: Container,
    path: &str,
    ctx: &Ctx,
) -> Outcome {
    let fail = |msg: String| Err(vec![Failure::new(path, msg)]);
    let same_value = |ty: &Ty| map_value(ty, v, container, path, ctx);
    match ty {
        Ty::Optional(inner) => {
            if v.is_null() {
                Ok(Value::Null)
            } else {
                same_value(inner)
            }
        }
        Ty::Union(variants) => map_union(variants, path, &same_value),
        Ty::Null => match v {
            Value::Null => Ok(Value::Null),
            other => fail(format!("expected None, found '{}'.", py_str(other))),
        },
        _ if v.is_null() => fail(format!("unexpected value 'None' for type {}", ty_name(ty))),
        Ty::PlainInt => match v {
            Value::Number(n) if !n.is_f64() => Ok(v.clone()),
            Value::Object(_) if big_int(v).is_some() => {
                Ok(saturated(big_int(v).unwrap_or_default()))
            }
            _ => fail(format!("expected int, found {}", py_type(v, container))),
        },
        Ty::Str => map_str(v, container).or_else(|e| fail(e.to_string())),
        Ty::Bool => match v {
            Value::Bool(_) => Ok(v.clone()),
            _ => fail(format!("expected bool, found {}", py_type(v, container))),
        },
        Ty::Literal(options) => map_literal(options, v).or_else(|e| fail(e.to_string())),
        Ty::Int(range) => map_int(range, v, container).or_else(|e| fail(e.to_string())),
        Ty::Dict(kt, vt) => map_dict(kt, vt, v, path, ctx),
        Ty::List(inner) => map_list(inner, v, container, path, ctx),
        Ty::ListOrItem(inner) => {
            // upstream: Union[List[T], T] (nested unions flattened), then a non-empty check.
            // A string is never a list: when the item accepts it, the union gives the same
            // value without building the list's refusal; otherwise the union says why.
            let item = match v {
                Value::String(_) => same_value(inner).ok(),
                _ => None,
            };
            let chosen = match item {
                Some(item) => item,
                None => same_value(&list_or_item_union(inner))?,
            };
            match chosen {
                Value::Array(a) => Ok(Value::Array(a)),
                item => Ok(Value::Array(vec![item])),
            }
        }
        Ty::Value(vt) => {
            (vt.check)(v, container, ctx).map_err(|e| vec![Failure::new(path, e.to_string())])
        }
        Ty::Object(def) => match v {
            Value::Object(src) if py_only(v).is_none() => map_object(def, src, path, ctx),
            other => fail(format!(
                "expected 'dict' or 'NoRenameBaseSchema' object, found '{}'",
                py_type(other, container)
            )),
        },
    }
}

/// The first variant of a union that accepts the value, or every variant's refusal.
fn map_union(variants: &[Ty], path: &str, same_value: &dyn Fn(&Ty) -> Outcome) -> Outcome {
    let mut children = Vec::new();
    for variant in variants {
        match same_value(variant) {
            Ok(ok) => return Ok(ok),
            Err(mut e) => children.append(&mut e),
        }
    }
    Err(vec![Failure {
        path: path.to_owned(),
        message: "could not parse any of the possible variants".into(),
        children,
    }])
}

/// Why a value is not of a scalar type, in upstream's words.
#[derive(Debug, thiserror::Error)]
enum ScalarMismatch {
    #[error(
        "Expected str, found bool. Be careful, that YAML parsers consider even \"no\" and \
         \"yes\" as a bool. Search for the Norway Problem for more details. And please use \
         quotes explicitly."
    )]
    BoolForStr,
    #[error("expected str (or number that would be cast to string), but found type {found}")]
    NotStr { found: &'static str },
    #[error("'{value}' does not match any of the expected values {tuple}")]
    NotLiteral { value: String, tuple: String },
    #[error(
        "Unexpected value for '<class 'knot_resolver.datamodel.types.types.{class}'>'. Expected \
         integer, got '{value}' with type '{found}'"
    )]
    NotInt {
        class: &'static str,
        value: String,
        found: &'static str,
    },
    #[error("value {value} is lower than the minimum {min}.")]
    BelowMinimum { value: String, min: i64 },
    #[error("value {value} is higher than the maximum {max}")]
    AboveMaximum { value: String, max: i64 },
}

/// Python `str`: a string, or a number converted; never a boolean.
fn map_str(v: &Value, container: Container) -> Result<Value, ScalarMismatch> {
    match v {
        Value::String(_) => Ok(v.clone()),
        Value::Number(n) => Ok(Value::String(py_str(&Value::Number(n.clone())))),
        Value::Object(_) if big_int(v).is_some() => {
            Ok(Value::String(big_int(v).unwrap_or_default().to_owned()))
        }
        Value::Object(_) if py_special_float(v).is_some() => Ok(Value::String(
            py_special_float(v).unwrap_or_default().to_owned(),
        )),
        Value::Bool(_) => Err(ScalarMismatch::BoolForStr),
        _ => Err(ScalarMismatch::NotStr {
            found: py_type(v, container),
        }),
    }
}

/// One of the given strings.
fn map_literal(options: &[&str], v: &Value) -> Result<Value, ScalarMismatch> {
    match v {
        Value::String(s) if options.contains(&s.as_str()) => Ok(v.clone()),
        _ => {
            let items: Vec<String> = options.iter().map(|o| format!("'{o}'")).collect();
            let tuple = if items.len() == 1 {
                format!("({},)", items[0])
            } else {
                format!("({})", items.join(", "))
            };
            Err(ScalarMismatch::NotLiteral {
                value: py_str(v),
                tuple,
            })
        }
    }
}

/// A mapping: every key and every value checked, every error kept.
/// A mapping, normalized to `[key, value]` pairs ([`Ty::Dict`]).
fn map_dict(kt: &Ty, vt: &Ty, v: &Value, path: &str, ctx: &Ctx) -> Outcome {
    let (Value::Object(obj), None) = (v, py_only(v)) else {
        return Err(vec![Failure::new(
            path,
            format!(
                "Expected dict-like object, but failed to access its .items() method. Value was {}",
                py_str(v)
            ),
        )]);
    };
    let mut errs = Vec::new();
    let mut pairs = Vec::with_capacity(obj.len());
    let mut p = String::new();
    // the key handed to its type, one buffer for the whole mapping
    let mut key_value = Value::String(String::new());
    for (k, val) in obj {
        set_child_path(&mut p, path, k);
        if let Value::String(buffer) = &mut key_value {
            buffer.clear();
            buffer.push_str(k);
        }
        // upstream unwraps the renaming dict first, so its values are plain containers (a key
        // is a string, whose type's name shows the same either way)
        let key = map_value(kt, &key_value, Container::Plain, &p, ctx);
        let value = map_value(vt, val, Container::Plain, &p, ctx);
        match (key, value) {
            (Ok(key), Ok(value)) => {
                let key = match key {
                    Value::String(key) => key,
                    _ => k.clone(),
                };
                pairs.push(Value::Array(vec![Value::String(key), value]));
            }
            (Err(mut e), _) | (Ok(_), Err(mut e)) => errs.append(&mut e),
        }
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    Ok(Value::Array(pairs))
}

fn map_int(range: &IntRange, v: &Value, container: Container) -> Result<Value, ScalarMismatch> {
    if let Some(d) = big_int(v) {
        // beyond 64 bits: above every maximum (below every minimum when negative)
        let value = d.to_owned();
        return match (d.starts_with('-'), range.min, range.max) {
            (true, Some(min), _) => Err(ScalarMismatch::BelowMinimum { value, min }),
            (false, _, Some(max)) => Err(ScalarMismatch::AboveMaximum { value, max }),
            _ => Ok(saturated(d)),
        };
    }
    let n = match v {
        Value::Number(n) if !n.is_f64() => n,
        other => {
            return Err(ScalarMismatch::NotInt {
                class: range.class,
                value: py_str(other),
                found: py_type(other, container),
            })
        }
    };
    // numbers beyond i64 are above every maximum we have; below every minimum when negative
    let value = n.as_i64().unwrap_or(i64::MAX);
    if let Some(min) = range.min {
        if value < min {
            let value = n.to_string();
            return Err(ScalarMismatch::BelowMinimum { value, min });
        }
    }
    if let Some(max) = range.max {
        if value > max {
            let value = n.to_string();
            return Err(ScalarMismatch::AboveMaximum { value, max });
        }
    }
    Ok(v.clone())
}

fn map_list(inner: &Ty, v: &Value, container: Container, path: &str, ctx: &Ctx) -> Outcome {
    // upstream iterates whatever it gets: a mapping yields its keys, a string is refused
    let items: Vec<Value> = match (v, py_only(v)) {
        (_, Some(PyOnly::Set(items))) => items.to_vec(),
        (Value::Array(a), _) => a.clone(),
        (Value::Object(o), None) => o.keys().map(|k| Value::String(k.clone())).collect(),
        (Value::String(_), _) => return Err(vec![Failure::new(path, "expected list, got string")]),
        (other, _) => {
            let tn = py_type(other, container)
                .trim_start_matches("<class '")
                .trim_end_matches("'>");
            return Err(vec![Failure::new(
                path,
                format!("'{tn}' object is not iterable"),
            )]);
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        // upstream stops at the first invalid item
        out.push(map_value(
            inner,
            item,
            Container::Plain,
            &child_path(path, &i.to_string()),
            ctx,
        )?);
    }
    if out.is_empty() {
        return Err(vec![Failure::new(path, "empty list is not allowed")]);
    }
    Ok(Value::Array(out))
}

/// The path under which a section reports its own rule violations (upstream: `object_path or "/"`).
pub(crate) fn section_path(path: &str) -> String {
    if path.is_empty() {
        "/".into()
    } else {
        path.to_owned()
    }
}

/// Validate a section.
pub(crate) fn map_object(
    def: &ObjectDef,
    src: &Map<String, Value>,
    path: &str,
    ctx: &Ctx,
) -> Outcome {
    let mut errs = Vec::new();
    let mut out = Map::new();
    for field in &def.fields {
        let fpath = child_path(path, field.name);
        let given = src.get(field.name);
        let retyped = def.retype.and_then(|retype| retype(field.name, src));
        let ty = retyped.as_ref().unwrap_or(&field.ty);
        let result = match (given, &field.default) {
            (Some(v), _) => map_value(ty, v, Container::Renamed, &fpath, ctx),
            (None, Default::Value(d)) => map_value(ty, d, Container::Renamed, &fpath, ctx),
            (None, Default::Required) => {
                errs.push(Failure::new(
                    path,
                    format!("missing attribute '{}'.", field.name.replace('-', "_")),
                ));
                continue;
            }
        };
        match result {
            Ok(v) => {
                out.insert(field.name.to_owned(), v);
            }
            Err(mut e) => errs.append(&mut e),
        }
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    // Upstream compares key *sets* under its `-` → `_` renaming: `size_max` next to `size-max`
    // is the same name, so it is silently ignored (the `-` spelling wins); alone, it is unused.
    let used: BTreeSet<String> = def
        .fields
        .iter()
        .filter(|f| src.contains_key(f.name))
        .map(|f| f.name.replace('-', "_"))
        .collect();
    let unused: BTreeSet<String> = src
        .keys()
        .map(|k| k.replace('-', "_"))
        .filter(|k| !used.contains(k))
        .collect();
    // upstream lists them in (random) set order; sorted is deterministic
    let unused: Vec<String> = unused.into_iter().map(|k| format!("'{k}'")).collect();
    if !unused.is_empty() {
        return Err(vec![Failure::new(
            path,
            format!("unexpected extra key(s) {}", unused.join(", ")),
        )]);
    }
    if let Some(transform) = def.transform {
        transform(&mut out, ctx, path)?;
    }
    if let Some(validate) = def.validate {
        validate(&mut out, ctx, &section_path(path))?;
    }
    Ok(Value::Object(out))
}

// ---------------------------------------------------------------------------------------------
// JSON schema generation (upstream's `_describe_type` / `json_schema`)

/// Describe a type as upstream's JSON schema does.
pub(crate) fn describe(ty: &Ty) -> Value {
    match ty {
        Ty::Null => json!({"type": "null"}),
        Ty::Bool => json!({"type": "boolean"}),
        Ty::PlainInt => json!({"type": "integer"}),
        Ty::Str => json!({"type": "string"}),
        Ty::Int(r) => {
            let mut m = Map::new();
            m.insert("type".into(), json!("integer"));
            if let Some(min) = r.min {
                m.insert("minimum".into(), json!(min));
            }
            if let Some(max) = r.max {
                m.insert("maximum".into(), json!(max));
            }
            Value::Object(m)
        }
        Ty::Value(vt) => (vt.schema)(),
        Ty::Literal(options) => json!({"type": "string", "enum": options}),
        Ty::Optional(inner) => {
            let mut d = describe(inner);
            if let Some(obj) = d.as_object_mut() {
                if let Some(t) = obj.get("type").cloned() {
                    obj.insert("type".into(), json!([t, "null"]));
                    return d;
                }
            }
            json!({"anyOf": [{"type": "null"}, d]})
        }
        Ty::Union(variants) => json!({"anyOf": variants.iter().map(describe).collect::<Vec<_>>()}),
        Ty::List(inner) => json!({"type": "array", "items": describe(inner)}),
        Ty::ListOrItem(inner) => describe(&list_or_item_union(inner)),
        Ty::Dict(_, v) => json!({"type": "object", "additionalProperties": describe(v)}),
        Ty::Object(def) => describe_object(def),
    }
}

/// Describe a section.
pub(crate) fn describe_object(def: &ObjectDef) -> Value {
    let mut m = Map::new();
    if let Some(doc) = def.doc {
        m.insert("description".into(), json!(doc));
    }
    m.insert("type".into(), json!("object"));
    let mut props = Map::new();
    for field in &def.fields {
        let mut d = describe(&field.ty);
        if let Some(obj) = d.as_object_mut() {
            if !field.doc.is_empty() {
                obj.insert("description".into(), json!(field.doc));
            }
            if let Default::Value(v) = &field.default {
                obj.insert("default".into(), schema_default(&field.ty, v));
            }
        }
        props.insert(field.name.to_owned(), d);
    }
    m.insert("properties".into(), Value::Object(props));
    Value::Object(m)
}

/// Upstream serializes default values of sections through `to_dict()`: the default is validated
/// (non-strict) and its keys use Python attribute names (`_` instead of `-`).
fn schema_default(ty: &Ty, raw: &Value) -> Value {
    let needs_mapping = matches!(ty, Ty::Object(_))
        || matches!(ty, Ty::List(inner) if matches!(**inner, Ty::Object(_)));
    if !needs_mapping {
        return raw.clone();
    }
    let ctx = Ctx {
        resolve_root: "/".into(),
        checks: crate::PathChecks::Lenient,
        logtarget_arg: super::LogTargetArg::default(),
    };
    match map_value(ty, raw, Container::Renamed, "", &ctx) {
        Ok(v) => underscore_keys(&v),
        Err(_) => raw.clone(),
    }
}

fn underscore_keys(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.replace('-', "_"), underscore_keys(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(underscore_keys).collect()),
        other => other.clone(),
    }
}
