//! The fastest path when only some top-level sections of a document are wanted (the root
//! process and kresctl read `rundir`, `management`, `logging`, ... of configurations that may
//! hold megabytes of `local-data`): the wanted sections are cut out of a document in the plain
//! block form by the lines at the left margin alone, and read as a document of their own; the
//! other sections are passed over unread. It declines, saying why ([`CutDeclined`]), wherever
//! the margin cannot be trusted, and the document is then read by the block reader or the full
//! one. The root's `rundir`, `management` and `logging` of a configuration of 100,000
//! addresses and 100,000 records (7.6 MB) take 3.6 ms so, the file's read and their validation
//! included, where the block reader reads the document whole in 27 ms.

use super::block::text_key;

/// Why the wanted sections were not cut out of a document (it is read whole instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutDeclined {
    /// Anything but ASCII.
    NotAscii,
    /// A carriage return (YAML 1.1 breaks lines there too).
    CarriageReturn,
    /// A line at the margin that is not a comment, a sequence entry or a plain text key
    /// followed by `:` (or indented lines before the first key).
    MarginLine,
    /// A key at the margin that reads as something else than itself (`yes`, `1`).
    KeyNotItself,
    /// A wanted key given twice.
    WantedTwice,
    /// A quote or a flow bracket in a section passed over.
    FlowPassedOver,
    /// A quote or a flow bracket in a wanted section that does not read on its own.
    FlowLeftOpen,
    /// An alias in a wanted section (its anchor may lie in a section passed over).
    Alias,
    /// The cut does not read as a mapping: the whole document says why.
    Unreadable,
}

/// The text of the top-level sections named in `wanted` (each once, in document order), cut
/// out of a document in the plain block form by the lines at the left margin alone: the other
/// sections are passed over, not read. Their form is left to whoever reads the whole
/// document. Declined when the cut cannot be trusted to give exactly those sections, and the
/// document is to be read instead:
/// - a line at the margin that is not a comment, a sequence entry (`- `) or a plain text key
///   of letters, digits, `-` and `_` followed by `:` (document markers, directives, quoted,
///   complex or non-text keys, a document that is not a block mapping);
/// - indented lines before the first key;
/// - a wanted key given twice;
/// - a quote or a flow bracket in a section passed over: a quoted scalar or a flow
///   collection may go on past the margin (`a: "x` / `rundir: y"` is one scalar), and only
///   there can a line at the margin not start a section;
/// - a wanted section holding a quote or a flow bracket that does not read on its own: the
///   scalar or collection it opens goes on past the margin;
/// - an alias in a wanted section: its anchor may lie in a section passed over;
/// - anything but ASCII, or a carriage return (YAML 1.1 breaks lines there too; other
///   control characters are errors for whoever reads them).
///
/// What is passed over is a block value: its plain scalars end at the margin, and so do its
/// block scalars. The text may hold keys besides the wanted ones (with no value): the reader
/// keeps the wanted ones.
pub(super) fn wanted_sections_text(text: &str, wanted: &[&str]) -> Result<String, CutDeclined> {
    let bytes = text.as_bytes();
    // (the text is UTF-8: ASCII has no byte above 0x7f)
    if !text.is_ascii() {
        return Err(CutDeclined::NotAscii);
    }
    if memchr::memchr(b'\r', bytes).is_some() {
        return Err(CutDeclined::CarriageReturn);
    }
    // Where each section starts, its key and whether it is wanted.
    let mut starts: Vec<(usize, &str, bool)> = Vec::new();
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let at = pos;
        pos += line.len();
        let in_section = !starts.is_empty();
        match line.as_bytes() {
            [b'\n' | b'#', ..] => {}
            [b' ', ..] if in_section => {}
            [b'-'] | [b'-', b' ' | b'\n', ..] if in_section => {}
            _ => {
                let key = margin_key(line).ok_or(CutDeclined::MarginLine)?;
                // a key read as anything but itself (`yes`, `1`) is left to the reader
                if text_key(key).as_deref() != Some(key) {
                    return Err(CutDeclined::KeyNotItself);
                }
                let is_wanted = wanted.contains(&key);
                // (looked for only among the few wanted ones: a first repeat ends the cut)
                if is_wanted && starts.iter().any(|&(_, k, w)| w && k == key) {
                    return Err(CutDeclined::WantedTwice);
                }
                starts.push((at, key, is_wanted));
            }
        }
    }
    let mut out = String::new();
    for (i, &(start, _, is_wanted)) in starts.iter().enumerate() {
        let next = starts.get(i + 1);
        let end = next.map_or(bytes.len(), |n| n.0);
        let section = &text[start..end];
        if !is_wanted {
            if has_flow_character(section.as_bytes()) {
                return Err(CutDeclined::FlowPassedOver);
            }
            continue;
        }
        // A quoted scalar or flow collection opened in a wanted section must close in it: one
        // left open goes on past the margin (`rundir: "x` / `a: 1` / `logging: y"` is one
        // scalar), and the section then reads alone as an error. Wanted sections are small.
        if has_flow_character(section.as_bytes()) && super::parse_yaml(section).is_err() {
            return Err(CutDeclined::FlowLeftOpen);
        }
        out.push_str(section);
        if !section.ends_with('\n') {
            out.push('\n');
        }
        // The section ends where the next one's key is, as in the whole document (a block
        // scalar ends differently at the end of the text): a section passed over leaves its
        // key with no value, which the reader of the text drops.
        if let Some(&(_, key, false)) = next {
            out.push_str(key);
            out.push_str(":\n");
        }
    }
    if out.contains('*') {
        return Err(CutDeclined::Alias);
    }
    Ok(out)
}

/// The key of a line at the margin that starts a section (`key:` then a space or the line's
/// end), letters, digits, `-` and `_` only.
fn margin_key(line: &str) -> Option<&str> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let colon = line.find(':')?;
    let key = &line[..colon];
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let ends = matches!(line.as_bytes().get(colon + 1), None | Some(b' '));
    (plain && ends).then_some(key)
}

/// Whether `bytes` hold a quote or a flow bracket.
fn has_flow_character(bytes: &[u8]) -> bool {
    memchr::memchr3(b'"', b'\'', b'[', bytes).is_some() || memchr::memchr(b'{', bytes).is_some()
}
