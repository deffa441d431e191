//! The fleet's shared document a node runs, kept on disk beside its cache (`fleet_<prefix>.json`
//! in `cache/storage`, which outlives a reboot, unlike the rundir; named by the fleet's prefix,
//! so a node moved to another fleet never runs the old one's document): what the node's files are
//! composed with ([`crate::overlay`]) at every start and reload, so a node starts, serves and
//! reloads from the last document it applied whatever etcd does. Only the follower writes it,
//! after the document was applied; it is written whole and renamed into place.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The largest kept file read (a fleet document is bounded by the store client as well).
pub const MAX_KEPT_BYTES: u64 = 64 << 20;

/// Where the cache lives when the node's files do not say.
const DEFAULT_STORAGE: &str = "/var/cache/knot-resolver";

/// A shared document and the revision of the store it was read at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    /// The store's modification revision of the document.
    pub revision: i64,
    /// The document (a mapping).
    pub document: Value,
}

/// Where a node whose own files are `local` keeps the fleet's document: `None` when the files
/// join no fleet. A relative `cache/storage` resolves against `root`, as validation does.
pub fn kept_path(local: &Value, root: &Path) -> Option<PathBuf> {
    let fleet = local.get("fleet")?;
    if fleet.is_null() {
        return None;
    }
    let storage = local
        .pointer("/cache/storage")
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_STORAGE);
    // The prefix is checked by validation (`/` and `[A-Za-z0-9._-]`); anything else is left
    // out of the name.
    let prefix: String = fleet
        .pointer("/etcd/prefix")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .chars()
        .map(|c| if c == '/' { '_' } else { c })
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .collect();
    Some(root.join(storage).join(format!("fleet{prefix}.json")))
}

/// The kept document at `path`, `None` when there is none yet.
pub fn read_kept(path: &Path) -> Result<Option<Kept>, KeptError> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(KeptError::Io {
                path: path.to_owned(),
                source,
            })
        }
    };
    let mut text = Vec::new();
    file.take(MAX_KEPT_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|source| KeptError::Io {
            path: path.to_owned(),
            source,
        })?;
    if text.len() as u64 > MAX_KEPT_BYTES {
        return Err(KeptError::TooLarge(path.to_owned()));
    }
    let malformed = |why: String| KeptError::Malformed {
        path: path.to_owned(),
        why,
    };
    let kept: Kept = serde_json::from_slice(&text).map_err(|e| malformed(e.to_string()))?;
    if !kept.document.is_object() {
        return Err(malformed("the document is not a mapping".into()));
    }
    Ok(Some(kept))
}

/// Keep `kept` at `path`: written beside it, then renamed into place.
pub fn write_kept(path: &Path, kept: &Kept) -> Result<(), KeptError> {
    let io = |source| KeptError::Io {
        path: path.to_owned(),
        source,
    };
    let text = serde_json::to_vec(kept).map_err(|e| KeptError::Malformed {
        path: path.to_owned(),
        why: e.to_string(),
    })?;
    let temporary = path.with_extension("json.new");
    std::fs::write(&temporary, text).map_err(io)?;
    std::fs::rename(&temporary, path).map_err(io)
}

/// Why the kept document could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum KeptError {
    #[error("the fleet's kept document {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the fleet's kept document {} is over {MAX_KEPT_BYTES} bytes", .0.display())]
    TooLarge(PathBuf),
    #[error("the fleet's kept document {}: {why}", path.display())]
    Malformed { path: PathBuf, why: String },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kept_beside_the_cache_only_for_a_fleet_node() {
        let root = Path::new("/etc/knot-resolver");
        assert_eq!(kept_path(&json!({}), root), None);
        assert_eq!(kept_path(&json!({"fleet": null}), root), None);
        let fleet = json!({"etcd": {"prefix": "/knot-resolver/campus"}});
        assert_eq!(
            kept_path(&json!({ "fleet": fleet }), root),
            Some(PathBuf::from(
                "/var/cache/knot-resolver/fleet_knot-resolver_campus.json"
            ))
        );
        assert_eq!(
            kept_path(
                &json!({"fleet": fleet, "cache": {"storage": "cache"}}),
                root
            ),
            Some(PathBuf::from(
                "/etc/knot-resolver/cache/fleet_knot-resolver_campus.json"
            ))
        );
    }

    #[test]
    fn a_kept_document_is_read_back_and_a_broken_one_named() {
        let dir = std::env::temp_dir().join(format!("kres-kept-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("fleet_a.json");
        assert!(matches!(read_kept(&path), Ok(None)));
        let kept = Kept {
            revision: 7,
            document: json!({"workers": 2}),
        };
        write_kept(&path, &kept).expect("write");
        assert_eq!(read_kept(&path).expect("read"), Some(kept));
        for broken in ["{", "[]", r#"{"revision": 1, "document": [1]}"#] {
            std::fs::write(&path, broken).expect("write");
            let e = read_kept(&path).expect_err(broken).to_string();
            assert!(e.contains("fleet_a.json"), "{e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
