//! JSON Pointer (RFC 6901) and JSON Patch (RFC 6902) over the raw configuration document.
//! Pure functions on `serde_json::Value`; every failure says which pointer or operation was
//! at fault.

use serde_json::Value;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PointerError {
    #[error("JSON pointer {0:?} must be empty or start with '/'")]
    Syntax(String),
    #[error("nothing at {0}")]
    NotFound(String),
    #[error("{0} is not an object or an array")]
    NotContainer(String),
    #[error("{0}: invalid array index")]
    BadIndex(String),
    #[error("{0}: cannot move a value into itself")]
    MoveIntoChild(String),
}

/// The reference tokens of a pointer.
pub fn parse(pointer: &str) -> Result<Vec<String>, PointerError> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let rest = pointer
        .strip_prefix('/')
        .ok_or_else(|| PointerError::Syntax(pointer.to_owned()))?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn join(tokens: &[String]) -> String {
    tokens
        .iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// Which places of an array a token may name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// An element that exists.
    Element,
    /// An element, or the end (`-` or the length): where an element is added.
    ElementOrEnd,
}

/// The index a token names in an array of `len` elements; `at` is the pointer, for errors.
fn array_index(token: &str, len: usize, place: Place, at: &str) -> Result<usize, PointerError> {
    let end_allowed = place == Place::ElementOrEnd;
    if end_allowed && token == "-" {
        return Ok(len);
    }
    let valid = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'));
    let idx: usize = if valid {
        token
            .parse()
            .map_err(|_| PointerError::BadIndex(at.to_owned()))?
    } else {
        return Err(PointerError::BadIndex(at.to_owned()));
    };
    if idx < len || (end_allowed && idx == len) {
        Ok(idx)
    } else {
        Err(PointerError::NotFound(at.to_owned()))
    }
}

/// The value at `pointer`.
pub fn get<'a>(doc: &'a Value, pointer: &str) -> Result<&'a Value, PointerError> {
    let tokens = parse(pointer)?;
    let mut cur = doc;
    for (i, t) in tokens.iter().enumerate() {
        let at = join(&tokens[..=i]);
        cur = match cur {
            Value::Object(m) => m.get(t).ok_or(PointerError::NotFound(at))?,
            Value::Array(a) => &a[array_index(t, a.len(), Place::Element, &at)?],
            _ => return Err(PointerError::NotFound(at)),
        };
    }
    Ok(cur)
}

fn parent_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> Result<&'a mut Value, PointerError> {
    let mut cur = doc;
    for (i, t) in tokens.iter().enumerate() {
        let at = join(&tokens[..=i]);
        cur = match cur {
            Value::Object(m) => m.get_mut(t).ok_or(PointerError::NotFound(at))?,
            Value::Array(a) => {
                let len = a.len();
                &mut a[array_index(t, len, Place::Element, &at)?]
            }
            _ => return Err(PointerError::NotFound(at)),
        };
    }
    Ok(cur)
}

/// RFC 6902 `add`: set an object member, insert into an array (`-` appends), or replace the
/// whole document. The parent must exist.
pub fn add(doc: &mut Value, pointer: &str, value: Value) -> Result<(), PointerError> {
    let tokens = parse(pointer)?;
    let Some((last, parents)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    let at = join(&tokens);
    match parent_mut(doc, parents)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            let idx = array_index(last, a.len(), Place::ElementOrEnd, &at)?;
            a.insert(idx, value);
            Ok(())
        }
        _ => Err(PointerError::NotContainer(join(parents))),
    }
}

/// Upsert for `PUT`: like `add`, but an existing array element is replaced, not shifted.
pub fn put(doc: &mut Value, pointer: &str, value: Value) -> Result<(), PointerError> {
    let tokens = parse(pointer)?;
    if let Some((last, parents)) = tokens.split_last() {
        if let Value::Array(a) = parent_mut(doc, parents)? {
            let at = join(&tokens);
            let idx = array_index(last, a.len(), Place::ElementOrEnd, &at)?;
            if idx < a.len() {
                a[idx] = value;
            } else {
                a.push(value);
            }
            return Ok(());
        }
    }
    add(doc, pointer, value)
}

