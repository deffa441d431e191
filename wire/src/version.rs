//! The version a binary reports (`-V`, `GET /`, `kresctl upgrade`): the package's, and a
//! distribution's build label that can be written into a built binary.

/// The version reported by `-V`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where a build's label lives in the binary: a marker, then the label (NUL-padded). Set at
/// compile time from `KRES_BUILD_LABEL` (a distribution's revision), or written into a copy
/// of a built binary afterwards (the upgrade tests make a "newer" binary so), which is why it
/// is read through `black_box` instead of being folded into the code as a constant.
#[used]
static BUILD_LABEL: [u8; BUILD_LABEL_SIZE] = build_label();

/// The marker that starts the label's area (`tests/upgrade.rs` finds it in the binary).
pub const BUILD_LABEL_MARKER: &[u8; 18] = b"\0KRES-BUILD-LABEL\0";
const BUILD_LABEL_SIZE: usize = 64;

const fn build_label() -> [u8; BUILD_LABEL_SIZE] {
    let mut out = [0u8; BUILD_LABEL_SIZE];
    let mut i = 0;
    while i < BUILD_LABEL_MARKER.len() {
        out[i] = BUILD_LABEL_MARKER[i];
        i += 1;
    }
    if let Some(label) = option_env!("KRES_BUILD_LABEL") {
        let label = label.as_bytes();
        let mut j = 0;
        while j < label.len() && i < BUILD_LABEL_SIZE - 1 {
            out[i] = label[j];
            i += 1;
            j += 1;
        }
    }
    out
}

/// The version this binary reports to operators (`GET /`, `GET /upgrade`, `kresctl
/// upgrade`): [`VERSION`], then `+label` when the build carries one.
pub fn build_version() -> String {
    let area: &[u8; BUILD_LABEL_SIZE] = std::hint::black_box(&BUILD_LABEL);
    let label = &area[BUILD_LABEL_MARKER.len()..];
    let end = label.iter().position(|&b| b == 0).unwrap_or(label.len());
    let label = String::from_utf8_lossy(&label[..end]);
    let label = label.trim();
    if label.is_empty() {
        VERSION.to_owned()
    } else {
        format!("{VERSION}+{label}")
    }
}
