//! The declarative configuration of Knot Resolver 6.5: parsing (YAML/JSON/TOML), merging several
//! files, validation with upstream's exact semantics, the typed model everything else reads, the
//! JSON schema, `kresctl validate`, and how a fleet node's configuration is laid over the
//! fleet's ([`overlay`]).
//!
//! Data flows "raw → validated" exactly once: a document is parsed into a raw JSON value (kept
//! untouched for the API), validated by the engine into a normalized value (defaults applied,
//! `auto` resolved, paths resolved), and deserialized into [`KresConfig`].
//!
//! Validation reads no process-wide state: what it needs besides the document comes in a
//! [`ValidationContext`] (where relative paths resolve, which paths to check, what
//! `logging.target: from-arg` stands for), made by the process that validates: the daemon
//! from its command line (a [`ConfigSource`] the manager keeps for reloads and the API),
//! kresctl from its own options and `$KRES_LOGTARGET`.
//!
//! Validation follows upstream's `utils/modeling` semantics (checked against upstream's own
//! validator, see `tests/data/oracle/` and `tests/data/conformance/`): strict scalar types,
//! unknown keys rejected, a `_` spelling rejected alone and ignored next to its `-` spelling, the
//! first bad item of a list reported, unions reported with one cause per variant, all sections'
//! errors collected. Deliberate differences:
//! * paths are JSON pointers (`/network/listen/0/interface`, not `/network/listen[0]/interface`),
//!   and values inside list-or-item fields get their real path where upstream prints `/`;
//! * several unexpected keys are listed sorted (upstream: random set order);
//! * an empty document, a document that is not a mapping, and non-string mapping keys are
//!   handled (empty = all defaults; the others are errors) where upstream crashes;
//! * integers beyond 64 bits are kept exactly for validation (like Python's) but saturate in the
//!   model (only `version` takes any integer), and in JSON documents they are floats;
//! * YAML syntax error texts come from `yaml-rust2`, not PyYAML, and a few PyYAML-only syntax
//!   quirks differ (e.g. `[a, ::1]` is accepted);
//! * NaN is not a valid float (upstream accepts it where a range is checked);
//! * `watchdog: auto` resolves to `true` (this implementation always has file watching);
//! * permission checks use the running process's credentials (upstream's `kresctl` assumes the
//!   `knot-resolver` user);
//! * non-ASCII domain names use UTS #46 processing (plus IDNA 2003's deletions and `ß`/`ς`
//!   mappings) instead of IDNA 2003, so a few exotic labels (bidi edge cases) differ.

#![forbid(unsafe_code)]

pub mod document_diff;
mod engine;
pub mod kept;
mod model;
pub mod overlay;
mod parse;
pub mod regular_file;
pub mod types;
mod value_error;
mod value_types;
pub mod xfr;

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

pub use model::*;
pub use parse::{ParseError, MAX_DEPTH, MAX_EXPANDED_BYTES, MAX_EXPANDED_NODES};

/// The default configuration file of `kresctl validate`.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/knot-resolver/config.yaml";

/// The release of Knot Resolver whose configuration this crate reads and validates: the
/// version a migrated configuration is written for (`kresctl migrate`).
pub const SCHEMA_VERSION: &str = "6.5.0";

/// What validation needs to know about its surroundings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationContext {
    /// Relative paths in the configuration resolve against this directory.
    pub resolve_root: PathBuf,
    /// Which paths to check for existence and permissions.
    pub checks: PathChecks,
    /// What `logging.target: from-arg` stands for.
    pub logtarget_arg: LogTargetArg,
}

/// A loaded configuration: what the user wrote, and what it means.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The merged documents as written (`auto` kept, no defaults).
    pub raw: Value,
    /// The validated model.
    pub model: KresConfig,
}

