//! A direct reader for the plain block form most configurations are written in: block mappings
//! and sequences, single-line plain and quoted scalars, literal block scalars (`|`, `|-`) and
//! comments, in printable ASCII. It gives exactly the value the full YAML reader
//! ([`super::parse_yaml`]) gives, or declines and says why ([`BlockDeclined`]): at anything
//! else (flow collections, anchors, tags, multi-line plain or quoted scalars, folded or
//! indented-indicator block scalars, tabs, duplicate or non-text keys, document markers,
//! documents past the size bounds) it gives up and the full reader, with its error messages,
//! reads the document from the start.
//!
//! It exists for speed on large documents: a configuration of 100,000 addresses and 100,000
//! records (7.6 MB) takes the full reader 108 ms (its scanner goes character by character
//! through the records' block scalar), this one 27 ms (release build, medians of 15 runs on a
//! shared 2-core machine). Scalars resolve through the same function as the full reader's
//! ([`super::resolve_scalar`]); `tests` compares the two on generated documents.

use std::borrow::Cow;

use serde_json::{Map, Value};
use yaml_rust2::scanner::TScalarStyle;

use super::{resolve_scalar, Size, MAX_EXPANDED_BYTES, MAX_EXPANDED_NODES};

/// Deeper documents are left to the full reader (which bounds depth itself).
const MAX_BLOCK_DEPTH: usize = 64;

/// PyYAML reads a simple key of at most 1024 characters; longer ones are left to the full
/// reader.
const MAX_KEY: usize = 1000;

/// Why the block reader left a document to the full reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockDeclined {
    /// A byte that is neither printable ASCII nor a line feed (a tab, a carriage return, any
    /// non-ASCII character).
    NotPrintableAscii,
    /// Nothing but blank lines and comments.
    Empty,
    /// The first line that carries structure is indented.
    IndentedStart,
    /// Something the plain block form does not have: a flow collection, an anchor, an alias,
    /// a tag, a quoted or complex key, a multi-line scalar, an escape, a folded block scalar,
    /// a document marker, a value that goes on past where its mapping ends.
    Construct,
    /// A mapping repeats a key (the full reader says where, as PyYAML does).
    DuplicateKey,
    /// A key the full reader takes as something else than text (`yes`, `1`, `null`).
    NonTextKey,
    /// Nested deeper than the block reader goes.
    TooDeep,
    /// Past the size bounds, which the full reader reports.
    OverBudget,
}

/// The document's value, or why it is not in the plain block form (then the full reader
/// decides).
pub(super) fn read(text: &str) -> Result<Value, BlockDeclined> {
    read_sections(text, None)
}

/// Like [`read`], but only the values of the top-level keys in `wanted` (when given) are made;
/// the others are read for their form alone (whether the full reader would accept them is
/// left to whoever reads the whole document).
pub(super) fn read_sections(text: &str, wanted: Option<&[&str]>) -> Result<Value, BlockDeclined> {
    if !printable_ascii(text.as_bytes()) {
        return Err(BlockDeclined::NotPrintableAscii);
    }
    let mut reader = Reader {
        text,
        pos: 0,
        inline: None,
        spent: Size::default(),
        wanted,
        skipping: false,
        peeked: None,
        declined: None,
    };
    let first = reader.peek().ok_or(BlockDeclined::Empty)?;
    if first.indent != 0 {
        return Err(BlockDeclined::IndentedStart);
    }
    let map = reader.mapping(0, 0);
    let why = reader.declined.unwrap_or(BlockDeclined::Construct);
    let map = map.ok_or(why)?;
    // The top-level mapping ends only where the text does.
    if reader.peek().is_some() {
        return Err(BlockDeclined::Construct);
    }
    Ok(Value::Object(map))
}

/// Whether every byte is printable ASCII or a line feed: eight bytes a step (the build
/// optimises for size, which leaves loops as they are written): 1.75 ms over 7.6 MB, where
/// a loop byte by byte takes 5.9 ms.
fn printable_ascii(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = ONES * 0x80;
    /// 0x80 in each byte of `x` that is zero, 0 in the others.
    fn zero_bytes(x: u64) -> u64 {
        !((x & !HIGH).wrapping_add(!HIGH) | x | !HIGH)
    }
    let mut words = bytes.chunks_exact(8);
    let mut bad = 0;
    for word in words.by_ref() {
        let mut bytes8 = [0; 8];
        bytes8.copy_from_slice(word);
        let x = u64::from_ne_bytes(bytes8);
        // line feeds (0x0a) made 0x2a, printable like the rest should be
        let x = x ^ (zero_bytes(x ^ (ONES * u64::from(b'\n'))) >> 2);
        // non-ASCII, DEL, or below 0x20 (the borrow of a byte below 0x20 sets its top bit)
        bad |= x & HIGH
            | zero_bytes(x ^ (ONES * 0x7f))
            | (x.wrapping_sub(ONES * u64::from(b' ')) & !x & HIGH);
    }
    bad == 0
        && words
            .remainder()
            .iter()
            .all(|&b| (b' '..=b'~').contains(&b) || b == b'\n')
}

