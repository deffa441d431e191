//! One fetch of a subscribed list over HTTP/1.1 (TLS verified against the system's CA
//! store): a conditional GET (the stored ETag and Last-Modified), redirects followed up to
//! [`FetchLimits::max_redirects`], the body streamed to a staged file within `max-size` and
//! the time bounds, its SHA-256 computed on the way. Nothing here replaces a stored file;
//! the caller checks the body and commits it.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::store::{FileError, Staged};

/// The bounds of one fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchLimits {
    /// The most bytes the body may have.
    pub max_size: u64,
    /// The longest the whole fetch (redirects included) may take.
    pub max_duration: Duration,
    /// The longest wait for a connection or for the next bytes.
    pub idle: Duration,
    /// The most redirects followed.
    pub max_redirects: u32,
}

impl Default for FetchLimits {
    fn default() -> FetchLimits {
        FetchLimits {
            max_size: 256 << 20,
            max_duration: Duration::from_secs(10 * 60),
            idle: Duration::from_secs(30),
            max_redirects: 5,
        }
    }
}

/// The validators of the stored body, sent so an unchanged list costs one 304.
#[derive(Debug, Clone, Default)]
pub struct Validators {
    /// The stored ETag.
    pub etag: Option<String>,
    /// The stored Last-Modified.
    pub last_modified: Option<String>,
}

/// What a fetch brought.
pub enum Fetched {
    /// The server says the stored body is current (304).
    Unchanged,
    /// A new body, staged beside the source file.
    Body {
        /// The staged body.
        staged: Staged,
        /// Its size.
        bytes: u64,
        /// Its SHA-256 (hex).
        sha256: String,
        /// The validators to send next time.
        validators: Validators,
    },
}

/// Why a fetch failed; the stored list stays in force.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL cannot be fetched (no host, an unknown scheme).
    #[error("bad URL '{0}'")]
    Url(String),
    /// No connection (DNS, TCP or TLS).
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The exchange failed in its middle (a body cut short included).
    #[error("the transfer failed: {0}")]
    Network(String),
    /// A time bound was reached.
    #[error("timed out: {0}")]
    Timeout(&'static str),
    /// The body is larger than allowed.
    #[error("the list is larger than its max-size ({0} bytes)")]
    TooLarge(u64),
    /// Too many redirects (a loop, say).
    #[error("more than {0} redirects")]
    Redirects(u32),
    /// A redirect from https to plain http.
    #[error("a redirect from https to '{0}' (not https) is refused")]
    Downgrade(String),
    /// The server answered with another status.
    #[error("HTTP status {0}")]
    Status(u16),
    /// The staged file could not be written.
    #[error("cannot store the list: {0}")]
    File(#[from] FileError),
}

impl FetchError {
    /// A short stable label for status and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            FetchError::Url(_) => "url",
            FetchError::Connect(_) => "connect",
            FetchError::Network(_) => "network",
            FetchError::Timeout(_) => "timeout",
            FetchError::TooLarge(_) => "too-large",
            FetchError::Redirects(_) => "redirects",
            FetchError::Downgrade(_) => "redirect-downgrade",
            FetchError::Status(_) => "http-status",
            FetchError::File(_) => "file",
        }
    }
}

/// A stream both plain TCP and TLS connections are.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The TLS settings: the system's CA store, read once.
fn tls() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::warn!("reading the system's CA certificates: {error}");
            }
            let (added, _) = roots.add_parsable_certificates(found.certs);
            tracing::debug!("{added} CA certificates for subscribed lists");
            // ring has no post-quantum key exchange (rustls deprecates its provider for
            // that); it is already in the tree, as for the fleet's TLS.
            #[allow(deprecated)]
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|b| b.with_root_certificates(roots).with_no_client_auth());
            Arc::new(config.unwrap_or_else(|_| {
                // ring supports the default versions; this is never reached.
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth()
            }))
        })
        .clone()
}

/// Fetch `url` into a sibling staged for `source` (where the body is kept), sending
/// `validators`; within `limits`.
pub async fn fetch(
    url: &str,
    validators: &Validators,
    source: &Path,
    limits: &FetchLimits,
) -> Result<Fetched, FetchError> {
    let deadline = Instant::now() + limits.max_duration;
    // The connections' tasks, this fetch's own: each ends with its answer's body, and any
    // still running ends with the fetch.
    let mut connections = JoinSet::new();
    let following = follow(url, validators, source, limits, &mut connections);
    match tokio::time::timeout_at(deadline, following).await {
        Ok(result) => result,
        Err(_) => Err(FetchError::Timeout("the fetch took longer than allowed")),
    }
}

/// Ask `url`, following redirects, each connection driven on `connections`.
async fn follow(
    url: &str,
    validators: &Validators,
    source: &Path,
    limits: &FetchLimits,
    connections: &mut JoinSet<()>,
) -> Result<Fetched, FetchError> {
    let mut uri: Uri = url.parse().map_err(|_| FetchError::Url(url.to_owned()))?;
    let mut redirects = 0;
    loop {
        let response = ask(&uri, validators, limits, connections).await?;
        let status = response.status();
        if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
            redirects += 1;
            if redirects > limits.max_redirects {
                return Err(FetchError::Redirects(limits.max_redirects));
            }
            let location = response
                .headers()
                .get(hyper::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or(FetchError::Status(status.as_u16()))?;
            uri = next_hop(&uri, location)?;
            continue;
        }
        if status == StatusCode::NOT_MODIFIED {
            return Ok(Fetched::Unchanged);
        }
        if status != StatusCode::OK {
            return Err(FetchError::Status(status.as_u16()));
        }
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v: &hyper::header::HeaderValue| v.to_str().ok())
                .map(str::to_owned)
        };
        let next = Validators {
            etag: header(hyper::header::ETAG),
            last_modified: header(hyper::header::LAST_MODIFIED),
        };
        if let Some(length) = response
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        {
            if length > limits.max_size {
                return Err(FetchError::TooLarge(limits.max_size));
            }
        }
        return body(response.into_body(), source, next, limits).await;
    }
}

