//! How to reach the store: the options an operator gives (raw, [`StoreOptions`]) and the
//! checked form a [`crate::Store`] is built from ([`Settings`]), parsed once. Endpoints are
//! `http://HOST:PORT` or `https://HOST:PORT`, all of one scheme, and `https` needs
//! [`TlsOptions`] (the CA that signed etcd's certificates, and a client certificate when etcd
//! asks for one). A password never appears in `Debug` output.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::error::ConfigError;

/// The most endpoints a client keeps (a fleet's etcd has 3 or 5 members).
pub const MAX_ENDPOINTS: usize = 16;
/// A value is refused past this many bytes unless the options say otherwise: a fleet's
/// configuration document is far smaller, and a hostile or broken one must not bloat every
/// node that reads it.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 16 << 20;
/// A call's default time limit, every endpoint tried included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest PEM file read (a CA bundle, a certificate chain, a key).
const MAX_PEM_BYTES: u64 = 1 << 20;

/// The options as an operator writes them.
#[derive(Clone)]
pub struct StoreOptions {
    /// `http://HOST:PORT` or `https://HOST:PORT` of each member.
    pub endpoints: Vec<String>,
    /// A call's time limit, every endpoint tried included.
    pub timeout: Duration,
    /// The largest value taken from etcd or written to it.
    pub max_value_bytes: usize,
    /// etcd's user and password, exchanged for a token.
    pub auth: Option<Credentials>,
    /// Needed with `https` endpoints.
    pub tls: Option<TlsOptions>,
}

impl StoreOptions {
    /// Options with the defaults for everything but the endpoints.
    pub fn new(endpoints: Vec<String>) -> StoreOptions {
        StoreOptions {
            endpoints,
            timeout: DEFAULT_TIMEOUT,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            auth: None,
            tls: None,
        }
    }
}

impl fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreOptions")
            .field("endpoints", &self.endpoints)
            .field("timeout", &self.timeout)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("auth", &self.auth)
            .field("tls", &self.tls)
            .finish()
    }
}

/// etcd's user name and password.
#[derive(Clone)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// TLS to etcd's client port.
#[derive(Debug, Clone)]
pub struct TlsOptions {
    /// PEM file of the CA certificates etcd's certificates are checked against.
    pub ca_file: PathBuf,
    /// A client certificate, for etcd run with `--client-cert-auth`.
    pub client_cert: Option<ClientCert>,
    /// The name checked in etcd's certificates, when it is not the endpoints' host.
    pub server_name: Option<String>,
}

/// A client certificate chain and its key, both PEM files.
#[derive(Debug, Clone)]
pub struct ClientCert {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    Http,
    Https,
}

/// One member's client address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub scheme: Scheme,
    /// A host name or an IP address (without brackets).
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        if self.host.contains(':') {
            write!(f, "{scheme}://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{scheme}://{}:{}", self.host, self.port)
        }
    }
}

impl Endpoint {
    /// `http://HOST:PORT` or `https://HOST:PORT` (a trailing `/` allowed, nothing else).
    pub(crate) fn parse(text: &str) -> Result<Endpoint, ConfigError> {
        let bad = |reason: &str| ConfigError::Endpoint {
            endpoint: text.to_owned(),
            reason: reason.to_owned(),
        };
        let (scheme, rest) = if let Some(rest) = text.strip_prefix("http://") {
            (Scheme::Http, rest)
        } else if let Some(rest) = text.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else {
            return Err(bad("must start with http:// or https://"));
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#', '@']) {
            return Err(bad("must be SCHEME://HOST:PORT, without a path or user"));
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (host, after) = bracketed
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 address without its closing ']'"))?;
            let port = after
                .strip_prefix(':')
                .ok_or_else(|| bad("the port is missing"))?;
            (host, port)
        } else {
            authority
                .rsplit_once(':')
                .ok_or_else(|| bad("the port is missing"))?
        };
        if host.is_empty() {
            return Err(bad("the host is missing"));
        }
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| bad("the port is not a number from 1 to 65535"))?;
        Ok(Endpoint {
            scheme,
            host: host.to_owned(),
            port,
        })
    }
}

