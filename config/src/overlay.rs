//! How a fleet node's running configuration is made: the fleet's shared document
//! with the node's own file laid over it. Pure functions on raw documents (JSON values as
//! parsed, before validation), so the rule is table-tested here and the follower, the API and
//! whoever else composes the two (`kresctl config get --explain`, later) apply the same one;
//! `ConfigSource::load` composes the node's files with the document it keeps (`crate::kept`).
//!
//! The rule:
//! * the node's own file wins wherever it sets something: mappings merge key by key, at any
//!   depth; anything else the file sets (a list, a scalar, `null`) replaces the shared value
//!   whole;
//! * the keys of [`NODE_LOCAL`] are the node's own whatever either document says: the shared
//!   document's value there is dropped, so the node's file sets them or their defaults apply.
//!   A fleet shares policy (views, local data, forwarding, DNSSEC, rate limiting, Lua), cache
//!   sizing and timers, logging levels, monitoring; a node keeps its identity (`hostname`,
//!   `nsid`, `fleet`), its addresses (`network/listen`, the outgoing addresses), its paths
//!   (`rundir`, `cache/storage`, the management API's endpoint) and what its machine decides
//!   (`workers`, where its logs go).
//!
//! A shared document that sets a node-local key, or a key the node's file sets, is not an
//! error: the node's value wins, and [`shadowed`] lists where. A fleet-wide write at a path the
//! node's file decides is refused by its caller, which [`pinned_by`] tells.
//!
//! Recursion follows the documents' mappings, whose depth the parser bounds
//! ([`crate::MAX_DEPTH`]).

use serde_json::{Map, Value};

/// The JSON pointers that are always the node's own: the shared document's values there are
/// dropped (see the module's documentation for why these).
pub const NODE_LOCAL: &[&str] = &[
    "/rundir",
    "/management",
    "/fleet",
    "/hostname",
    "/nsid",
    "/workers",
    "/network/listen",
    "/network/out-interface-v4",
    "/network/out-interface-v6",
    "/cache/storage",
    "/logging/target",
];

/// The running configuration of a node: `shared` (the fleet's document) with `local` (the
/// node's own file) laid over it, by the rule of this module. A document that is not a
/// mapping (`null`, an empty file) counts as an empty one; the result is always a mapping.
pub fn overlay(shared: &Value, local: &Value) -> Value {
    let mut running = match shared {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    for pointer in NODE_LOCAL {
        remove(&mut running, &segments(pointer));
    }
    if let Value::Object(local) = local {
        merge(&mut running, local);
    }
    Value::Object(running)
}

/// What pins `pointer` (a JSON pointer into the configuration, such as
/// `/network/listen/0/interface`) to this node, so that a fleet-wide write there would not
/// reach it: the node-local key of [`NODE_LOCAL`] at or above it (whether `local` sets it or
/// not), or else the path at or above it where `local` sets something that is not a mapping
/// (a mapping `local` sets is merged, so writing at or above it is not pinned: its other keys
/// still come from the fleet). `None`: the write reaches this node. The answer is in
/// [`NODE_LOCAL`] when the rule pins it, otherwise it is the node's file that does. The whole
/// document (`""`) is never pinned; a text that is not a JSON pointer names nothing (`None`).
pub fn pinned_by(local: &Value, pointer: &str) -> Option<String> {
    let wanted = parse_pointer(pointer)?;
    if let Some(node_local) = NODE_LOCAL.iter().find(|n| wanted.starts_with(&segments(n))) {
        return Some((*node_local).to_owned());
    }
    let mut at = local;
    let mut path = String::new();
    for segment in &wanted {
        let Value::Object(m) = at else {
            break;
        };
        at = m.get(segment.as_str())?;
        push_segment(&mut path, segment);
        if !at.is_object() {
            return Some(path);
        }
    }
    None
}

/// The JSON pointers where `shared` sets a value that the node does not run, in `shared`'s
/// order: the node-local keys it sets, and the paths where `local` sets something other than
/// a mapping over it (or a mapping over a shared value that is not one). Listed even when
/// both say the same: the node's value is what runs there.
pub fn shadowed(shared: &Value, local: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Value::Object(shared) = shared {
        walk_shadowed(shared, local.as_object(), "", &mut out);
    }
    out
}

fn walk_shadowed(
    shared: &Map<String, Value>,
    local: Option<&Map<String, Value>>,
    path: &str,
    out: &mut Vec<String>,
) {
    for (key, shared_value) in shared {
        let mut here = path.to_owned();
        push_segment(&mut here, key);
        if NODE_LOCAL.contains(&here.as_str()) {
            out.push(here);
            continue;
        }
        match (local.and_then(|l| l.get(key)), shared_value) {
            (Some(Value::Object(l)), Value::Object(s)) => walk_shadowed(s, Some(l), &here, out),
            (Some(_), _) => out.push(here),
            (None, Value::Object(s)) if holds_node_local(&here) => {
                walk_shadowed(s, None, &here, out);
            }
            (None, _) => {}
        }
    }
}

/// The JSON pointers the node's own file sets, at most `max` of them in the file's order: each
/// value that is not a mapping (a mapping's keys are listed instead, since they merge one by
/// one), and the node-local keys it sets whole.
pub fn set_by(local: &Value, max: usize) -> Vec<String> {
    fn walk(map: &Map<String, Value>, path: &str, max: usize, out: &mut Vec<String>) {
        for (key, value) in map {
            if out.len() >= max {
                return;
            }
            let mut here = path.to_owned();
            push_segment(&mut here, key);
            match value {
                Value::Object(inner) if !NODE_LOCAL.contains(&here.as_str()) => {
                    walk(inner, &here, max, out);
                }
                _ => out.push(here),
            }
        }
    }
    let mut out = Vec::new();
    if let Value::Object(local) = local {
        walk(local, "", max, &mut out);
    }
    out
}

/// Whether a node-local key lies below `path`.
fn holds_node_local(path: &str) -> bool {
    NODE_LOCAL.iter().any(|n| {
        n.strip_prefix(path)
            .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// Lay `local` over `base`: mappings merge by key, anything else replaces.
fn merge(base: &mut Map<String, Value>, local: &Map<String, Value>) {
    for (key, value) in local {
        match (base.get_mut(key), value) {
            (Some(Value::Object(b)), Value::Object(l)) => merge(b, l),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Remove the value at `path` (mapping keys only), if there is one.
fn remove(m: &mut Map<String, Value>, path: &[String]) {
    match path {
        [] => {}
        [last] => {
            m.shift_remove(last.as_str());
        }
        [first, rest @ ..] => {
            if let Some(Value::Object(inner)) = m.get_mut(first.as_str()) {
                remove(inner, rest);
            }
        }
    }
}

/// The segments of a pointer of [`NODE_LOCAL`] (no escapes there).
fn segments(pointer: &str) -> Vec<String> {
    pointer.split('/').skip(1).map(str::to_owned).collect()
}

/// The unescaped segments of a JSON pointer (RFC 6901): `""` has none; `None` for a text
/// that does not start with `/`.
fn parse_pointer(pointer: &str) -> Option<Vec<String>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    let rest = pointer.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

/// Append one segment, escaped, to a JSON pointer.
fn push_segment(path: &mut String, segment: &str) {
    path.push('/');
    path.push_str(&segment.replace('~', "~0").replace('/', "~1"));
}

#[cfg(test)]
mod tests;