/// RFC 6902 `remove`; returns the removed value. Removing the root leaves an empty document.
pub fn remove(doc: &mut Value, pointer: &str) -> Result<Value, PointerError> {
    let tokens = parse(pointer)?;
    let Some((last, parents)) = tokens.split_last() else {
        return Ok(std::mem::replace(doc, Value::Object(Default::default())));
    };
    let at = join(&tokens);
    match parent_mut(doc, parents)? {
        Value::Object(m) => m.shift_remove(last).ok_or(PointerError::NotFound(at)),
        Value::Array(a) => {
            let idx = array_index(last, a.len(), Place::Element, &at)?;
            Ok(a.remove(idx))
        }
        _ => Err(PointerError::NotFound(at)),
    }
}

/// One failed operation of a patch.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PatchError {
    #[error("operation {index}: {message}")]
    Malformed { index: usize, message: String },
    #[error("operation {index}: {source}")]
    Pointer { index: usize, source: PointerError },
    #[error("operation {index}: test failed: the value at {path} differs")]
    TestFailed { index: usize, path: String },
    /// The document would outgrow a bound (checked after every operation, before a copy is
    /// made).
    #[error("operation {index}: the document would exceed {bound}")]
    TooLarge { index: usize, bound: String },
}

/// What a value weighs against the bounds of a document.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Weight {
    nodes: usize,
    bytes: usize,
    /// Collection levels: 0 for a scalar.
    height: usize,
}

/// The weight of `v`. Values come from parsed documents, whose depth is bounded, and every
/// operation keeps it so; the walk recurses at most that deep.
fn weigh(v: &Value) -> Weight {
    match v {
        Value::Array(items) => {
            let mut w = Weight {
                nodes: 1,
                ..Weight::default()
            };
            for item in items {
                let c = weigh(item);
                w.nodes += c.nodes;
                w.bytes += c.bytes;
                w.height = w.height.max(c.height);
            }
            w.height += 1;
            w
        }
        Value::Object(map) => {
            let mut w = Weight {
                nodes: 1,
                ..Weight::default()
            };
            for (k, item) in map {
                let c = weigh(item);
                w.nodes += c.nodes + 1;
                w.bytes += c.bytes + k.len();
                w.height = w.height.max(c.height);
            }
            w.height += 1;
            w
        }
        Value::String(s) => Weight {
            nodes: 1,
            bytes: s.len(),
            height: 0,
        },
        _ => Weight {
            nodes: 1,
            bytes: 8,
            height: 0,
        },
    }
}

/// The running weight of a document under patch, against the parser's bounds.
struct Budget {
    total: Weight,
}

impl Budget {
    /// Account for `added` placed at `pointer` and `removed` taken away; an error past a bound.
    fn change(
        &mut self,
        index: usize,
        pointer: &str,
        added: Weight,
        removed: Weight,
    ) -> Result<(), PatchError> {
        use kres_config::{MAX_DEPTH, MAX_EXPANDED_BYTES, MAX_EXPANDED_NODES};
        let too_large = |bound: String| PatchError::TooLarge { index, bound };
        let depth = pointer.matches('/').count() + added.height;
        if depth > MAX_DEPTH {
            return Err(too_large(format!(
                "{MAX_DEPTH} levels of nesting at {pointer}"
            )));
        }
        let nodes = (self.total.nodes + added.nodes).saturating_sub(removed.nodes);
        if nodes > MAX_EXPANDED_NODES {
            return Err(too_large(format!("{MAX_EXPANDED_NODES} nodes")));
        }
        let bytes = (self.total.bytes + added.bytes).saturating_sub(removed.bytes);
        if bytes > MAX_EXPANDED_BYTES {
            return Err(too_large(format!("{MAX_EXPANDED_BYTES} bytes")));
        }
        self.total.nodes = nodes;
        self.total.bytes = bytes;
        Ok(())
    }
}

