//! The text forms a zone transfer is configured with, read alike where the configuration is
//! validated and where the transfer runs: TSIG key files as BIND's `tsig-keygen` writes them
//! (`key "name" { algorithm hmac-sha256; secret "base64"; };`; the secret never appears in
//! `Debug` output or in an error) and zone names. Only text here: the DNS library's key is
//! made from a [`KeyText`] by `rpz::key`.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::regular_file::{open_regular, NotRegular, OpenError};

/// The largest key file read: a `tsig-keygen` key is about 100 bytes.
const MAX_KEY_FILE: u64 = 64 * 1024;

/// The HMAC algorithms a key may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl Algorithm {
    /// Its name in key files ("hmac-sha256").
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Sha1 => "hmac-sha1",
            Algorithm::Sha256 => "hmac-sha256",
            Algorithm::Sha384 => "hmac-sha384",
            Algorithm::Sha512 => "hmac-sha512",
        }
    }

    fn parse(name: &str) -> Option<Algorithm> {
        [
            Algorithm::Sha1,
            Algorithm::Sha256,
            Algorithm::Sha384,
            Algorithm::Sha512,
        ]
        .into_iter()
        .find(|a| a.as_str().eq_ignore_ascii_case(name))
    }
}

/// A key as its file gives it, checked: name, algorithm, secret.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyText {
    /// The key's name, lower case and absolute.
    pub name: String,
    pub algorithm: Algorithm,
    /// The secret's bits (never shown).
    pub secret: Vec<u8>,
    /// The line of the `secret` statement, for what is said of it later.
    pub secret_line: usize,
}

impl fmt::Debug for KeyText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyText")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .field("secret", &"<hidden>")
            .finish()
    }
}

/// Read the key in `path` (at most 64 KiB of it), a regular file: anything else (a FIFO
/// that would block the open or the read, a device) is refused without waiting on it.
pub fn read_key(path: &Path) -> Result<KeyText, KeyFileError> {
    let read = |source| KeyFileError::Read {
        path: path.to_owned(),
        source,
    };
    let file = open_regular(path).map_err(|e| match e {
        OpenError::Io(source) => read(source),
        OpenError::NotRegular(not) => KeyFileError::NotRegular(not),
    })?;
    let mut text = String::new();
    file.take(MAX_KEY_FILE)
        .read_to_string(&mut text)
        .map_err(read)?;
    parse_key(&text)
}

/// Parse a key file's text (BIND format: `key "name" { algorithm A; secret "S"; };`,
/// comments `#`, `//` and `/* */`).
pub fn parse_key(text: &str) -> Result<KeyText, KeyFileError> {
    let tokens = tokens(text)?;
    let mut clauses = Vec::new();
    let mut rest = &tokens[..];
    while !rest.is_empty() {
        let (clause, after) = clause(rest)?;
        clauses.push(clause);
        rest = after;
    }
    if clauses.len() != 1 {
        return Err(KeyFileError::Count(clauses.len()));
    }
    clauses.remove(0).key()
}

/// Why a key file holds no usable key. Never shows the secret.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// The file could not be read.
    #[error("cannot read the key file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// The path names no regular file.
    #[error("the key file {0}")]
    NotRegular(NotRegular),
    /// The text is not a `key "name" { ... };` clause.
    #[error("line {line}: {what}")]
    Syntax {
        /// The line (from 1) where it went wrong.
        line: usize,
        /// What was expected or found.
        what: String,
    },
    /// The algorithm is not one TSIG signs with here.
    #[error("line {line}: the algorithm '{name}' is not supported (hmac-sha1, hmac-sha256, hmac-sha384, hmac-sha512)")]
    Algorithm {
        /// The line of the `algorithm` statement.
        line: usize,
        /// The algorithm named.
        name: String,
    },
    /// The secret is not base64, or is empty.
    #[error("line {line}: the secret is not valid base64 ({flaw})")]
    Secret {
        /// The line of the `secret` statement.
        line: usize,
        /// What is wrong with it (never the secret itself).
        flaw: SecretFlaw,
    },
    /// The key's name is not a domain name.
    #[error("line {line}: the key name '{name}' is not a domain name")]
    Name {
        /// The line of the `key` statement.
        line: usize,
        /// The name given.
        name: String,
    },
    /// A statement the key needs is not there.
    #[error("the key '{key}' has no '{statement}' statement")]
    Missing {
        /// The key's name.
        key: String,
        /// "algorithm" or "secret".
        statement: &'static str,
    },
    /// The file has no key, or more than one.
    #[error("the file must hold exactly one key clause, it holds {0}")]
    Count(usize),
}