/// Checked options: what a [`crate::Store`] runs on.
#[derive(Clone)]
pub(crate) struct Settings {
    pub endpoints: Vec<Endpoint>,
    pub timeout: Duration,
    pub max_value_bytes: usize,
    pub auth: Option<Credentials>,
    /// Built once; `None` for `http` endpoints.
    pub tls: Option<Tls>,
}

/// A TLS client set-up ready to connect.
#[derive(Clone)]
pub(crate) struct Tls {
    pub connector: tokio_rustls::TlsConnector,
    /// The name checked in the server's certificate instead of the endpoint's host.
    pub server_name: Option<ServerName<'static>>,
}

impl Settings {
    pub(crate) fn check(options: &StoreOptions) -> Result<Settings, ConfigError> {
        if options.endpoints.is_empty() {
            return Err(ConfigError::NoEndpoints);
        }
        if options.endpoints.len() > MAX_ENDPOINTS {
            return Err(ConfigError::TooManyEndpoints { max: MAX_ENDPOINTS });
        }
        let endpoints = options
            .endpoints
            .iter()
            .map(|e| Endpoint::parse(e))
            .collect::<Result<Vec<_>, _>>()?;
        let https = endpoints.iter().any(|e| e.scheme == Scheme::Https);
        if https && endpoints.iter().any(|e| e.scheme == Scheme::Http) {
            return Err(ConfigError::Invalid {
                field: "endpoints",
                reason: "mixes http:// and https:// endpoints".to_owned(),
            });
        }
        if options.timeout.is_zero() {
            return Err(ConfigError::Invalid {
                field: "timeout",
                reason: "must be more than zero".to_owned(),
            });
        }
        if options.max_value_bytes == 0 || options.max_value_bytes > 1 << 30 {
            return Err(ConfigError::Invalid {
                field: "max_value_bytes",
                reason: "must be from 1 byte to 1 GiB".to_owned(),
            });
        }
        let tls = match (&options.tls, https) {
            (Some(tls), true) => Some(build_tls(tls)?),
            (None, false) => None,
            (None, true) => {
                return Err(ConfigError::Invalid {
                    field: "tls",
                    reason: "https:// endpoints need the CA file that signed etcd's certificates"
                        .to_owned(),
                })
            }
            (Some(_), false) => {
                return Err(ConfigError::Invalid {
                    field: "tls",
                    reason: "given for http:// endpoints (write https://)".to_owned(),
                })
            }
        };
        Ok(Settings {
            endpoints,
            timeout: options.timeout,
            max_value_bytes: options.max_value_bytes,
            auth: options.auth.clone(),
            tls,
        })
    }
}

