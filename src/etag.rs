//! Structural ETags of the raw configuration: a hash of its canonical JSON (object keys
//! sorted), so equal documents have equal tags whatever their key order, plus the parsing of
//! `If-Match` / `If-None-Match` lists.

use axum::http::{HeaderMap, HeaderName};
use serde_json::Value;

/// The quoted ETag of a document (20 URL-safe base64 characters, like upstream's).
pub fn etag(doc: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(doc, &mut canonical);
    // FNV-1a, 128 bits: stable across builds and runs, collisions irrelevant at this scale.
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for b in canonical.as_bytes() {
        h ^= u128::from(*b);
        h = h.wrapping_mul(0x0000000001000000000000000000013B);
    }
    let bytes = &h.to_be_bytes()[..15];
    format!("\"{}\"", base64url(bytes))
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// The values of a precondition header (`If-Match` / `If-None-Match`, possibly repeated), as
/// one comma-separated list of tags. `None` when the header is absent (or none of its values is
/// text).
pub fn tag_list(headers: &HeaderMap, name: HeaderName) -> Option<String> {
    let values: Vec<&str> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// Whether a list of tags (comma-separated, `*` or weak `W/` tags) names `current`.
pub fn tags_name(list: &str, current: &str) -> bool {
    let bare = current.trim_matches('"');
    list.split(',').map(str::trim).any(|tag| {
        let tag = tag.strip_prefix("W/").unwrap_or(tag);
        tag == "*" || tag.trim_matches('"') == bare
    })
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use serde_json::json;

    use super::*;

    #[test]
    fn structural_equality() {
        let a = json!({"workers": 2, "cache": {"size-max": "1M", "storage": "/x"}});
        let b = json!({"cache": {"storage": "/x", "size-max": "1M"}, "workers": 2});
        assert_eq!(etag(&a), etag(&b));
        assert_ne!(etag(&a), etag(&json!({"workers": 3})));
        assert_eq!(etag(&a).len(), 22);
    }

    #[test]
    fn precondition_lists() {
        use axum::http::header::{IF_MATCH, IF_NONE_MATCH};
        let tag = etag(&json!({}));
        let matches = |h: &HeaderMap, name| tag_list(h, name).map(|l| tags_name(&l, &tag));
        let mut h = HeaderMap::new();
        assert_eq!(matches(&h, IF_MATCH), None);
        h.append(IF_MATCH, HeaderValue::from_static("\"nope\", \"other\""));
        assert_eq!(matches(&h, IF_MATCH), Some(false));
        h.append(
            IF_MATCH,
            HeaderValue::from_str(&format!("W/{tag}")).unwrap(),
        );
        assert_eq!(matches(&h, IF_MATCH), Some(true));
        h.append(IF_MATCH, HeaderValue::from_bytes(b"\xff").unwrap());
        assert_eq!(matches(&h, IF_MATCH), Some(true));
        let mut opaque = HeaderMap::new();
        opaque.insert(IF_MATCH, HeaderValue::from_bytes(b"\xff").unwrap());
        assert_eq!(matches(&opaque, IF_MATCH), None, "no value is text");
        let mut star = HeaderMap::new();
        star.insert(IF_NONE_MATCH, HeaderValue::from_static("*"));
        assert_eq!(matches(&star, IF_NONE_MATCH), Some(true));
    }
}