/// One token of a key file and the line it is on.
#[derive(Debug, PartialEq)]
struct Token {
    /// The line, from 1.
    line: usize,
    /// What it is.
    kind: TokenKind,
}

/// The kinds of tokens of BIND's configuration syntax that a key file uses.
#[derive(Debug, PartialEq)]
enum TokenKind {
    /// A bare word (`key`, `algorithm`, `hmac-sha256`).
    Word(String),
    /// A quoted string, quotes removed.
    Quoted(String),
    /// `{`, `}` or `;`.
    Punct(char),
}

/// Split `text` into tokens, leaving out whitespace and comments.
fn tokens(text: &str) -> Result<Vec<Token>, KeyFileError> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            '#' => skip_line(&mut chars, &mut line),
            '/' if chars.peek() == Some(&'/') => skip_line(&mut chars, &mut line),
            '/' if chars.peek() == Some(&'*') => {
                let start = line;
                chars.next();
                let mut previous = ' ';
                loop {
                    match chars.next() {
                        None => return Err(syntax(start, "a comment is not closed")),
                        Some('/') if previous == '*' => break,
                        Some(c) => {
                            if c == '\n' {
                                line += 1;
                            }
                            previous = c;
                        }
                    }
                }
            }
            '"' => {
                let start = line;
                let mut value = String::new();
                loop {
                    match chars.next() {
                        None | Some('\n') => return Err(syntax(start, "a string is not closed")),
                        Some('"') => break,
                        Some(c) => value.push(c),
                    }
                }
                out.push(Token {
                    line: start,
                    kind: TokenKind::Quoted(value),
                });
            }
            '{' | '}' | ';' => out.push(Token {
                line,
                kind: TokenKind::Punct(c),
            }),
            c => {
                let mut word = String::from(c);
                while let Some(&next) = chars.peek() {
                    if next.is_whitespace() || matches!(next, '{' | '}' | ';' | '"' | '#') {
                        break;
                    }
                    word.push(next);
                    chars.next();
                }
                out.push(Token {
                    line,
                    kind: TokenKind::Word(word),
                });
            }
        }
    }
    Ok(out)
}

/// Skip to the end of the line (the newline is counted).
fn skip_line(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, line: &mut usize) {
    for c in chars.by_ref() {
        if c == '\n' {
            *line += 1;
            return;
        }
    }
}

fn syntax(line: usize, what: impl Into<String>) -> KeyFileError {
    KeyFileError::Syntax {
        line,
        what: what.into(),
    }
}

/// A `key` clause as read, before its values are checked.
struct Clause {
    /// The line of the `key` word.
    line: usize,
    /// The key's name as written.
    name: String,
    /// The algorithm's name and its line.
    algorithm: Option<(String, usize)>,
    /// The secret (base64) and its line.
    secret: Option<(String, usize)>,
}

/// Read one `key "name" { ... };` clause from the front of `tokens`.
fn clause(tokens: &[Token]) -> Result<(Clause, &[Token]), KeyFileError> {
    let mut rest = tokens.iter();
    let first = rest.next().ok_or_else(|| syntax(1, "no key clause"))?;
    if first.kind != TokenKind::Word("key".to_owned()) {
        return Err(syntax(first.line, "expected 'key'"));
    }
    let name = match rest.next() {
        Some(Token {
            kind: TokenKind::Quoted(name) | TokenKind::Word(name),
            ..
        }) => name.clone(),
        _ => return Err(syntax(first.line, "expected the key's name after 'key'")),
    };
    expect(&mut rest, '{', first.line, "after the key's name")?;
    let mut clause = Clause {
        line: first.line,
        name,
        algorithm: None,
        secret: None,
    };
    loop {
        let token = rest
            .next()
            .ok_or_else(|| syntax(last_line(tokens), "the key clause is not closed with '};'"))?;
        let statement = match &token.kind {
            TokenKind::Punct('}') => break,
            TokenKind::Word(word) => word.as_str(),
            _ => return Err(syntax(token.line, "expected 'algorithm' or 'secret'")),
        };
        let value = match rest.next() {
            Some(Token {
                kind: TokenKind::Word(v) | TokenKind::Quoted(v),
                ..
            }) => v.clone(),
            _ => {
                return Err(syntax(
                    token.line,
                    format!("expected a value after '{statement}'"),
                ))
            }
        };
        expect(
            &mut rest,
            ';',
            token.line,
            &format!("after the {statement}"),
        )?;
        match statement {
            "algorithm" => clause.algorithm = Some((value, token.line)),
            "secret" => clause.secret = Some((value, token.line)),
            other => {
                return Err(syntax(
                    token.line,
                    format!("unknown statement '{other}' (expected 'algorithm' or 'secret')"),
                ))
            }
        }
    }
    expect(
        &mut rest,
        ';',
        last_line(tokens),
        "after the key clause's '}'",
    )?;
    Ok((clause, rest.as_slice()))
}