/// Where a redirect from `base` to `location` leads: never from https to http.
fn next_hop(base: &Uri, location: &str) -> Result<Uri, FetchError> {
    let next = resolve(base, location)?;
    if base.scheme_str() == Some("https") && next.scheme_str() != Some("https") {
        return Err(FetchError::Downgrade(location.to_owned()));
    }
    Ok(next)
}

/// `location` (absolute, or a path) read against `base`.
fn resolve(base: &Uri, location: &str) -> Result<Uri, FetchError> {
    if location.contains("://") {
        return location
            .parse()
            .map_err(|_| FetchError::Url(location.to_owned()));
    }
    let (Some(scheme), Some(authority)) = (base.scheme_str(), base.authority()) else {
        return Err(FetchError::Url(location.to_owned()));
    };
    let path = if location.starts_with('/') {
        location.to_owned()
    } else {
        let dir = base.path().rsplit_once('/').map_or("", |(d, _)| d);
        format!("{dir}/{location}")
    };
    format!("{scheme}://{authority}{path}")
        .parse()
        .map_err(|_| FetchError::Url(location.to_owned()))
}

/// Send one GET for `uri` (its connection driven on `connections`); the answer's head and its
/// body to come.
async fn ask(
    uri: &Uri,
    validators: &Validators,
    limits: &FetchLimits,
    connections: &mut JoinSet<()>,
) -> Result<hyper::Response<hyper::body::Incoming>, FetchError> {
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(FetchError::Url(uri.to_string())),
    };
    let host = uri
        .host()
        .ok_or_else(|| FetchError::Url(uri.to_string()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let connecting = async {
        let tcp = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| FetchError::Connect(format!("{host}:{port}: {e}")))?;
        let io: Box<dyn Io> = if https {
            let name = rustls_pki_types::ServerName::try_from(host.clone())
                .map_err(|e| FetchError::Connect(format!("{host} as a TLS name: {e}")))?;
            let stream = tokio_rustls::TlsConnector::from(tls())
                .connect(name, tcp)
                .await
                .map_err(|e| FetchError::Connect(format!("TLS with {host}: {e}")))?;
            Box::new(stream)
        } else {
            Box::new(tcp)
        };
        hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| FetchError::Connect(e.to_string()))
    };
    let (mut sender, connection) = tokio::time::timeout(limits.idle, connecting)
        .await
        .map_err(|_| FetchError::Timeout("no connection"))??;
    // Ends when the connection closes: after the answer, once sender and body are dropped.
    connections.spawn(async move {
        let _ = connection.await;
    });
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default();
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = Request::get(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::USER_AGENT, "knot-resolver-rs")
        .header(hyper::header::ACCEPT_ENCODING, "identity");
    if let Some(etag) = &validators.etag {
        request = request.header(hyper::header::IF_NONE_MATCH, etag);
    }
    if let Some(modified) = &validators.last_modified {
        request = request.header(hyper::header::IF_MODIFIED_SINCE, modified);
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|e| FetchError::Url(e.to_string()))?;
    tokio::time::timeout(limits.idle, sender.send_request(request))
        .await
        .map_err(|_| FetchError::Timeout("no answer"))?
        .map_err(|e| FetchError::Network(e.to_string()))
}

/// Stream `body` to a file staged for `source`, within the size and idle bounds.
async fn body(
    mut body: hyper::body::Incoming,
    source: &Path,
    validators: Validators,
    limits: &FetchLimits,
) -> Result<Fetched, FetchError> {
    let mut staged = Staged::create(source)?;
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    let mut bytes = 0u64;
    loop {
        let frame = tokio::time::timeout(limits.idle, body.frame())
            .await
            .map_err(|_| FetchError::Timeout("the body stalled"))?;
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| FetchError::Network(kres_wire::error_line(&e)))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        bytes += data.len() as u64;
        if bytes > limits.max_size {
            return Err(FetchError::TooLarge(limits.max_size));
        }
        digest.update(&data);
        // Writes to a local file: short, made in place rather than off the runtime.
        staged.write(&data)?;
    }
    staged.sync()?;
    let sha256 = digest
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(Fetched::Body {
        staged,
        bytes,
        sha256,
        validators,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_is_read_against_the_url_it_came_from() {
        let base: Uri = "http://127.0.0.1:8080/lists/ads.txt".parse().expect("uri");
        let check = |location: &str, expected: &str| {
            assert_eq!(
                resolve(&base, location).expect("resolved").to_string(),
                expected
            );
        };
        check("/other.txt", "http://127.0.0.1:8080/other.txt");
        check("new.txt", "http://127.0.0.1:8080/lists/new.txt");
        check("https://mirror.example/a", "https://mirror.example/a");
        let secure: Uri = "https://lists.example/ads.txt".parse().expect("uri");
        assert_eq!(
            next_hop(&secure, "/moved.txt")
                .expect("same scheme")
                .to_string(),
            "https://lists.example/moved.txt"
        );
        let refused = next_hop(&secure, "http://lists.example/ads.txt").expect_err("downgrade");
        assert_eq!(refused.reason(), "redirect-downgrade");
        assert!(
            next_hop(&base, "https://mirror.example/a").is_ok(),
            "an upgrade is fine"
        );
    }
}
