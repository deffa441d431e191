//! TSIG keys as BIND's `tsig-keygen` writes them, the format primaries' operators hand out:
//! `key "name" { algorithm hmac-sha256; secret "base64"; };`. The secret never appears in
//! `Debug` output or in an error.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use domain::tsig;

/// A TSIG key: its name, its algorithm and its secret.
#[derive(Clone)]
pub struct TsigKey {
    /// The key's name as the key file gives it, lower case and absolute.
    name: String,
    /// The algorithm's name in the key file ("hmac-sha256").
    algorithm: &'static str,
    /// The secret's bits, kept to compare keys (never shown).
    secret: Arc<[u8]>,
    /// The library's key, made from the secret; shared by the transactions signed with it.
    key: Arc<tsig::Key>,
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
    #[error("line {line}: the secret is not valid base64")]
    Secret {
        /// The line of the `secret` statement.
        line: usize,
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

impl TsigKey {
    /// Read the key in `path` (BIND format; hmac-sha256/384/512, and hmac-sha1).
    pub fn from_file(path: &Path) -> Result<TsigKey, KeyFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        TsigKey::parse(&text)
    }

    /// Parse a key file's text (BIND format: `key "name" { algorithm A; secret "S"; };`,
    /// comments `#`, `//` and `/* */`).
    pub fn parse(text: &str) -> Result<TsigKey, KeyFileError> {
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
        let clause = clauses.remove(0);
        clause.key()
    }

    /// The key's name, lower case and absolute ("xfr-key.").
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The algorithm's name as key files give it ("hmac-sha256").
    pub fn algorithm(&self) -> &'static str {
        self.algorithm
    }

    /// The library's key, for signing and verifying.
    pub(crate) fn inner(&self) -> Arc<tsig::Key> {
        Arc::clone(&self.key)
    }
}

impl fmt::Debug for TsigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TsigKey")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .field("secret", &"<hidden>")
            .finish()
    }
}

impl PartialEq for TsigKey {
    /// Keys are equal when they sign alike: same name, algorithm and secret.
    fn eq(&self, other: &TsigKey) -> bool {
        self.name == other.name && self.algorithm == other.algorithm && self.secret == other.secret
    }
}