fn build_tls(options: &TlsOptions) -> Result<Tls, ConfigError> {
    // ring has no post-quantum key exchange (rustls deprecates its provider for that);
    // etcd 3.4 (Go 1.19) offers none either, and ring is already in the tree.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let ca = read_pem(&options.ca_file)?;
    let mut added = 0;
    for cert in CertificateDer::pem_slice_iter(&ca) {
        let cert = cert.map_err(|e| pem_error(&options.ca_file, e))?;
        roots.add(cert).map_err(|e| ConfigError::File {
            path: options.ca_file.clone(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
        added += 1;
    }
    if added == 0 {
        return Err(ConfigError::File {
            path: options.ca_file.clone(),
            reason: "holds no PEM certificate".to_owned(),
        });
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::Tls(e.to_string()))?
        .with_root_certificates(roots);
    let config = match &options.client_cert {
        None => builder.with_no_client_auth(),
        Some(client) => {
            let chain_pem = read_pem(&client.cert_file)?;
            let chain = CertificateDer::pem_slice_iter(&chain_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| pem_error(&client.cert_file, e))?;
            if chain.is_empty() {
                return Err(ConfigError::File {
                    path: client.cert_file.clone(),
                    reason: "holds no PEM certificate".to_owned(),
                });
            }
            let key_pem = read_pem(&client.key_file)?;
            let key = PrivateKeyDer::from_pem_slice(&key_pem)
                .map_err(|e| pem_error(&client.key_file, e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| ConfigError::File {
                    path: client.key_file.clone(),
                    reason: format!("does not fit the client certificate: {e}"),
                })?
        }
    };
    let server_name = options
        .server_name
        .as_deref()
        .map(|name| {
            ServerName::try_from(name.to_owned()).map_err(|e| ConfigError::Invalid {
                field: "tls.server_name",
                reason: e.to_string(),
            })
        })
        .transpose()?;
    Ok(Tls {
        connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        server_name,
    })
}

/// A PEM file's bytes, bounded.
fn read_pem(path: &Path) -> Result<Vec<u8>, ConfigError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| ConfigError::File {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ConfigError::File {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(ConfigError::File {
            path: path.to_owned(),
            reason: format!("over {MAX_PEM_BYTES} bytes"),
        });
    }
    Ok(bytes)
}

fn pem_error(path: &Path, e: rustls_pki_types::pem::Error) -> ConfigError {
    ConfigError::File {
        path: path.to_owned(),
        reason: format!("not PEM: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_or_say_why() {
        let ok = [
            ("http://127.0.0.1:2379", Scheme::Http, "127.0.0.1", 2379),
            (
                "https://etcd-1.example:2379/",
                Scheme::Https,
                "etcd-1.example",
                2379,
            ),
            ("http://[::1]:23", Scheme::Http, "::1", 23),
        ];
        for (text, scheme, host, port) in ok {
            let e = Endpoint::parse(text).unwrap();
            assert_eq!((e.scheme, e.host.as_str(), e.port), (scheme, host, port));
        }
        assert_eq!(
            Endpoint::parse("http://[::1]:23").unwrap().to_string(),
            "http://[::1]:23"
        );
        let bad = [
            ("127.0.0.1:2379", "must start with"),
            ("http://127.0.0.1", "port is missing"),
            ("http://127.0.0.1:0", "1 to 65535"),
            ("http://127.0.0.1:99999", "1 to 65535"),
            ("http://:2379", "host is missing"),
            ("http://h:1/v3", "without a path"),
            ("http://u@h:1", "without a path or user"),
            ("http://[::1:1", "closing ']'"),
        ];
        for (text, reason) in bad {
            let e = Endpoint::parse(text).unwrap_err().to_string();
            assert!(e.contains(reason) && e.contains(text), "{text}: {e}");
        }
    }

    #[test]
    fn options_are_checked_whole() {
        let check = |o: StoreOptions| Settings::check(&o).err().map(|e| e.to_string());
        assert_eq!(
            check(StoreOptions::new(vec![])).as_deref(),
            Some("no etcd endpoint given")
        );
        let mixed = StoreOptions::new(vec!["http://a:1".into(), "https://b:1".into()]);
        assert!(check(mixed).unwrap().contains("mixes"));
        let https = StoreOptions::new(vec!["https://a:1".into()]);
        assert!(check(https).unwrap().contains("need the CA file"));
        let mut zero = StoreOptions::new(vec!["http://a:1".into()]);
        zero.timeout = Duration::ZERO;
        assert!(check(zero).unwrap().starts_with("timeout"));
        let mut no_ca = StoreOptions::new(vec!["https://a:1".into()]);
        no_ca.tls = Some(TlsOptions {
            ca_file: "/nonexistent/ca.pem".into(),
            client_cert: None,
            server_name: None,
        });
        assert!(check(no_ca).unwrap().starts_with("/nonexistent/ca.pem: "));
        assert!(check(StoreOptions::new(vec!["http://a:1".into()])).is_none());
    }

    #[test]
    fn a_password_is_never_printed() {
        let mut o = StoreOptions::new(vec!["http://a:1".into()]);
        o.auth = Some(Credentials {
            username: "root".into(),
            password: "s3cret".into(),
        });
        let text = format!("{o:?}");
        assert!(text.contains("root") && !text.contains("s3cret"), "{text}");
    }
}
