//! The differences between two configuration documents, path by path: what a JSON Patch
//! (RFC 6902) that turns the one into the other does. `kresctl config diff` shows them, `config
//! set` tells what replacing an object removed, and a reload tells which changes made through
//! the API it discarded.

use serde_json::Value;

/// One difference: what a JSON Patch operation does at `path` of the old document.
#[derive(Debug, Clone, PartialEq)]
pub enum Difference {
    Add {
        path: String,
        value: Value,
    },
    Remove {
        path: String,
        old: Value,
    },
    Replace {
        path: String,
        old: Value,
        value: Value,
    },
}

/// The differences that turn `old` into `new`, objects compared key by key (in key order),
/// anything else (lists among them) as a whole.
pub fn differences(old: &Value, new: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    walk(old, new, &mut String::new(), &mut out);
    out
}

fn walk(old: &Value, new: &Value, path: &mut String, out: &mut Vec<Difference>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => walk(x, y, path, out),
                    (Some(x), None) => out.push(Difference::Remove {
                        path: path.clone(),
                        old: x.clone(),
                    }),
                    (None, Some(y)) => out.push(Difference::Add {
                        path: path.clone(),
                        value: y.clone(),
                    }),
                    (None, None) => {}
                }
                path.truncate(len);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(Difference::Replace {
            path: path.clone(),
            old: a.clone(),
            value: b.clone(),
        }),
    }
}

impl Difference {
    /// The JSON pointer it is at.
    pub fn path(&self) -> &str {
        match self {
            Difference::Add { path, .. }
            | Difference::Remove { path, .. }
            | Difference::Replace { path, .. } => path,
        }
    }

    /// The same difference in a document holding the compared ones at `pointer`.
    pub fn prefix(&mut self, pointer: &str) {
        match self {
            Difference::Add { path, .. }
            | Difference::Remove { path, .. }
            | Difference::Replace { path, .. } => path.insert_str(0, pointer),
        }
    }
}

impl Difference {
    /// As a JSON Patch operation (RFC 6902), with the running value as `old`.
    pub fn to_json(&self) -> Value {
        match self {
            Difference::Add { path, value } => {
                serde_json::json!({"op": "add", "path": path, "value": value})
            }
            Difference::Remove { path, old } => {
                serde_json::json!({"op": "remove", "path": path, "old": old})
            }
            Difference::Replace { path, old, value } => {
                serde_json::json!({"op": "replace", "path": path, "old": old, "value": value})
            }
        }
    }

    /// One line: `+ /path: value`, `- /path: old`, `~ /path: old -> value`.
    pub fn line(&self) -> String {
        let show = |v: &Value| serde_json::to_string(v).unwrap_or_default();
        match self {
            Difference::Add { path, value } => format!("+ {path}: {}", show(value)),
            Difference::Remove { path, old } => format!("- {path}: {}", show(old)),
            Difference::Replace { path, old, value } => {
                format!("~ {path}: {} -> {}", show(old), show(value))
            }
        }
    }
}