/// Apply an RFC 6902 patch to a copy of `doc`; all or nothing.
pub fn patch(doc: &Value, ops: &Value) -> Result<Value, PatchError> {
    let list = ops.as_array().ok_or(PatchError::Malformed {
        index: 0,
        message: "a JSON Patch is an array of operations".into(),
    })?;
    let mut out = doc.clone();
    let mut budget = Budget { total: weigh(doc) };
    for (index, op) in list.iter().enumerate() {
        let field = |name: &str| -> Result<&str, PatchError> {
            op.get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| PatchError::Malformed {
                    index,
                    message: format!("missing string member '{name}'"),
                })
        };
        let value = || {
            op.get("value").cloned().ok_or(PatchError::Malformed {
                index,
                message: "missing member 'value'".into(),
            })
        };
        let p = |source| PatchError::Pointer { index, source };
        let path = field("path")?;
        match field("op")? {
            "add" => {
                let v = value()?;
                let removed = get(&out, path).map(weigh).unwrap_or_default();
                budget.change(index, path, weigh(&v), removed)?;
                add(&mut out, path, v).map_err(p)?
            }
            "remove" => {
                let removed = remove(&mut out, path).map_err(p)?;
                budget.change(index, "", Weight::default(), weigh(&removed))?;
            }
            "replace" => {
                let removed = weigh(get(&out, path).map_err(p)?);
                let v = value()?;
                budget.change(index, path, weigh(&v), removed)?;
                put(&mut out, path, v).map_err(p)?;
            }
            "move" => {
                let from = field("from")?;
                if path != from && path.starts_with(from) && path[from.len()..].starts_with('/') {
                    return Err(p(PointerError::MoveIntoChild(path.to_owned())));
                }
                let v = remove(&mut out, from).map_err(p)?;
                let w = weigh(&v);
                budget.change(index, path, w, w)?;
                add(&mut out, path, v).map_err(p)?;
            }
            "copy" => {
                let source = get(&out, field("from")?).map_err(p)?;
                // Weighed before it is copied: the copy itself is what must not grow.
                let removed = get(&out, path).map(weigh).unwrap_or_default();
                budget.change(index, path, weigh(source), removed)?;
                let v = source.clone();
                add(&mut out, path, v).map_err(p)?;
            }
            "test" => {
                if *get(&out, path).map_err(p)? != value()? {
                    return Err(PatchError::TestFailed {
                        index,
                        path: path.to_owned(),
                    });
                }
            }
            other => {
                return Err(PatchError::Malformed {
                    index,
                    message: format!("unknown operation '{other}'"),
                })
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pointer_resolution() {
        let doc = json!({"a": {"b": [1, 2]}, "c/d": 3, "e~f": 4, "": 5});
        let ok = [
            ("", doc.clone()),
            ("/a/b/1", json!(2)),
            ("/c~1d", json!(3)),
            ("/e~0f", json!(4)),
            ("/", json!(5)),
        ];
        for (p, v) in ok {
            assert_eq!(get(&doc, p), Ok(&v), "{p}");
        }
        assert_eq!(get(&doc, "a"), Err(PointerError::Syntax("a".into())));
        assert_eq!(get(&doc, "/x"), Err(PointerError::NotFound("/x".into())));
        assert_eq!(
            get(&doc, "/a/b/2"),
            Err(PointerError::NotFound("/a/b/2".into()))
        );
        assert_eq!(
            get(&doc, "/a/b/01"),
            Err(PointerError::BadIndex("/a/b/01".into()))
        );
        assert_eq!(
            get(&doc, "/c~1d/x"),
            Err(PointerError::NotFound("/c~1d/x".into()))
        );
    }

    #[test]
    fn put_upserts_and_replaces_array_items() {
        let mut doc = json!({"network": {"listen": [{"interface": "a"}]}});
        put(&mut doc, "/network/listen/0", json!({"interface": "b"})).unwrap();
        put(&mut doc, "/network/listen/-", json!({"interface": "c"})).unwrap();
        put(&mut doc, "/workers", json!(4)).unwrap();
        assert_eq!(
            doc,
            json!({"network": {"listen": [{"interface": "b"}, {"interface": "c"}]}, "workers": 4})
        );
        assert_eq!(
            put(&mut doc, "/cache/size-max", json!("1M")),
            Err(PointerError::NotFound("/cache".into()))
        );
        assert_eq!(
            remove(&mut doc, "/network/listen/0"),
            Ok(json!({"interface": "b"}))
        );
        assert_eq!(
            remove(&mut doc, "/nope"),
            Err(PointerError::NotFound("/nope".into()))
        );
    }

    /// The example of jsonpatch.com, as upstream tests it, plus move, copy and test.
    #[test]
    fn patches_cannot_outgrow_the_bounds() {
        // Forty copies that each double a list: refused long before it is large.
        let mut ops = vec![json!({"op": "add", "path": "/l", "value": ["x".repeat(1000)]})];
        for _ in 0..40 {
            ops.push(json!({"op": "copy", "from": "/l", "path": "/l/-"}));
        }
        let err = patch(&json!({}), &Value::Array(ops)).expect_err("refused");
        assert!(matches!(err, PatchError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains("would exceed"), "{err}");
        // Copying a value into itself, level after level: the depth is bounded too.
        let mut ops = vec![json!({"op": "add", "path": "/a", "value": {}})];
        for _ in 0..300 {
            ops.push(json!({"op": "copy", "from": "/a", "path": "/a/a"}));
        }
        let err = patch(&json!({}), &Value::Array(ops)).expect_err("refused");
        assert!(err.to_string().contains("levels of nesting"), "{err}");
    }

    #[test]
    fn patch_operations() {
        let doc = json!({"baz": "qux", "foo": "bar"});
        let ops = json!([
            {"op": "replace", "path": "/baz", "value": "boo"},
            {"op": "add", "path": "/hello", "value": ["world"]},
            {"op": "remove", "path": "/foo"}
        ]);
        assert_eq!(
            patch(&doc, &ops),
            Ok(json!({"baz": "boo", "hello": ["world"]}))
        );
        let ops = json!([
            {"op": "copy", "from": "/baz", "path": "/copy"},
            {"op": "move", "from": "/foo", "path": "/moved"},
            {"op": "test", "path": "/moved", "value": "bar"},
            {"op": "replace", "path": "/baz", "value": 5}
        ]);
        assert_eq!(
            patch(&doc, &ops),
            Ok(json!({"baz": 5, "copy": "qux", "moved": "bar"}))
        );
        let failing = json!([{"op": "add", "path": "/x", "value": 1}, {"op": "test", "path": "/baz", "value": "no"}]);
        assert_eq!(
            patch(&doc, &failing),
            Err(PatchError::TestFailed {
                index: 1,
                path: "/baz".into()
            })
        );
        assert!(matches!(
            patch(&doc, &json!([{"op": "jump", "path": "/"}])),
            Err(PatchError::Malformed { .. })
        ));
        assert!(matches!(
            patch(&doc, &json!({"op": "add"})),
            Err(PatchError::Malformed { .. })
        ));
        let into_self = json!([{"op": "move", "from": "/baz", "path": "/baz/x"}]);
        assert!(matches!(
            patch(&doc, &into_self),
            Err(PatchError::Pointer {
                source: PointerError::MoveIntoChild(_),
                ..
            })
        ));
    }
}
