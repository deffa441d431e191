//! The HTTP client of `kresctl`: finds the API socket like upstream (`--socket`, then the
//! `management` section of `--config` or the default config file, then the default socket)
//! and sends one [`Request`] over a unix socket or TCP.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

pub use super::error::{ClientError, MAX_RESPONSE};
use super::request::Request;
use super::DEFAULT_SOCKET;
use kres_wire::environment::Environment;

/// Where the API is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Unix(PathBuf),
    Tcp { host: String, port: u16 },
}

/// How long kresctl waits for an answer: a configuration change may take the API's own limit
/// (15 minutes) for the canary and a rolling restart of many workers.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(16 * 60);

impl Target {
    /// Upstream's socket discovery order.
    pub fn discover(socket: Option<&str>, config: Option<&Path>) -> Result<Target, ClientError> {
        if let Some(s) = socket {
            return Target::parse(s);
        }
        if let Some(path) = config {
            let text = std::fs::read_to_string(path).map_err(|e| ClientError::Config {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
            let doc =
                kres_config::parse_document(&text, path).map_err(|e| ClientError::Config {
                    path: path.to_owned(),
                    message: e.to_string(),
                })?;
            if let Some(t) = Target::from_management(&doc, path) {
                return Ok(t);
            }
        } else if let Ok(text) = std::fs::read_to_string(kres_config::DEFAULT_CONFIG_FILE) {
            let path = Path::new(kres_config::DEFAULT_CONFIG_FILE);
            if let Ok(doc) = kres_config::parse_document(&text, path) {
                if let Some(t) = Target::from_management(&doc, path) {
                    return Ok(t);
                }
            }
        }
        Ok(Target::Unix(PathBuf::from(DEFAULT_SOCKET)))
    }

    fn from_management(doc: &serde_json::Value, config_path: &Path) -> Option<Target> {
        if let Some(sock) = doc
            .pointer("/management/unix-socket")
            .and_then(|v| v.as_str())
        {
            let p = PathBuf::from(sock);
            let p = if p.is_relative() {
                config_path.parent().map(|d| d.join(&p)).unwrap_or(p)
            } else {
                p
            };
            return Some(Target::Unix(p));
        }
        let iface = doc
            .pointer("/management/interface")
            .and_then(|v| v.as_str())?;
        let (host, port) = iface.rsplit_once('@')?;
        Some(Target::Tcp {
            host: host.to_owned(),
            port: port.parse().ok()?,
        })
    }

    /// A path, or a URL: `http://host:port` or `http+unix://<percent-encoded path>`.
    pub fn parse(s: &str) -> Result<Target, ClientError> {
        if let Some(rest) = s.strip_prefix("http+unix://") {
            let decoded = percent_decode(rest.trim_end_matches('/'));
            return Ok(Target::Unix(PathBuf::from(decoded)));
        }
        if let Some(rest) = s.strip_prefix("http://") {
            let hostport = rest.trim_end_matches('/');
            let (host, port) = hostport
                .rsplit_once(':')
                .ok_or_else(|| ClientError::BadUrl(s.to_owned()))?;
            let port = port
                .parse()
                .map_err(|_| ClientError::BadUrl(s.to_owned()))?;
            return Ok(Target::Tcp {
                host: host.trim_matches(['[', ']']).to_owned(),
                port,
            });
        }
        if s.contains("://") {
            return Err(ClientError::BadUrl(s.to_owned()));
        }
        Ok(Target::Unix(PathBuf::from(s)))
    }
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// A response: status and body.
pub struct ApiResponse {
    pub status: u16,
    pub body: Vec<u8>,
    /// The `ETag` header, if the answer had one.
    pub etag: Option<String>,
    /// How many answers a list of the query log left out (`Query-Log-Truncated`), if any.
    pub truncated: Option<u64>,
}

impl ApiResponse {
    /// The body of a 2xx response, or the upstream-style error.
    pub fn ok(self) -> Result<Vec<u8>, ClientError> {
        if (200..300).contains(&self.status) {
            Ok(self.body)
        } else {
            Err(ClientError::from_status(
                self.status,
                String::from_utf8_lossy(&self.body).into_owned(),
            ))
        }
    }
}

/// The management API of one resolver, as kresctl asks it.
#[derive(Clone)]
pub struct ApiClient {
    /// Where the API listens; each request opens its own connection there.
    target: Target,
    /// kresctl's environment: the bearer token's file, and what commands need of it.
    env: Arc<Environment>,
}

impl ApiClient {
    /// A client of the API at `target`, in an empty environment.
    pub fn new(target: Target) -> Self {
        ApiClient {
            target,
            env: Arc::default(),
        }
    }

    /// The same client in kresctl's environment `env`.
    pub fn in_environment(self, env: Arc<Environment>) -> Self {
        ApiClient { env, ..self }
    }

    /// The environment kresctl was started with.
    pub fn environment(&self) -> &Environment {
        &self.env
    }

    /// Send `request` and read the whole response, within [`REQUEST_TIMEOUT`] and
    /// [`MAX_RESPONSE`].
    pub async fn call(&self, request: &Request<'_>) -> Result<ApiResponse, ClientError> {
        tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(request))
            .await
            .map_err(|_| ClientError::Timeout(REQUEST_TIMEOUT))?
    }

    async fn exchange(&self, request: &Request<'_>) -> Result<ApiResponse, ClientError> {
        let resp = self.open(request).await?;
        let status = resp.status().as_u16();
        let etag = resp
            .headers()
            .get(hyper::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let truncated = resp
            .headers()
            .get("query-log-truncated")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let limited = http_body_util::Limited::new(resp.into_body(), MAX_RESPONSE);
        let body = match limited.collect().await {
            Ok(collected) => collected.to_bytes().to_vec(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return Err(ClientError::TooLarge)
            }
            Err(e) => return Err(ClientError::Invalid(e.to_string())),
        };
        Ok(ApiResponse {
            status,
            body,
            etag,
            truncated,
        })
    }

    /// Send `request` and return the answer as it starts: its body is read by the caller,
    /// as it comes (an event stream has no end).
    pub async fn open(
        &self,
        request: &Request<'_>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, ClientError> {
        let mut req = hyper::Request::builder()
            .method(request.method())
            .uri(request.path())
            .header("content-type", "application/json");
        for (name, value) in request.headers() {
            req = req.header(name, value);
        }
        let req = req.body(Full::new(Bytes::from(request.body()?)))?;
        self.send(req).await
    }

    /// Send `request` as it is (`kresctl ui` passes a browser's requests on), with the
    /// `Host` of the API and the bearer token kresctl reads from the files the environment
    /// names, if any, in place of one the request carries.
    pub async fn send(
        &self,
        mut request: hyper::Request<Full<Bytes>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, ClientError> {
        let (host, io): (String, Box<dyn IoStream>) = match &self.target {
            Target::Unix(p) => {
                let s = tokio::net::UnixStream::connect(p).await.map_err(|source| {
                    ClientError::Connect {
                        target: p.display().to_string(),
                        hint: connect_hint(Some(p), &source),
                        source,
                    }
                })?;
                ("localhost".to_owned(), Box::new(s))
            }
            Target::Tcp { host, port } => {
                let s = tokio::net::TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(|source| ClientError::Connect {
                        target: authority(host, *port),
                        hint: connect_hint(None, &source),
                        source,
                    })?;
                (authority(host, *port), Box::new(s))
            }
        };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let headers = request.headers_mut();
        headers.insert(
            hyper::header::HOST,
            hyper::header::HeaderValue::from_str(&host)
                .map_err(|e| ClientError::Invalid(e.to_string()))?,
        );
        if let Some(token) = bearer_token(&self.env)? {
            headers.insert(
                hyper::header::AUTHORIZATION,
                hyper::header::HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|e| ClientError::Invalid(e.to_string()))?,
            );
        }
        Ok(sender.send_request(request).await?)
    }
}

/// What to do when the API cannot be reached: upstream's question whether the resolver runs,
/// unless the socket `path` is there and refused us; then who may use it (its owner and
/// group, by name) and who kresctl runs as.
pub fn connect_hint(path: Option<&Path>, error: &std::io::Error) -> String {
    use std::os::unix::fs::MetadataExt;
    let running = "Is the resolver running?".to_owned();
    if error.kind() != std::io::ErrorKind::PermissionDenied {
        return running;
    }
    // The socket, or the directory above it that keeps us from it.
    let Some((what, meta)) = path.and_then(|p| {
        std::iter::successors(Some(p), |p| p.parent())
            .find_map(|p| std::fs::metadata(p).ok().map(|m| (p, m)))
    }) else {
        return "Permission denied: run kresctl as a user the API socket's mode allows.".into();
    };
    let what = if Some(what) == path {
        "The API socket".to_owned()
    } else {
        format!("{}, on the way to the API socket,", what.display())
    };
    let user = |uid: u32| {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
            .map_or_else(|| format!("uid {uid}"), |u| u.name)
    };
    let group = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(meta.gid()))
        .ok()
        .flatten()
        .map_or_else(|| format!("gid {}", meta.gid()), |g| g.name);
    format!(
        "{what} belongs to user {} and group {group} (mode {:o}); kresctl runs as {}: run it as \
         root, as that user or as a member of group {group} (the daemon's --api-admin-group \
         and --api-read-only-group name the groups allowed).",
        user(meta.uid()),
        meta.mode() & 0o777,
        user(nix::unistd::geteuid().as_raw()),
    )
}

/// The bearer token the API asks of TCP clients, from the file `KRES_API_TOKEN_FILE` names
/// in `env` (the admin token), else from the one `KRES_API_READ_ONLY_TOKEN_FILE` names.
fn bearer_token(env: &Environment) -> Result<Option<String>, ClientError> {
    use std::io::Read;
    let Some(path) = env
        .token_file
        .as_ref()
        .or(env.read_only_token_file.as_ref())
    else {
        return Ok(None);
    };
    let path = path.clone();
    let mut text = String::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(4096).read_to_string(&mut text))
        .map_err(|e| ClientError::Config {
            path: path.clone(),
            message: e.to_string(),
        })?;
    Ok(Some(text.trim().to_owned()))
}

/// `host:port` for a URL or a `Host` header, with an IPv6 address in brackets.
pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

trait IoStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> IoStream for T {}

#[cfg(test)]
mod tests {

