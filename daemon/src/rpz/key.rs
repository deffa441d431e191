//! TSIG keys as BIND's `tsig-keygen` writes them, the format primaries' operators hand out:
//! `key "name" { algorithm hmac-sha256; secret "base64"; };`, read by `config::xfr` (the
//! same reader validation uses) and made into the DNS library's key here. The secret never
//! appears in `Debug` output or in an error.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use domain::tsig;

pub use kres_config::xfr::KeyFileError;
use kres_config::xfr::{self, Algorithm, KeyText};

/// A TSIG key: its file's checked text (name, algorithm, secret; `Debug` hides the secret)
/// and the library's key made from it.
#[derive(Clone, Debug)]
pub struct TsigKey {
    /// What the key file says.
    text: KeyText,
    /// The library's key, made from the secret; shared by the transactions signed with it.
    key: Arc<tsig::Key>,
}

impl TsigKey {
    /// Read the key in `path` (BIND format; hmac-sha256/384/512, and hmac-sha1).
    pub fn from_file(path: &Path) -> Result<TsigKey, KeyFileError> {
        TsigKey::from_text(xfr::read_key(path)?)
    }

    /// Parse a key file's text (BIND format: `key "name" { algorithm A; secret "S"; };`,
    /// comments `#`, `//` and `/* */`).
    pub fn parse(text: &str) -> Result<TsigKey, KeyFileError> {
        TsigKey::from_text(xfr::parse_key(text)?)
    }

    /// The library's key for a key file's checked text.
    fn from_text(text: KeyText) -> Result<TsigKey, KeyFileError> {
        let algorithm = match text.algorithm {
            Algorithm::Sha1 => tsig::Algorithm::Sha1,
            Algorithm::Sha256 => tsig::Algorithm::Sha256,
            Algorithm::Sha384 => tsig::Algorithm::Sha384,
            Algorithm::Sha512 => tsig::Algorithm::Sha512,
        };
        let key_name = tsig::KeyName::from_str(&text.name).map_err(|_| KeyFileError::Name {
            line: 1,
            name: text.name.clone(),
        })?;
        let key = tsig::Key::new(algorithm, &text.secret, key_name, None, None).map_err(|_| {
            KeyFileError::Secret {
                line: text.secret_line,
                flaw: xfr::SecretFlaw::Refused,
            }
        })?;
        Ok(TsigKey {
            text,
            key: Arc::new(key),
        })
    }

    /// The key's name, lower case and absolute ("xfr-key.").
    pub fn name(&self) -> &str {
        &self.text.name
    }

    /// The algorithm's name as key files give it ("hmac-sha256").
    pub fn algorithm(&self) -> &'static str {
        self.text.algorithm.as_str()
    }

    /// The library's key, for signing and verifying.
    pub(crate) fn inner(&self) -> Arc<tsig::Key> {
        Arc::clone(&self.key)
    }
}

impl PartialEq for TsigKey {
    /// Keys are equal when they sign alike: same name, algorithm and secret.
    fn eq(&self, other: &TsigKey) -> bool {
        let (a, b) = (&self.text, &other.text);
        a.name == b.name && a.algorithm == b.algorithm && a.secret == b.secret
    }
}

impl Eq for TsigKey {}

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
            "line 3: the secret is not valid base64 (character 3 is not in the base64 alphabet or is padding before the end)",
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