/// One validation failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// JSON pointer of the offending value (e.g. `/network/listen/0/interface`). Like upstream,
    /// problems of the document as a whole (unexpected top-level keys, a non-mapping document)
    /// are reported at the empty pointer, and rules spanning several sections at `/`.
    pub path: String,
    /// Upstream's message.
    pub message: String,
    /// For a value no variant of a union accepted: why each variant refused it.
    pub causes: Vec<ValidationError>,
}

/// The most errors one validation reports (the rest are counted): an answer stays small
/// whatever the document.
pub const MAX_REPORTED_ERRORS: usize = 100;

/// The longest message or path an error carries; longer ones (quoting a huge value or key)
/// are cut, saying how long they were.
pub const MAX_ERROR_TEXT: usize = 2000;

/// `text` cut to `max` bytes on a character boundary, saying how long it was.
pub(crate) fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let len = text.len();
    let mut at = max;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    text.truncate(at);
    text.push_str(&format!("… ({len} bytes in all)"));
    text
}

impl ValidationError {
    fn from_failure(f: engine::Failure) -> Self {
        ValidationError {
            path: cut(f.path, MAX_ERROR_TEXT),
            message: cut(f.message, MAX_ERROR_TEXT),
            causes: f
                .children
                .into_iter()
                .take(MAX_REPORTED_ERRORS)
                .map(Self::from_failure)
                .collect(),
        }
    }

    fn write_tree(&self, out: &mut fmt::Formatter<'_>, level: usize) -> fmt::Result {
        write!(
            out,
            "\n{}[{}] {}",
            "\t".repeat(level),
            self.path,
            self.message
        )?;
        for c in &self.causes {
            c.write_tree(out, level + 1)?;
        }
        Ok(())
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.path, self.message)
    }
}

/// Every validation failure of a document (never empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl fmt::Display for ValidationErrors {
    /// Upstream's tree: a header line, then one `[path] message` line per error, tab-indented,
    /// union causes one level deeper.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() == 1 {
            f.write_str("Configuration validation error detected:")?;
        } else {
            f.write_str("Configuration validation errors detected:")?;
        }
        for e in &self.0 {
            e.write_tree(f, 1)?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file could not be read.
    #[error("failed to read '{}': {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file is not valid YAML/JSON/TOML, or documents cannot be merged.
    #[error("{}: {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: ParseError,
    },
    /// The merged document is not a valid configuration.
    #[error("{0}")]
    Invalid(#[from] ValidationErrors),
    /// The merged document of these files is not a valid configuration (a reload: the
    /// operator learns which files were read, the errors name the paths inside).
    #[error("{}: {errors}", files_list(files))]
    InvalidFiles {
        files: Vec<PathBuf>,
        #[source]
        errors: ValidationErrors,
    },
}

impl ConfigError {
    /// The error of a reload of `files`: validation errors say which files were read (the
    /// other errors name their file already).
    pub fn of_files(self, files: &[PathBuf]) -> ConfigError {
        match self {
            ConfigError::Invalid(errors) => ConfigError::InvalidFiles {
                files: files.to_vec(),
                errors,
            },
            other => other,
        }
    }
}