    #[test]
    fn a_refusal_by_role_says_so_with_the_servers_words() {
        let answer = super::ApiResponse {
            status: 403,
            body: b"POST /reload needs the admin role; this client has the read-only role\n"
                .to_vec(),
            etag: None,
            truncated: None,
        };
        let e = answer.ok().expect_err("403 is an error");
        assert_eq!(
            e.to_string(),
            "permission denied: POST /reload needs the admin role; this client has \
             the read-only role"
        );
        let other = super::ApiResponse {
            status: 409,
            body: b"no\n".to_vec(),
            etag: None,
            truncated: None,
        };
        assert!(matches!(
            other.ok(),
            Err(super::ClientError::Status { status: 409, .. })
        ));
    }

    #[test]
    fn odd_socket_urls_are_errors_or_paths_never_panics() {
        let odd = [
            "",
            "http://",
            "http://:",
            "http://host",
            "http://host:",
            "http://host:99999",
            "http://[::1",
            "http://[::1]:",
            "http://é:1",
            "http://%zz:1",
            "http+unix://",
            "http+unix://%",
            "http+unix://%é1",
            "http+unix://%1é",
            "http+unix://%%%",
            "http+unix://%2Frun%2Fx.sock",
            "ftp://x",
            "://",
            "http:///",
            "http://a:b:c",
            "\0",
            "http://\u{0}:1",
        ];
        for s in odd {
            let _ = Target::parse(s);
        }
        assert!(matches!(
            Target::parse("http+unix://%2Frun%2Fx.sock"),
            Ok(Target::Unix(p)) if p == std::path::Path::new("/run/x.sock")
        ));
        assert!(matches!(
            Target::parse("http://h:99999"),
            Err(ClientError::BadUrl(_))
        ));
    }
    use super::*;

