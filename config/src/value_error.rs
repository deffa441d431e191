//! Why a value is not of its custom type (`value_types`): one variant per message upstream's
//! validator gives, the text made only when the failure is reported (the engine's
//! `Failure`), so checks return what went wrong rather than prose.

use std::path::PathBuf;

use crate::regular_file::NotRegular;
use crate::types::TypeError;
use crate::xfr::KeyFileError;

/// Who must be able to use a path: upstream checks the service user `knot-resolver`; we check
/// the credentials of the running process (root passes), like upstream's manager does.
pub(crate) const SERVICE_USER: &str = "knot-resolver:knot-resolver";

/// Why a value is not of its custom type.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ValueError {
    /// Its text is not of the type.
    #[error(transparent)]
    Type(#[from] TypeError),
    /// Not a string or an integer, where upstream's `StrBase` type `class` takes those.
    #[error(
        "Unexpected value for '<class 'knot_resolver.datamodel.types.types.{class}'>'. Expected string, got '{got}' with type '{ty}'"
    )]
    NotStrBase {
        /// The type's name upstream.
        class: &'static str,
        /// The value as Python prints it.
        got: String,
        /// Its Python type.
        ty: &'static str,
    },
    /// Not a string, where an address or a network (`what`) is expected.
    #[error("Unexpected value for a {what}. Expected string, got '{got}' with type '{ty}'")]
    NotString {
        /// What was expected ("IPv4 address", "network subnet").
        what: &'static str,
        /// The value as Python prints it.
        got: String,
        /// Its Python type.
        ty: &'static str,
    },
    /// An `EscapedStr32B` shorter than 32 bytes.
    #[error("the string value {0} is shorter than the minimum 32 bytes.")]
    ShorterThan32(String),
    /// Not an IPv4 address.
    #[error("failed to parse IPv4 address.")]
    Ipv4,
    /// Not an IPv6 address.
    #[error("failed to parse IPv6 address.")]
    Ipv6,
    /// Not a number, where a `Float0_65535` is expected.
    #[error(
        "Unexpected value for '<class 'knot_resolver.datamodel.types.types.Float0_65535'>'. Expected float, got '{got}' with type '{ty}'"
    )]
    NotFloat {
        /// The value as Python prints it.
        got: String,
        /// Its Python type.
        ty: &'static str,
    },
    /// NaN, which upstream lets through and is no price factor.
    #[error("value nan is not a number")]
    Nan,
    /// Below 0 (the value as Python prints the float).
    #[error("value {0} is lower than the minimum 0.0.")]
    BelowZero(String),
    /// Above 65535 (the value as Python prints the float).
    #[error("value {0} is higher than the maximum 65535.0")]
    Above65535(String),
    /// Not a string, where a path is expected.
    #[error("expected file path in a string, got '{got}' with type '{ty}'.")]
    PathNotString {
        /// The value as Python prints it.
        got: String,
        /// Its Python type.
        ty: &'static str,
    },
    /// A path that fails the strict checks.
    #[error(transparent)]
    Path(#[from] PathError),
    /// A TSIG key file that is no regular file.
    #[error("key file {0}")]
    KeyFileNotRegular(NotRegular),
    /// A TSIG key file that cannot be read.
    #[error("cannot read key file '{}': {source}", path.display())]
    KeyFileUnreadable {
        /// The file.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// A TSIG key file that holds no usable key.
    #[error("malformed key file '{}': {error}", path.display())]
    KeyFileMalformed {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        error: KeyFileError,
    },
}

/// Why a path fails the strict checks (each names the path as resolved).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PathError {
    /// A writable directory that is not there.
    #[error("path '{}' does not point to an existing directory", .0.display())]
    NoDirectory(PathBuf),
    /// A readable file that is not there.
    #[error("file '{}' does not exist", .0.display())]
    NoFile(PathBuf),
    /// A readable file that is something else.
    #[error("path '{}' is not a file", .0.display())]
    NotAFile(PathBuf),
    /// A file path whose directory is not there.
    #[error("path '{}' does not point inside an existing directory", .0.display())]
    NotInADirectory(PathBuf),
    /// A file path that is a directory.
    #[error("path '{}' points to a directory when we expected a file", .0.display())]
    IsADirectory(PathBuf),
    /// We may not read it.
    #[error("{} has insufficient permissions to read '{}'", SERVICE_USER, .0.display())]
    CannotRead(PathBuf),
    /// We may not write (or enter) it.
    #[error("{} has insufficient permissions to write/execute '{}'", SERVICE_USER, .0.display())]
    CannotWrite(PathBuf),
}