impl Eq for TsigKey {}

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
    /// Check the clause's values and make the key.
    fn key(self) -> Result<TsigKey, KeyFileError> {
        let (algorithm_name, algorithm_line) = self.algorithm.ok_or(KeyFileError::Missing {
            key: self.name.clone(),
            statement: "algorithm",
        })?;
        let (secret, secret_line) = self.secret.ok_or(KeyFileError::Missing {
            key: self.name.clone(),
            statement: "secret",
        })?;
        let (algorithm, canonical) = match algorithm_name.to_ascii_lowercase().as_str() {
            "hmac-sha1" => (tsig::Algorithm::Sha1, "hmac-sha1"),
            "hmac-sha256" => (tsig::Algorithm::Sha256, "hmac-sha256"),
            "hmac-sha384" => (tsig::Algorithm::Sha384, "hmac-sha384"),
            "hmac-sha512" => (tsig::Algorithm::Sha512, "hmac-sha512"),
            _ => {
                return Err(KeyFileError::Algorithm {
                    line: algorithm_line,
                    name: algorithm_name,
                })
            }
        };
        let bits: Vec<u8> = domain::utils::base64::decode(&secret)
            .map_err(|_| KeyFileError::Secret { line: secret_line })?;
        if bits.is_empty() {
            return Err(KeyFileError::Secret { line: secret_line });
        }
        let bad_name = || KeyFileError::Name {
            line: self.line,
            name: self.name.clone(),
        };
        let name = crate::rpz::zone_name(&self.name).map_err(|_| bad_name())?;
        let key_name = tsig::KeyName::from_str(&name).map_err(|_| bad_name())?;
        let key = tsig::Key::new(algorithm, &bits, key_name, None, None)
            .map_err(|_| KeyFileError::Secret { line: secret_line })?;
        Ok(TsigKey {
            name,
            algorithm: canonical,
            secret: bits.into(),
            key: Arc::new(key),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYGEN: &str = "key \"xfr-key\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0IQ==\";\n};\n";

    #[test]
    fn reads_what_tsig_keygen_writes() {
        let key = TsigKey::parse(KEYGEN).unwrap();
        assert_eq!(key.name(), "xfr-key.");
        assert_eq!(key.algorithm(), "hmac-sha256");
    }

    #[test]
    fn reads_every_sha2_algorithm_and_comments() {
        for algorithm in ["hmac-sha256", "hmac-sha384", "HMAC-SHA512", "hmac-sha1"] {
            let text = format!(
                "# made by hand\n/* a\n block */ key Feed.Example. {{ // the feed\n algorithm {algorithm}; secret \"YWJj\"; }};"
            );
            let key = TsigKey::parse(&text).unwrap();
            assert_eq!(key.name(), "feed.example.");
            assert_eq!(key.algorithm(), algorithm.to_ascii_lowercase());
        }
    }

    #[test]
    fn errors_name_the_line_and_what_is_wrong() {
        let check = |text: &str, expected: &str| {
            let error = TsigKey::parse(text).unwrap_err().to_string();
            assert_eq!(error, expected, "for {text:?}");
        };
        check(
            "key \"k\" {\n algorithm hmac-md5;\n secret \"YWJj\";\n};",
            "line 2: the algorithm 'hmac-md5' is not supported (hmac-sha1, hmac-sha256, hmac-sha384, hmac-sha512)",
        );
        check(
            "key \"k\" {\n algorithm hmac-sha256;\n secret \"not base64!\";\n};",
            "line 3: the secret is not valid base64",
        );
        check(
            "key \"k\" {\n algorithm hmac-sha256\n secret \"YWJj\";\n};",
            "line 3: expected ';' after the algorithm",
        );
        check(
            "key \"k\" {\n secret \"YWJj\";\n};",
            "the key 'k' has no 'algorithm' statement",
        );
        check(
            "key \"k\" {\n algorithm hmac-sha256;\n secret \"YWJj\";\n}",
            "line 4: expected ';' after the key clause's '}'",
        );
        check("", "the file must hold exactly one key clause, it holds 0");
        check(
            "\n\nkey \"k\" { algorithm hmac-sha256; secret \"YWJj; };",
            "line 3: a string is not closed",
        );
        check(
            "key \"a b\" { algorithm hmac-sha256; secret \"YWJj\"; };",
            "line 1: the key name 'a b' is not a domain name",
        );
        check("options { };", "line 1: expected 'key'");
        check(
            "key \"k\" { algorithm hmac-sha256; secret \"YWJj\"; keep yes; };",
            "line 1: unknown statement 'keep' (expected 'algorithm' or 'secret')",
        );
    }

    #[test]
    fn the_secret_is_never_shown() {
        let secret = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0IQ==";
        let key = TsigKey::parse(KEYGEN).unwrap();
        let debug = format!("{key:?}");
        assert!(!debug.contains(secret), "{debug}");
        assert!(debug.contains("xfr-key."), "{debug}");
        let broken = KEYGEN.replace("sha256", "sha999");
        let error = TsigKey::parse(&broken).unwrap_err();
        assert!(!format!("{error} {error:?}").contains(secret));
    }

    #[test]
    fn keys_compare_by_their_secret() {
        let a = TsigKey::parse(KEYGEN).unwrap();
        let b = TsigKey::parse(&KEYGEN.replace("IQ==", "Iw==")).unwrap();
        assert_eq!(a, TsigKey::parse(KEYGEN).unwrap());
        assert_ne!(a, b);
    }

    #[test]
    fn from_file_names_the_file_it_cannot_read() {
        let error = TsigKey::from_file(Path::new("/nonexistent/xfr.key")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "cannot read the key file /nonexistent/xfr.key"
        );
    }
}