/// Files as one text: `a.yaml, b.yaml`.
fn files_list(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parse one document: TOML when `origin` ends with `.toml`, otherwise JSON and then YAML (like
/// upstream). YAML anchors and aliases are resolved; duplicate keys are rejected.
pub fn parse_document(text: &str, origin: &Path) -> Result<Value, ConfigError> {
    let parsed = if origin.extension().is_some_and(|e| e == "toml") {
        parse::parse_toml(text)
    } else {
        parse::parse_json_or_yaml(text)
    };
    parsed.map_err(|source| ConfigError::Parse {
        path: origin.to_owned(),
        source,
    })
}

/// Files from this size on are large: their load gets its heap made ready beforehand
/// ([`load_heap_bytes`]).
const LARGE_LOAD_BYTES: u64 = 1 << 20;

/// The heap a load of `files` and the rendering of what they hold touch, at most (about
/// twelve times their size: the document's text, its parsed and normalized trees, the
/// model, the policy-loader's Lua), to be made ready ahead of the load
/// (`heap::prefault_heap`); 0 when they are small, missing or unreadable
/// (nothing to prepare).
pub fn load_heap_bytes(files: &[PathBuf]) -> usize {
    const PER_BYTE: u64 = 12;
    let total: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    if total < LARGE_LOAD_BYTES {
        return 0;
    }
    let bytes = total
        .min(MAX_EXPANDED_BYTES as u64)
        .saturating_mul(PER_BYTE);
    usize::try_from(bytes).unwrap_or(0)
}

/// Read one configuration file, at most [`MAX_EXPANDED_BYTES`] of it (what a document may
/// expand to): a file that is larger, or endless (`/dev/zero`), is an error, not a read
/// without end. Watched files (`--watch-config`) are read whenever they change.
fn read_config_file(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let read = |source| ConfigError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    // Room for the whole file at once: a large one is not copied at each doubling.
    let size = file
        .metadata()
        .map_or(0, |m| m.len())
        .min(MAX_EXPANDED_BYTES as u64);
    let mut text = String::with_capacity(usize::try_from(size).unwrap_or(0) + 1);
    file.take(MAX_EXPANDED_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(read)?;
    if text.len() > MAX_EXPANDED_BYTES {
        return Err(read(std::io::Error::other(format!(
            "larger than {MAX_EXPANDED_BYTES} bytes"
        ))));
    }
    Ok(text)
}

fn read_and_merge(paths: &[PathBuf]) -> Result<Value, ConfigError> {
    read_and_merge_with(paths, parse_document)
}

/// Read and deep-merge several files, each parsed by `parse`.
fn read_and_merge_with(
    paths: &[PathBuf],
    parse: impl Fn(&str, &Path) -> Result<Value, ConfigError>,
) -> Result<Value, ConfigError> {
    let mut merged = Map::new();
    for path in paths {
        let text = read_config_file(path)?;
        let doc = match parse(&text, path)? {
            Value::Null => Map::new(),
            Value::Object(m) => m,
            other => {
                return Err(ConfigError::Parse {
                    path: path.clone(),
                    source: ParseError::NotAMapping(parse::kind_name(&other)),
                })
            }
        };
        parse::data_combine(&mut merged, doc, "").map_err(|source| ConfigError::Parse {
            path: path.clone(),
            source,
        })?;
    }
    Ok(Value::Object(merged))
}

/// The directory relative paths resolve against: the first file's directory.
pub fn resolve_root_of(paths: &[PathBuf]) -> PathBuf {
    match paths.first().and_then(|p| p.parent()) {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Whether validation checks the file system (paths exist, have the right permissions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathChecks {
    /// Check them all, as the root process does at start (`kresctl validate --strict`).
    Strict,
    /// Check them as the manager process does, as the user it runs as: all but the
    /// management API's unix socket, which the root process bound at start (maybe as another
    /// user, root) and which cannot change while the resolver runs.
    Manager,
    /// Only the document's form (`kresctl validate` without `--strict`, `kresctl convert`).
    Lenient,
}

/// Load several files: parsed, deep-merged in order (mappings merge recursively, any other
/// collision is an error) and validated; relative paths resolve against the first file's directory.
pub fn load_files(
    paths: &[PathBuf],
    checks: PathChecks,
    logtarget_arg: LogTargetArg,
) -> Result<LoadedConfig, ConfigError> {
    ConfigSource {
        files: paths.to_vec(),
        checks,
        logtarget_arg,
    }
    .load()
}

/// Where a process's configuration comes from, and what validating it needs besides the
/// documents: what a reload reads again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSource {
    /// The files, merged in order.
    pub files: Vec<PathBuf>,
    /// Which paths to check for existence and permissions.
    pub checks: PathChecks,
    /// What `logging.target: from-arg` stands for.
    pub logtarget_arg: LogTargetArg,
}

impl ConfigSource {
    /// Read, merge and validate the files (see [`load_files`]); a node of a fleet lays them
    /// over the fleet's document it keeps ([`kept`]).
    pub fn load(&self) -> Result<LoadedConfig, ConfigError> {
        let local = read_and_merge(&self.files)?;
        let kept = match kept::kept_path(&local, &resolve_root_of(&self.files)) {
            Some(path) => kept::read_kept(&path).map_err(|e| ConfigError::Read {
                path,
                source: std::io::Error::other(e.to_string()),
            })?,
            None => None,
        };
        self.compose(&local, kept.as_ref().map(|k| &k.document))
    }

    /// The files alone, read and merged, not validated: what a fleet node's own files say.
    pub fn load_local(&self) -> Result<Value, ConfigError> {
        read_and_merge(&self.files)
    }

    /// The files read again and laid over `shared`, the fleet's document (none: the files
    /// alone), validated: what a node would run with that document.
    pub fn load_with(&self, shared: Option<&Value>) -> Result<LoadedConfig, ConfigError> {
        let local = self.load_local()?;
        self.compose(&local, shared)
    }

    fn compose(&self, local: &Value, shared: Option<&Value>) -> Result<LoadedConfig, ConfigError> {
        let raw = match shared {
            Some(shared) => overlay::overlay(shared, local),
            None => local.clone(),
        };
        let model = validate(&raw, &self.context())?;
        Ok(LoadedConfig { raw, model })
    }

    /// The context documents of this source are validated in: relative paths resolve against
    /// the first file's directory.
    pub fn context(&self) -> ValidationContext {
        ValidationContext {
            resolve_root: resolve_root_of(&self.files),
            checks: self.checks,
            logtarget_arg: self.logtarget_arg.clone(),
        }
    }
}

/// Read what the root process needs of the files before anything starts: the sections
/// `rundir`, `management` and `logging`, parsed and validated as [`ConfigSource::load`] would (syntax errors anywhere
/// are reported). The other sections are not validated: the manager, which loads the whole
/// configuration, reports their errors. A large configuration costs the root only a reading
/// of its form, not the making of its values.
pub fn load_root_view(
    paths: &[PathBuf],
    checks: PathChecks,
    logtarget_arg: LogTargetArg,
) -> Result<RootView, ConfigError> {
    let raw = read_and_merge_with(paths, |text, origin| {
        if origin.extension().is_some_and(|e| e == "toml") {
            return parse_document(text, origin);
        }
        parse::parse_sections(text, &model::ROOT_VIEW).map_err(|source| ConfigError::Parse {
            path: origin.to_owned(),
            source,
        })
    })?;
    let mut raw = match raw {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    raw.retain(|k, _| model::ROOT_VIEW.contains(&k.as_str()));
    let ctx = ValidationContext {
        resolve_root: resolve_root_of(paths),
        checks,
        logtarget_arg,
    };
    let normalized = model::normalize_root_view(&raw, &ctx).map_err(reported)?;
    serde_json::from_value(normalized).map_err(|e| ValidationErrors(vec![not_the_model(&e)]).into())
}

/// The error of a normalized configuration that does not deserialize into the model.
fn not_the_model(e: &serde_json::Error) -> ValidationError {
    ValidationError {
        path: "/".into(),
        message: format!("internal error: the validated configuration does not fit the model: {e}"),
        causes: Vec::new(),
    }
}

/// Validation failures as reported: the first [`MAX_REPORTED_ERRORS`], and how many more.
fn reported(fails: Vec<engine::Failure>) -> ValidationErrors {
    let total = fails.len();
    let mut errors: Vec<ValidationError> = fails
        .into_iter()
        .take(MAX_REPORTED_ERRORS)
        .map(ValidationError::from_failure)
        .collect();
    if total > MAX_REPORTED_ERRORS {
        errors.push(ValidationError {
            path: "/".into(),
            message: format!(
                "{} more errors not shown (the first {MAX_REPORTED_ERRORS} are)",
                total - MAX_REPORTED_ERRORS
            ),
            causes: Vec::new(),
        });
    }
    ValidationErrors(errors)
}

/// Validate a raw document (a mapping; `null` counts as an empty one). All errors are reported.
pub fn validate(raw: &Value, ctx: &ValidationContext) -> Result<KresConfig, ValidationErrors> {
    let normalized = model::normalize(raw, ctx).map_err(reported)?;
    let model: KresConfig = serde_json::from_value(normalized)
        .map_err(|e| ValidationErrors(vec![not_the_model(&e)]))?;
    if let Some(warning) = management_socket_warning(&model) {
        tracing::warn!("{warning}");
    }
    Ok(model)
}

/// Upstream warns (without rejecting) when the API socket is not directly in the rundir.
fn management_socket_warning(cfg: &KresConfig) -> Option<String> {
    let socket = cfg.management.unix_socket.as_ref()?;
    (socket.parent() != Some(cfg.rundir.as_path())).then(|| {
        format!(
            "The management API unix-socket '{}' is not located in the resolver's rundir '{}'. This can lead to permissions issues.",
            socket.display(),
            cfg.rundir.display()
        )
    })
}

/// The JSON schema of the configuration, generated from the model (same property tree, types,
/// enums and defaults as upstream's `kresctl schema`).
pub fn json_schema() -> Value {
    let mut schema = Map::new();
    schema.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    schema.insert(
        "$id".into(),
        json!("https://www.knot-resolver.cz/documentation/v6.5.0/_static/config.schema.json"),
    );
    schema.insert(
        "title".into(),
        json!("Knot Resolver configuration JSON schema"),
    );
    if let Value::Object(body) = engine::describe_object(model::root_def()) {
        schema.extend(body);
    }
    Value::Object(schema)
}

const NON_STRICT_NOTICE: &str = "Basic validation was successful.\n\
If you want more strict validation, you can use the '--strict' switch.\n\
During strict validation, the existence and access rights of paths are also checked.\n\
\n\
However, if you are using an additional file system permission control mechanism,\n\
such as access control lists (ACLs), this validation will likely fail.\n\
This is because the validation runs under a different user/group than the resolver itself\n\
and attempts to access the configured paths directly.";

/// `kresctl validate [--strict] FILE...`: prints upstream's messages and returns the exit code
/// (0 valid, 1 invalid or unreadable). With no files, the default configuration file is used;
/// `logging.target: from-arg` is `logtarget`, [`LOGTARGET_ENV_VAR`] as kresctl's environment
/// gave it (kresctl has no `--logtarget`).
pub fn validate_command(files: &[PathBuf], checks: PathChecks, logtarget: LogTargetArg) -> i32 {
    let default = [PathBuf::from(DEFAULT_CONFIG_FILE)];
    let files = if files.is_empty() {
        &default[..]
    } else {
        files
    };
    let _heap = heap::prefault_heap(load_heap_bytes(files));
    match load_files(files, checks, logtarget) {
        Ok(LoadedConfig { model: cfg, .. }) => {
            if let Some(warning) = management_socket_warning(&cfg) {
                eprintln!("{warning}");
            }
            if checks == PathChecks::Lenient {
                // A closed standard output (`| head -1`) changes nothing of the verdict.
                use std::io::Write;
                let _ = writeln!(std::io::stdout(), "{NON_STRICT_NOTICE}");
            }
            0
        }
        Err(ConfigError::Read { path, source })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            eprintln!("[Errno 2] No such file or directory: '{}'", path.display());
            1
        }
        Err(ConfigError::Parse { source, .. }) => {
            eprintln!("{source}");
            1
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

#[cfg(test)]
mod tests;