    #[test]
    fn socket_argument_forms() {
        assert_eq!(
            Target::parse("/run/x.sock").ok(),
            Some(Target::Unix("/run/x.sock".into()))
        );
        assert_eq!(
            Target::parse("http+unix://%2Frun%2Fx.sock").ok(),
            Some(Target::Unix("/run/x.sock".into()))
        );
        assert_eq!(
            Target::parse("http://127.0.0.1:5000").ok(),
            Some(Target::Tcp {
                host: "127.0.0.1".into(),
                port: 5000
            })
        );
        assert_eq!(
            Target::parse("http://[::1]:5000").ok(),
            Some(Target::Tcp {
                host: "::1".into(),
                port: 5000
            })
        );
        assert!(Target::parse("ftp://x").is_err());
    }

    #[test]
    fn management_interface_from_a_config_file() {
        let doc = serde_json::json!({"management": {"interface": "::1@5000"}});
        let t = Target::from_management(&doc, Path::new("/etc/x.yaml"));
        assert_eq!(
            t,
            Some(Target::Tcp {
                host: "::1".into(),
                port: 5000
            })
        );
        assert_eq!(authority("::1", 5000), "[::1]:5000");
        assert_eq!(authority("127.0.0.1", 5000), "127.0.0.1:5000");
    }

    /// A request over TCP to an IPv6 address carries a bracketed `Host` header. Where the
    /// machine has no IPv6 loopback, there is nothing to connect to and the test says so.
    #[tokio::test]
    async fn ipv6_tcp_requests_bracket_the_host() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = match tokio::net::TcpListener::bind("[::1]:0").await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("no IPv6 loopback here ({e}); not checked");
                return;
            }
        };
        let port = listener.local_addr().expect("addr").port();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).await.expect("read");
                assert!(n > 0, "request cut short");
                head.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .expect("write");
            String::from_utf8_lossy(&head).into_owned()
        });
        let target = Target::parse(&format!("http://[::1]:{port}")).expect("URL");
        let response = ApiClient::new(target)
            .call(&Request::GetConfig { pointer: "" })
            .await
            .expect("request");
        assert_eq!((response.status, response.body), (200, b"ok".to_vec()));
        let head = server.await.expect("server");
        assert!(
            head.to_ascii_lowercase()
                .contains(&format!("host: [::1]:{port}\r\n")),
            "{head}"
        );
    }
}