/// A line that carries structure (not blank, not a comment).
#[derive(Clone, Copy)]
struct Line<'a> {
    indent: usize,
    /// The line from its first non-space character.
    content: &'a str,
    /// Where the next line starts.
    next: usize,
}

struct Reader<'a> {
    text: &'a str,
    /// Start of the next line not yet read.
    pos: usize,
    /// The rest of a sequence entry's line (`- key: value`), read as a line of its own
    /// indented to where its content starts.
    inline: Option<Line<'a>>,
    /// Nodes and scalar bytes so far, counted as the full reader counts them.
    spent: Size,
    /// The top-level keys whose values are wanted (`None`: all). The others are read for
    /// their form only: no value is made, no key compared, nothing counted.
    wanted: Option<&'a [&'a str]>,
    /// Whether the value being read is one of those others.
    skipping: bool,
    /// The last line `peek` found, and the `pos` it was found from.
    peeked: Option<(usize, Option<Line<'a>>)>,
    /// Why the reading stopped, when it is more than a construct of another form.
    declined: Option<BlockDeclined>,
}

impl<'a> Reader<'a> {
    /// The raw line at `pos` and where the one after it starts.
    fn raw_line(&self, pos: usize) -> Option<(&'a str, usize)> {
        let rest = self.text.get(pos..).filter(|r| !r.is_empty())?;
        Some(match rest.find('\n') {
            Some(end) => (&rest[..end], pos + end + 1),
            None => (rest, self.text.len()),
        })
    }