/// Take `punct` from `rest`, or say it is missing `context`.
fn expect(
    rest: &mut std::slice::Iter<'_, Token>,
    punct: char,
    line: usize,
    context: &str,
) -> Result<(), KeyFileError> {
    match rest.next() {
        Some(t) if t.kind == TokenKind::Punct(punct) => Ok(()),
        Some(t) => Err(syntax(t.line, format!("expected '{punct}' {context}"))),
        None => Err(syntax(line, format!("expected '{punct}' {context}"))),
    }
}

fn last_line(tokens: &[Token]) -> usize {
    tokens.last().map_or(1, |t| t.line)
}

impl Clause {
    /// Check the clause's values.
    fn key(self) -> Result<KeyText, KeyFileError> {
        let (algorithm_name, algorithm_line) = self.algorithm.ok_or(KeyFileError::Missing {
            key: self.name.clone(),
            statement: "algorithm",
        })?;
        let (secret, secret_line) = self.secret.ok_or(KeyFileError::Missing {
            key: self.name.clone(),
            statement: "secret",
        })?;
        let algorithm = Algorithm::parse(&algorithm_name).ok_or(KeyFileError::Algorithm {
            line: algorithm_line,
            name: algorithm_name,
        })?;
        let bits = decode_secret(&secret).map_err(|flaw| KeyFileError::Secret {
            line: secret_line,
            flaw,
        })?;
        let name = zone_name(&self.name).map_err(|_| KeyFileError::Name {
            line: self.line,
            name: self.name.clone(),
        })?;
        Ok(KeyText {
            name,
            algorithm,
            secret: bits,
            secret_line,
        })
    }
}

/// What is wrong with a secret that is not base64. Positions, never characters: the secret
/// never appears in an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SecretFlaw {
    /// Nothing between the quotes.
    #[error("it is empty")]
    Empty,
    /// A character outside the base64 alphabet, or `=` before the end.
    #[error("character {offset} is not in the base64 alphabet or is padding before the end")]
    Symbol {
        /// Its offset (from 0) in the secret.
        offset: usize,
    },
    /// The length is not a multiple of four characters (padding missing or extra).
    #[error("its length or padding is wrong")]
    Length,
    /// The last character carries bits beyond the last byte.
    #[error("its last character carries bits beyond the last byte")]
    TrailingBits,
    /// The TSIG library refused the decoded key.
    #[error("the TSIG library refuses it")]
    Refused,
}

/// Decode a secret strictly: standard base64 with its padding, nothing else between the quotes
/// (BIND's `tsig-keygen` writes it so). Lenient decoding would turn a damaged secret into
/// another key that fails only at the primary.
fn decode_secret(secret: &str) -> Result<Vec<u8>, SecretFlaw> {
    use base64::Engine as _;
    if secret.is_empty() {
        return Err(SecretFlaw::Empty);
    }
    base64::engine::general_purpose::STANDARD
        .decode(secret)
        .map_err(|e| match e {
            base64::DecodeError::InvalidByte(offset, _) => SecretFlaw::Symbol { offset },
            base64::DecodeError::InvalidLastSymbol(_, _) => SecretFlaw::TrailingBits,
            base64::DecodeError::InvalidLength(_) | base64::DecodeError::InvalidPadding => {
                SecretFlaw::Length
            }
        })
}

