//! Who may talk to the API over TCP. The unix socket is guarded by its file permissions; a TCP
//! endpoint by what a request says of itself: its `Host` must be the configured address or a
//! loopback name (a page of another site that a browser resolved to us — DNS rebinding — is
//! refused), a browser's `Origin` must be that same host (no cross-site requests), and when
//! the operator set a bearer token (a file named by `KRES_API_TOKEN_FILE`; the configuration
//! schema stays upstream's), it must come with every request.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::server::Peer;

/// Environment variable naming a file whose content (trimmed) is the bearer token TCP clients
/// must send (`Authorization: Bearer …`).
pub const TOKEN_FILE_VAR: &str = "KRES_API_TOKEN_FILE";

/// The largest token file read.
const MAX_TOKEN_FILE: u64 = 4096;

/// What TCP requests are checked against.
#[derive(Debug, Clone, Default)]
pub struct TcpGuard {
    /// The configured TCP endpoint, if the API listens on TCP.
    pub endpoint: Option<SocketAddr>,
    /// The bearer token, if one was configured.
    pub token: Option<Arc<str>>,
}

impl TcpGuard {
    /// The guard for `endpoint`, with the token from [`TOKEN_FILE_VAR`] if set.
    pub fn from_env(endpoint: Option<SocketAddr>) -> Result<TcpGuard, String> {
        let token = match std::env::var_os(TOKEN_FILE_VAR) {
            Some(path) if !path.is_empty() => Some(read_token(std::path::Path::new(&path))?),
            _ => None,
        };
        if let Some(addr) = endpoint {
            if !addr.ip().is_loopback() {
                tracing::warn!(
                    "the management API listens on {addr}, which is not a loopback address: \
                     anyone who reaches it can change the resolver{}",
                    if token.is_some() {
                        " with the bearer token"
                    } else {
                        "; set a bearer token with KRES_API_TOKEN_FILE"
                    }
                );
            }
        }
        Ok(TcpGuard { endpoint, token })
    }

    /// Why a request from a TCP peer is refused, if it is.
    fn refusal(&self, request: &Request) -> Option<(StatusCode, &'static str)> {
        let endpoint = self.endpoint?;
        let headers = request.headers();
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        if !host.is_some_and(|h| allowed_host(h, endpoint)) {
            return Some((
                StatusCode::MISDIRECTED_REQUEST,
                "the Host header names neither this endpoint nor a loopback name\n",
            ));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let same = origin
                .to_str()
                .ok()
                .and_then(|o| o.strip_prefix("http://"))
                .is_some_and(|o| allowed_host(o, endpoint));
            if !same {
                return Some((StatusCode::FORBIDDEN, "cross-origin requests are refused\n"));
            }
        }
        if let Some(token) = &self.token {
            let sent = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            if !sent.is_some_and(|s| constant_time_eq(s.as_bytes(), token.as_bytes())) {
                return Some((
                    StatusCode::UNAUTHORIZED,
                    "a valid bearer token is required\n",
                ));
            }
        }
        None
    }
}

/// Read a token file: one line of printable ASCII.
fn read_token(path: &std::path::Path) -> Result<Arc<str>, String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TOKEN_FILE).read_to_string(&mut text))
        .map_err(|e| format!("cannot read the API token file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "the API token file {} must hold one token of printable characters",
            path.display()
        ));
    }
    Ok(Arc::from(token))
}

/// Whether `host` (a `Host` header or an origin's authority) is `endpoint` itself or a
/// loopback name, with the endpoint's port.
fn allowed_host(host: &str, endpoint: SocketAddr) -> bool {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) if !name.ends_with(':') => (name, port.parse::<u16>().ok()),
        _ => (host, None),
    };
    if port.is_some_and(|p| p != endpoint.port()) {
        return false;
    }
    let name = name.trim_start_matches('[').trim_end_matches(']');
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    // A wildcard endpoint (`0.0.0.0`, `::`) is reached at any of the host's addresses: a
    // scraper or probe names the one it used (a pod IP). An address is no name a rebinding
    // page could have resolved, so it is as safe as the configured one.
    match name.parse::<std::net::IpAddr>() {
        Ok(ip) => ip == endpoint.ip() || ip.is_loopback() || endpoint.ip().is_unspecified(),
        Err(_) => false,
    }
}

