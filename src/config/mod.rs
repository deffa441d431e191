//! Interim configuration loading for the walking skeleton: YAML/JSON documents, the raw
//! document kept as written, and the few validated fields the skeleton consumes. The full
//! datamodel with upstream's validation replaces this module.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// A configuration problem, with the JSON pointer of the offending value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("Configuration validation error detected:\n{0}")]
    Invalid(ValidationErrors),
}

/// One validation problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    pub path: String,
    pub message: String,
}

/// Every validation problem found in a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl std::fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for e in &self.0 {
            writeln!(f, "\t[{}] {}", e.path, e.message)?;
        }
        Ok(())
    }
}

/// How validation treats paths.
#[derive(Debug, Clone)]
pub struct ValidationContext {
    pub resolve_root: PathBuf,
    pub strict: bool,
}

/// A loaded configuration: the document as written and the validated model.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub raw: Value,
    pub model: KresConfig,
}

#[derive(Debug, Clone, PartialEq)]
pub struct KresConfig {
    pub rundir: PathBuf,
    pub workers: u32,
    pub hostname: String,
    pub management: ManagementSchema,
    pub network: NetworkSchema,
    pub cache: CacheSchema,
    pub local_data: LocalDataSchema,
    pub logging: LoggingSchema,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ManagementSchema {
    pub unix_socket: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NetworkSchema {
    pub listen: Vec<ListenSchema>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ListenSchema {
    pub interface: Vec<(String, Option<u16>)>,
    pub port: Option<u16>,
    pub kind: String,
    pub freebind: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CacheSchema {
    pub storage: PathBuf,
    pub size_max_bytes: u64,
    pub garbage_collector: GcSchema,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GcSchema {
    pub enable: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LocalDataSchema {
    pub records: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LoggingSchema {
    pub level: String,
}

/// Parse one document: JSON first, then YAML.
pub fn parse_document(text: &str, origin: &Path) -> Result<Value, ConfigError> {
    if let Ok(v) = serde_json::from_str(text) {
        return Ok(v);
    }
    let docs = yaml_rust2::YamlLoader::load_from_str(text).map_err(|e| ConfigError::Parse {
        path: origin.to_owned(),
        message: e.to_string(),
    })?;
    Ok(docs
        .into_iter()
        .next()
        .map(yaml_to_json)
        .unwrap_or(Value::Object(Default::default())))
}

fn yaml_to_json(y: yaml_rust2::Yaml) -> Value {
    use yaml_rust2::Yaml;
    match y {
        Yaml::Real(s) => s
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .unwrap_or(Value::String(s)),
        Yaml::Integer(i) => Value::from(i),
        Yaml::String(s) => Value::String(s),
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Array(a) => Value::Array(a.into_iter().map(yaml_to_json).collect()),
        Yaml::Hash(h) => Value::Object(
            h.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        Yaml::String(s) => s,
                        Yaml::Integer(i) => i.to_string(),
                        Yaml::Boolean(b) => b.to_string(),
                        other => format!("{other:?}"),
                    };
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        Yaml::Null | Yaml::BadValue => Value::Null,
        Yaml::Alias(_) => Value::Null,
    }
}

/// Load, merge and validate configuration files.
pub fn load_files(paths: &[PathBuf], strict: bool) -> Result<LoadedConfig, ConfigError> {
    let mut merged = Value::Object(Default::default());
    for path in paths {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        let doc = parse_document(&text, path)?;
        if let (Value::Object(m), Value::Object(d)) = (&mut merged, doc) {
            m.extend(d);
        }
    }
    let root = paths
        .first()
        .and_then(|p| p.parent())
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let model = validate(
        &merged,
        &ValidationContext {
            resolve_root: root,
            strict,
        },
    )
    .map_err(ConfigError::Invalid)?;
    Ok(LoadedConfig { raw: merged, model })
}

/// Validate a raw document into the model.
pub fn validate(raw: &Value, ctx: &ValidationContext) -> Result<KresConfig, ValidationErrors> {
    let mut errors = Vec::new();
    let s = |p: &str| raw.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let resolve = |p: String| {
        let p = PathBuf::from(p);
        if p.is_relative() {
            ctx.resolve_root.join(p)
        } else {
            p
        }
    };
    let rundir = s("/rundir")
        .map(resolve)
        .unwrap_or_else(|| PathBuf::from("/run/knot-resolver"));
    let workers = match raw.pointer("/workers") {
        None => 1,
        Some(Value::String(a)) if a == "auto" => std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => n as u32,
            _ => {
                errors.push(ValidationError {
                    path: "/workers".into(),
                    message: "expected a positive integer or 'auto'".into(),
                });
                1
            }
        },
    };
    let mut listen = Vec::new();
    match raw.pointer("/network/listen") {
        None => listen.push(ListenSchema {
            interface: vec![("127.0.0.1".into(), None), ("::1".into(), None)],
            port: Some(53),
            kind: "dns".into(),
            freebind: true,
        }),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let mut interface = Vec::new();
                let ifaces: Vec<&Value> = match item.get("interface") {
                    Some(Value::Array(a)) => a.iter().collect(),
                    Some(v) => vec![v],
                    None => vec![],
                };
                for v in ifaces {
                    match v.as_str() {
                        Some(text) => match text.rsplit_once('@') {
                            Some((addr, port)) => match port.parse::<u16>() {
                                Ok(p) if p > 0 => interface.push((addr.to_owned(), Some(p))),
                                _ => errors.push(ValidationError {
                                    path: format!("/network/listen/{i}/interface"),
                                    message: format!("invalid port in {text:?}"),
                                }),
                            },
                            None => interface.push((text.to_owned(), None)),
                        },
                        None => errors.push(ValidationError {
                            path: format!("/network/listen/{i}/interface"),
                            message: "expected a string".into(),
                        }),
                    }
                }
                let kind = item
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or("dns")
                    .to_owned();
                let port = item
                    .get("port")
                    .and_then(Value::as_u64)
                    .map(|p| p as u16)
                    .or(Some(if kind == "dot" { 853 } else { 53 }));
                listen.push(ListenSchema {
                    interface,
                    port,
                    kind,
                    freebind: item
                        .get("freebind")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                });
            }
        }
        Some(_) => errors.push(ValidationError {
            path: "/network/listen".into(),
            message: "expected a list".into(),
        }),
    }
    let size_max_bytes = match s("/cache/size-max") {
        None => 100 * 1024 * 1024,
        Some(text) => {
            let (num, unit) = text.split_at(text.len().saturating_sub(1));
            let mult = match unit {
                "B" => 1,
                "K" => 1024,
                "M" => 1024 * 1024,
                "G" => 1024 * 1024 * 1024,
                _ => 0,
            };
            match num.parse::<u64>() {
                Ok(n) if mult > 0 => n * mult,
                _ => {
                    errors.push(ValidationError {
                        path: "/cache/size-max".into(),
                        message: format!("invalid size {text:?}"),
                    });
                    0
                }
            }
        }
    };
    let cfg = KresConfig {
        rundir,
        workers,
        hostname: s("/hostname").unwrap_or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_default()
        }),
        management: ManagementSchema {
            unix_socket: s("/management/unix-socket")
                .map(resolve)
                .or(Some(PathBuf::from("/run/knot-resolver/kres-api.sock"))),
        },
        network: NetworkSchema { listen },
        cache: CacheSchema {
            storage: s("/cache/storage")
                .map(resolve)
                .unwrap_or_else(|| PathBuf::from("/var/cache/knot-resolver")),
            size_max_bytes,
            garbage_collector: GcSchema {
                enable: raw
                    .pointer("/cache/garbage-collector/enable")
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
            },
        },
        local_data: LocalDataSchema {
            records: s("/local-data/records"),
        },
        logging: LoggingSchema {
            level: s("/logging/level").unwrap_or_else(|| "notice".into()),
        },
    };
    if errors.is_empty() {
        Ok(cfg)
    } else {
        Err(ValidationErrors(errors))
    }
}