/// Why a text is not a zone name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ZoneNameError {
    /// Nothing was given.
    #[error("the zone name is empty")]
    Empty,
    /// Two dots in a row, or a dot leading a name other than the root.
    #[error("the zone name '{0}' has an empty label")]
    EmptyLabel(String),
    /// A label longer than 63 octets.
    #[error("the zone name '{name}' has a label of {len} octets (at most 63)")]
    LabelTooLong {
        /// The name as given.
        name: String,
        /// The label's length.
        len: usize,
    },
    /// A name longer than 255 octets in wire form.
    #[error("the zone name '{0}' is longer than 255 octets")]
    TooLong(String),
    /// A character that has no place in a host or RPZ name.
    #[error("the zone name '{name}' has the character '{found}' (letters, digits, '-', '_' and '*' only)")]
    Character {
        /// The name as given.
        name: String,
        /// The first character not allowed.
        found: char,
    },
}

/// A zone name normalised: lower case, absolute (trailing dot). Errors name what is wrong.
pub fn zone_name(text: &str) -> Result<String, ZoneNameError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(ZoneNameError::Empty);
    }
    if text == "." {
        return Ok(".".to_owned());
    }
    let relative = text.strip_suffix('.').unwrap_or(text);
    let mut wire_len = 1;
    for label in relative.split('.') {
        if label.is_empty() {
            return Err(ZoneNameError::EmptyLabel(text.to_owned()));
        }
        if label.len() > 63 {
            return Err(ZoneNameError::LabelTooLong {
                name: text.to_owned(),
                len: label.len(),
            });
        }
        if let Some(found) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '*')))
        {
            return Err(ZoneNameError::Character {
                name: text.to_owned(),
                found,
            });
        }
        wire_len += label.len() + 1;
    }
    if wire_len > 255 {
        return Err(ZoneNameError::TooLong(text.to_owned()));
    }
    Ok(format!("{}.", relative.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_secrets_are_refused_with_what_is_wrong() {
        let key = |secret: &str| {
            format!("key \"k\" {{\n algorithm hmac-sha256;\n secret \"{secret}\";\n}};")
        };
        let flaw = |secret: &str| match parse_key(&key(secret)) {
            Err(KeyFileError::Secret { line: 3, flaw }) => flaw,
            other => panic!("{secret:?}: {other:?}"),
        };
        // `=` in the middle: the lenient decoder skipped it and read another key.
        assert_eq!(flaw("YW=Jj"), SecretFlaw::Symbol { offset: 2 });
        assert_eq!(flaw("YWJj=YWJj"), SecretFlaw::Symbol { offset: 4 });
        // trailing partial bits ("YR==" is 'a' with a bit set past its byte)
        assert_eq!(flaw("YR=="), SecretFlaw::TrailingBits);
        // a partial group, padding missing or extra
        assert_eq!(flaw("YWJjZ"), SecretFlaw::Length);
        assert_eq!(flaw("YQ"), SecretFlaw::Length);
        assert_eq!(flaw("YWJj===="), SecretFlaw::Symbol { offset: 4 });
        assert_eq!(flaw("YW Jj"), SecretFlaw::Symbol { offset: 2 });
        assert_eq!(flaw(""), SecretFlaw::Empty);
        assert_eq!(
            parse_key(&key("YW=Jj")).unwrap_err().to_string(),
            "line 3: the secret is not valid base64 (character 2 is not in the base64 alphabet or is padding before the end)"
        );
        // well-formed secrets, padded, decode to their bytes
        assert_eq!(parse_key(&key("YQ==")).unwrap().secret, b"a");
        assert_eq!(parse_key(&key("YWJjZA==")).unwrap().secret, b"abcd");
    }

    #[test]
    fn an_endless_key_file_is_refused_unread() {
        // /dev/zero never ends: it is no regular file, and not read at all.
        let error = read_key(Path::new("/dev/zero")).unwrap_err();
        assert!(matches!(error, KeyFileError::NotRegular(_)), "{error}");
        assert_eq!(
            error.to_string(),
            "the key file '/dev/zero' is a character device, not a regular file"
        );
    }

    #[test]
    fn a_growing_key_file_is_read_only_so_far() {
        // A regular file larger than any key: at most MAX_KEY_FILE bytes are read.
        let path = std::env::temp_dir().join(format!("kres-key-large-{}", std::process::id()));
        let mut text = String::from("key \"k\" { algorithm hmac-sha256; secret \"");
        text.push_str(&"A".repeat(2 * MAX_KEY_FILE as usize));
        text.push_str("\"; };\n");
        std::fs::write(&path, text).expect("key file");
        let error = read_key(&path).unwrap_err();
        std::fs::remove_file(&path).expect("cleanup");
        assert!(matches!(error, KeyFileError::Syntax { .. }), "{error}");
    }
}