    /// The next line that carries structure, without taking it.
    fn peek(&mut self) -> Option<Line<'a>> {
        if let Some(line) = self.inline {
            return Some(line);
        }
        if let Some((at, line)) = self.peeked {
            if at == self.pos {
                return line;
            }
        }
        let line = self.find_line();
        self.peeked = Some((self.pos, line));
        line
    }

    /// The first line from `pos` on that carries structure.
    fn find_line(&self) -> Option<Line<'a>> {
        let mut pos = self.pos;
        loop {
            let (raw, next) = self.raw_line(pos)?;
            let content = raw.trim_start_matches(' ');
            if !content.is_empty() && !content.starts_with('#') {
                return Some(Line {
                    indent: raw.len() - content.len(),
                    content,
                    next,
                });
            }
            pos = next;
        }
    }

    /// Take the line `peek` gave.
    fn take(&mut self, line: Line<'a>) {
        if self.inline.take().is_none() {
            self.pos = line.next;
        }
    }

    /// Stop reading, for `why`.
    fn decline<T>(&mut self, why: BlockDeclined) -> Option<T> {
        self.declined = Some(why);
        None
    }

    /// Count a node as the full reader does; `None` past its bounds (it reports them).
    fn spend(&mut self, size: Size) -> Option<()> {
        if self.skipping {
            return Some(());
        }
        self.spent.nodes += size.nodes;
        self.spent.bytes += size.bytes;
        if self.spent.nodes > MAX_EXPANDED_NODES || self.spent.bytes > MAX_EXPANDED_BYTES {
            return self.decline(BlockDeclined::OverBudget);
        }
        Some(())
    }

    /// A block mapping whose keys stand at `indent`.
    fn mapping(&mut self, indent: usize, depth: usize) -> Option<Map<String, Value>> {
        if depth > MAX_BLOCK_DEPTH {
            return self.decline(BlockDeclined::TooDeep);
        }
        let mut map = Map::new();
        while let Some(line) = self.peek() {
            if line.indent < indent {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let (key, rest) = split_key(line.content)?;
            self.take(line);
            let outer = self.skipping;
            if let (0, Some(wanted)) = (depth, self.wanted) {
                self.skipping = !wanted.contains(&key);
            }
            if self.skipping {
                self.value_of(rest, indent, depth)?;
            } else {
                let Some(key) = text_key(key) else {
                    return self.decline(BlockDeclined::NonTextKey);
                };
                self.spend(Size {
                    nodes: 1,
                    bytes: key.len(),
                    height: 0,
                })?;
                let value = self.value_of(rest, indent, depth)?;
                if map.insert(key, value).is_some() {
                    return self.decline(BlockDeclined::DuplicateKey);
                }
            }
            self.skipping = outer;
        }
        self.spend(Size {
            nodes: 1,
            ..Size::default()
        })?;
        Some(map)
    }

    /// The value after `key:` (`rest` is what follows the colon) of a mapping at `indent`.
    fn value_of(&mut self, rest: &'a str, indent: usize, depth: usize) -> Option<Value> {
        let rest = rest.trim_start_matches(' ');
        if rest.is_empty() || rest.starts_with('#') {
            let Some(next) = self.peek() else {
                return self.scalar_value(String::new(), TScalarStyle::Plain);
            };
            let entry = is_entry(next.content);
            return if next.indent > indent {
                if entry {
                    self.sequence(next.indent, depth + 1).map(Value::Array)
                } else {
                    self.mapping(next.indent, depth + 1).map(Value::Object)
                }
            } else if next.indent == indent && entry {
                // an indentless sequence: its entries stand where the keys do
                self.sequence(indent, depth + 1).map(Value::Array)
            } else {
                self.scalar_value(String::new(), TScalarStyle::Plain)
            };
        }
        if let Some(header) = rest.strip_prefix('|') {
            return self.literal(header, indent);
        }
        let value = self.inline_scalar(rest)?;
        // Nothing may continue the scalar on a deeper line (a multi-line plain scalar, or an
        // error): the full reader decides those.
        if self.peek().is_some_and(|next| next.indent > indent) {
            return None;
        }
        Some(value)
    }

    /// A block sequence whose `-` stand at `indent`.
    fn sequence(&mut self, indent: usize, depth: usize) -> Option<Vec<Value>> {
        if depth > MAX_BLOCK_DEPTH {
            return self.decline(BlockDeclined::TooDeep);
        }
        let mut items = Vec::new();
        while let Some(line) = self.peek() {
            if line.indent < indent || (line.indent == indent && !is_entry(line.content)) {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let item = line.content.strip_prefix("- ")?;
            let text = item.trim_start_matches(' ');
            if text.is_empty() || text.starts_with(['#', '-', '|', '>']) {
                return None;
            }
            let column = indent + (line.content.len() - text.len());
            self.take(line);
            if split_key(text).is_some() {
                // `- key: value`: a mapping whose keys stand where this one starts
                self.inline = Some(Line {
                    indent: column,
                    content: text,
                    next: line.next,
                });
                items.push(Value::Object(self.mapping(column, depth + 1)?));
            } else {
                items.push(self.inline_scalar(text)?);
                if self.peek().is_some_and(|next| next.indent > indent) {
                    return None;
                }
            }
        }
        self.spend(Size {
            nodes: 1,
            ..Size::default()
        })?;
        Some(items)
    }

    /// A single-line scalar: quoted, or plain up to a comment.
    fn inline_scalar(&mut self, text: &str) -> Option<Value> {
        let (scalar, style, after) = match text.as_bytes()[0] {
            b'"' => {
                let end = text[1..].find('"')? + 1;
                let inner = &text[1..end];
                if inner.contains('\\') {
                    return None;
                }
                (
                    Cow::Borrowed(inner),
                    TScalarStyle::DoubleQuoted,
                    &text[end + 1..],
                )
            }
            b'\'' => {
                let (inner, after) = single_quoted(&text[1..])?;
                (Cow::Owned(inner), TScalarStyle::SingleQuoted, after)
            }
            _ => {
                let plain = plain_scalar(text)?;
                (Cow::Borrowed(plain), TScalarStyle::Plain, "")
            }
        };
        if !only_comment(after) {
            return None;
        }
        if self.skipping {
            return Some(Value::Null);
        }
        self.scalar_value(scalar.into_owned(), style)
    }

    /// A scalar resolved and counted as the full reader does.
    fn scalar_value(&mut self, text: String, style: TScalarStyle) -> Option<Value> {
        if self.skipping {
            return Some(Value::Null);
        }
        let value = resolve_scalar(text, style, None).ok()?;
        self.spend(Size::of_scalar(&value))?;
        Some(value)
    }

    /// A literal block scalar (`|` or `|-`, `header` after the bar) of a mapping value at
    /// `indent`: its lines are those indented deeper than the first one's indentation, blank
    /// lines among them kept, the trailing ones dropped (clip or strip chomping).
    fn literal(&mut self, header: &str, indent: usize) -> Option<Value> {
        let strip = header.starts_with('-');
        let after = header.strip_prefix('-').unwrap_or(header);
        if !only_comment(after) {
            return None;
        }
        let (first, _) = self.raw_line(self.pos)?;
        let block_indent = first.len() - first.trim_start_matches(' ').len();
        // Leading blank lines and an empty scalar are left to the full reader.
        if first.trim_start_matches(' ').is_empty() || block_indent <= indent {
            return None;
        }
        let mut out = String::new();
        let mut blanks = 0usize;
        let mut pos = self.pos;
        while let Some((raw, next)) = self.raw_line(pos) {
            let content = raw.trim_start_matches(' ');
            if raw.is_empty() {
                blanks += 1;
            } else if content.is_empty() {
                return None;
            } else if raw.len() - content.len() >= block_indent {
                if next == self.text.len() && !self.text.ends_with('\n') {
                    return None;
                }
                if !self.skipping {
                    out.extend(std::iter::repeat_n('\n', blanks));
                    out.push_str(&raw[block_indent..]);
                    out.push('\n');
                }
                blanks = 0;
            } else {
                break;
            }
            pos = next;
        }
        // Blank lines at its end are not the scalar's (clip and strip chomping).
        self.pos = pos;
        if strip {
            out.pop();
        }
        self.scalar_value(out, TScalarStyle::Literal)
    }
}

/// `key: rest` or `key:` with a plain key of the common characters: the key, and what follows
/// the colon.
fn split_key(content: &str) -> Option<(&str, &str)> {
    let bytes = content.as_bytes();
    if !bytes.first()?.is_ascii_alphanumeric() && bytes[0] != b'_' {
        return None;
    }
    let end = bytes.iter().position(|b| {
        !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/' | b'+'))
    })?;
    if bytes[end] != b':' || end > MAX_KEY || !matches!(bytes.get(end + 1), None | Some(b' ')) {
        return None;
    }
    Some((&content[..end], &content[end + 1..]))
}

/// A key as the full reader takes it: only one that stays text (`yes`, `1`, `null` do not).
pub(super) fn text_key(key: &str) -> Option<String> {
    match resolve_scalar(key.to_owned(), TScalarStyle::Plain, None).ok()? {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// Whether `after` (what follows a value on its line) is nothing, or a comment after a space.
fn only_comment(after: &str) -> bool {
    let comment = after.trim_start_matches(' ');
    comment.is_empty() || (comment.starts_with('#') && comment.len() < after.len())
}

/// Whether a line's content is a sequence entry.
fn is_entry(content: &str) -> bool {
    content == "-" || content.starts_with("- ")
}

/// A single-line plain scalar (`text` up to a ` #` comment), when it is one the full reader
/// reads the same way.
fn plain_scalar(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let first = bytes[0];
    let second = bytes.get(1).copied();
    match first {
        b'-' | b':' if second.is_some_and(|c| c != b' ') => {}
        b'-' | b'?' | b':' | b',' | b'[' | b']' | b'{' | b'}' | b'#' | b'&' | b'*' | b'!'
        | b'|' | b'>' | b'\'' | b'"' | b'%' | b'@' | b'`' => return None,
        _ => {}
    }
    // One pass: the scalar ends at a comment; `: ` (or a final `:`) and flow indicators
    // leave the line to the full reader.
    let mut end = bytes.len();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'#' if i > 0 && bytes[i - 1] == b' ' => {
                end = i;
                break;
            }
            b':' if matches!(bytes.get(i + 1), None | Some(b' ')) => return None,
            b'[' | b']' | b'{' | b'}' | b',' => return None,
            _ => {}
        }
    }
    let scalar = text[..end].trim_end_matches(' ');
    Some(scalar)
}

/// A single-quoted scalar's text (`''` stands for `'`) and what follows its closing quote.
fn single_quoted(text: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut rest = text;
    loop {
        let quote = rest.find('\'')?;
        out.push_str(&rest[..quote]);
        rest = &rest[quote + 1..];
        match rest.strip_prefix('\'') {
            Some(after) => {
                out.push('\'');
                rest = after;
            }
            None => return Some((out, rest)),
        }
    }
}

#[cfg(test)]
mod tests;