/// Equality that takes as long whatever the first difference.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The middleware: requests from TCP peers go through [`TcpGuard`]; refusals are logged.
pub async fn check(State(guard): State<Arc<TcpGuard>>, request: Request, next: Next) -> Response {
    let tcp_peer = match request.extensions().get::<Peer>() {
        Some(Peer::Tcp(addr)) => Some(*addr),
        _ => None,
    };
    if let Some(addr) = tcp_peer {
        if let Some((status, why)) = guard.refusal(&request) {
            tracing::warn!(
                "API {} {} from {addr} refused: {}",
                request.method(),
                request.uri().path(),
                why.trim_end()
            );
            return (status, why).into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> Request {
        let mut b = Request::builder().uri("/v1/config");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(axum::body::Body::empty()).expect("request")
    }

    #[test]
    fn hosts_origins_and_tokens() {
        let guard = TcpGuard {
            endpoint: Some("127.0.0.1:5000".parse().expect("addr")),
            token: None,
        };
        let check = |h: &[(&str, &str)]| guard.refusal(&request(h)).map(|(s, _)| s.as_u16());
        assert_eq!(check(&[("host", "127.0.0.1:5000")]), None);
        assert_eq!(check(&[("host", "localhost:5000")]), None);
        assert_eq!(check(&[("host", "[::1]:5000")]), None);
        assert_eq!(check(&[("host", "localhost")]), None);
        assert_eq!(check(&[("host", "evil.example:5000")]), Some(421));
        assert_eq!(check(&[("host", "127.0.0.1:5001")]), Some(421));
        assert_eq!(check(&[]), Some(421));
        assert_eq!(
            check(&[
                ("host", "localhost:5000"),
                ("origin", "http://localhost:5000")
            ]),
            None
        );
        assert_eq!(
            check(&[
                ("host", "localhost:5000"),
                ("origin", "http://evil.example")
            ]),
            Some(403)
        );
        assert_eq!(
            check(&[("host", "localhost:5000"), ("origin", "null")]),
            Some(403)
        );
        let v6 = TcpGuard {
            endpoint: Some("[2001:db8::1]:80".parse().expect("addr")),
            token: Some(Arc::from("s3cret")),
        };
        let check = |h: &[(&str, &str)]| v6.refusal(&request(h)).map(|(s, _)| s.as_u16());
        assert_eq!(check(&[("host", "[2001:db8::1]:80")]), Some(401));
        assert_eq!(
            check(&[
                ("host", "[2001:db8::1]:80"),
                ("authorization", "Bearer s3cret")
            ]),
            None
        );
        assert_eq!(
            check(&[("host", "[2001:db8::1]"), ("authorization", "Bearer s3cre")]),
            Some(401)
        );
        // A wildcard endpoint takes any address, never a name.
        let any = TcpGuard {
            endpoint: Some("0.0.0.0:5000".parse().expect("addr")),
            token: None,
        };
        let check = |h: &[(&str, &str)]| any.refusal(&request(h)).map(|(s, _)| s.as_u16());
        assert_eq!(check(&[("host", "10.1.2.3:5000")]), None);
        assert_eq!(check(&[("host", "[fd00::7]:5000")]), None);
        assert_eq!(check(&[("host", "resolver.example:5000")]), Some(421));
        assert_eq!(check(&[("host", "10.1.2.3:5001")]), Some(421));
        // Without a TCP endpoint (the unix socket) nothing is checked.
        let unix = TcpGuard::default();
        assert!(unix.refusal(&request(&[])).is_none());
    }
}
