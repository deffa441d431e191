//! Who may talk to the API, and with which role (`api::roles`). Every request passes
//! [`check`]: a unix peer gets its role from its credentials ([`UnixRoles`]); a TCP request is
//! checked for what it says of itself: its `Host` must be the configured address or a
//! loopback name (a page of another site that a browser resolved to us — DNS rebinding — is
//! refused), a browser's `Origin` must be the request's own origin, scheme, name and port
//! alike (no cross-site requests), a change a browser sends for another site without an
//! `Origin` (`Sec-Fetch-Site`, a form's content type) is refused, and when
//! the operator set bearer tokens (files named by `KRES_API_TOKEN_FILE` for the admin role,
//! `KRES_API_READ_ONLY_TOKEN_FILE` for the read-only one; the configuration schema stays
//! upstream's), one must come with every request. Then the request's method and path say
//! which role it needs ([`roles::needed`]); too little is a 403, logged.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::roles::{self, Role, UnixRoles};
use super::server::Peer;

/// Environment variable naming a file whose content (trimmed) is the bearer token of the
/// admin role over TCP (`Authorization: Bearer …`).
pub use kres_wire::environment::TOKEN_FILE_VAR;

/// Environment variable naming a file whose content (trimmed) is the bearer token of the
/// read-only role over TCP. Needs [`TOKEN_FILE_VAR`] too.
pub use kres_wire::environment::READ_ONLY_TOKEN_FILE_VAR;

/// The largest token file read.
const MAX_TOKEN_FILE: u64 = 4096;

/// What every request is checked against.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// TCP requests: Host, Origin, bearer tokens.
    pub tcp: TcpGuard,
    /// Unix peers: roles by credentials.
    pub unix: UnixRoles,
}

/// What TCP requests are checked against.
#[derive(Debug, Clone, Default)]
pub struct TcpGuard {
    /// The configured TCP endpoint, if the API listens on TCP.
    pub endpoint: Option<SocketAddr>,
    /// The bearer token of the admin role, if one was configured.
    pub token: Option<Arc<str>>,
    /// The bearer token of the read-only role, if one was configured (never without
    /// `token`).
    pub read_only_token: Option<Arc<str>>,
}

/// Why a request was refused before its role was known: the status and the text.
type Refusal = (StatusCode, &'static str);

impl TcpGuard {
    /// The guard for `endpoint`, with the admin token and the read-only token in these files
    /// (those [`TOKEN_FILE_VAR`] and [`READ_ONLY_TOKEN_FILE_VAR`] name).
    pub fn from_files(
        endpoint: Option<SocketAddr>,
        admin: Option<&std::path::Path>,
        reader: Option<&std::path::Path>,
    ) -> Result<TcpGuard, TokenError> {
        let token = admin.map(|f| read_token(f, TOKEN_FILE_VAR)).transpose()?;
        let read_only_token = reader
            .map(|f| read_token(f, READ_ONLY_TOKEN_FILE_VAR))
            .transpose()?;
        match (&token, &read_only_token) {
            (None, Some(_)) => return Err(TokenError::ReaderWithoutAdmin),
            (Some(admin), Some(reader))
                if constant_time_eq(admin.as_bytes(), reader.as_bytes()) =>
            {
                return Err(TokenError::SameToken)
            }
            _ => {}
        }
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
        Ok(TcpGuard {
            endpoint,
            token,
            read_only_token,
        })
    }

    /// The role of a request from a TCP peer, or why it is refused whatever it asks.
    fn admit(&self, request: &Request) -> Result<Role, Refusal> {
        let headers = request.headers();
        if let Some(endpoint) = self.endpoint {
            let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
            if !host.is_some_and(|h| allowed_host(h, endpoint)) {
                return Err((
                    StatusCode::MISDIRECTED_REQUEST,
                    "the Host header names neither this endpoint nor a loopback name\n",
                ));
            }
            if let Some(origin) = headers.get(header::ORIGIN) {
                let same = match (origin.to_str(), host) {
                    (Ok(origin), Some(host)) => same_origin(origin, host, endpoint),
                    _ => false,
                };
                if !same {
                    return Err((StatusCode::FORBIDDEN, "cross-origin requests are refused\n"));
                }
            }
            if let Err(why) = browser_may_change(request) {
                return Err((StatusCode::FORBIDDEN, why));
            }
        }
        if self.token.is_none() && self.read_only_token.is_none() {
            return Ok(Role::Admin);
        }
        let sent = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::as_bytes);
        // Both comparisons always run: the time taken says nothing of which token matched.
        let matches = |token: &Option<Arc<str>>| match (sent, token) {
            (Some(sent), Some(token)) => constant_time_eq(sent, token.as_bytes()),
            _ => false,
        };
        let (admin, reader) = (matches(&self.token), matches(&self.read_only_token));
        if admin {
            Ok(Role::Admin)
        } else if reader {
            Ok(Role::ReadOnly)
        } else {
            Err((
                StatusCode::UNAUTHORIZED,
                "a valid bearer token is required\n",
            ))
        }
    }
}

/// Read a token file: one line of printable ASCII.
/// Why the API's bearer tokens cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the API token file {} ({var}): {source}", path.display())]
    Unreadable {
        path: std::path::PathBuf,
        /// The environment variable that named the file.
        var: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the API token file {} ({var}) must hold one token of printable characters",
        path.display()
    )]
    NotAToken {
        path: std::path::PathBuf,
        var: &'static str,
    },
    #[error(
        "{READ_ONLY_TOKEN_FILE_VAR} needs {TOKEN_FILE_VAR} too: without an admin token anyone \
         could change the resolver over TCP"
    )]
    ReaderWithoutAdmin,
    #[error("the files of {TOKEN_FILE_VAR} and {READ_ONLY_TOKEN_FILE_VAR} hold the same token")]
    SameToken,
}

fn read_token(path: &std::path::Path, var: &'static str) -> Result<Arc<str>, TokenError> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TOKEN_FILE).read_to_string(&mut text))
        .map_err(|source| TokenError::Unreadable {
            path: path.to_owned(),
            var,
            source,
        })?;
    let token = text.trim();
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(TokenError::NotAToken {
            path: path.to_owned(),
            var,
        });
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

/// Whether a browser's `Origin` is the very origin the request was sent to: `http://` and the
/// request's own `Host` (already checked to name this endpoint), the same name and the same
/// port, a missing port being 80 on both sides — never merely an allowed host. On a wildcard
/// endpoint any address of the host is an allowed `Host`, so only this comparison keeps a
/// page at another address (`http://198.51.100.7`) or on another port of a loopback address
/// (`http://127.0.0.1`, port 80) from sending requests here.
fn same_origin(origin: &str, host: &str, endpoint: SocketAddr) -> bool {
    let Some(authority) = origin.strip_prefix("http://") else {
        return false;
    };
    match (name_and_port(authority), name_and_port(host)) {
        (Some((name, port)), Some((host_name, host_port))) => {
            name.eq_ignore_ascii_case(host_name) && port == host_port && port == endpoint.port()
        }
        _ => false,
    }
}

/// The name and port of an authority (`host`, `host:port`, `[v6]:port`); port 80 when none
/// is given. `None` when the port does not parse or anything follows the authority.
fn name_and_port(authority: &str) -> Option<(&str, u16)> {
    if authority.contains(['/', '?', '#', '@']) || authority.is_empty() {
        return None;
    }
    match authority.rsplit_once(':') {
        // `[::1]` alone: the colon is inside the brackets.
        Some((name, _)) if name.starts_with('[') && !name.ends_with(']') => Some((authority, 80)),
        Some((name, port)) => Some((name, port.parse().ok()?)),
        None => Some((authority, 80)),
    }
}

/// A change (any method but `GET`, `HEAD`, `OPTIONS`) that a browser sends for a page of
/// another site even without an `Origin` header (browsers from before 2020 left it out of
/// form posts): `Sec-Fetch-Site` saying another site, or a form's content type, which no
/// client of this API sends. Refused, so no form on any page can drive the resolver.
fn browser_may_change(request: &Request) -> Result<(), &'static str> {
    let method = request.method();
    if method == axum::http::Method::GET
        || method == axum::http::Method::HEAD
        || method == axum::http::Method::OPTIONS
    {
        return Ok(());
    }
    let headers = request.headers();
    let site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    if matches!(site, Some(s) if s.eq_ignore_ascii_case("cross-site") || s.eq_ignore_ascii_case("same-site"))
    {
        return Err("cross-site requests are refused\n");
    }
    let form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    if matches!(
        form.as_deref(),
        Some("application/x-www-form-urlencoded" | "multipart/form-data")
    ) {
        return Err("form submissions are refused: send JSON\n");
    }
    Ok(())
}

/// Equality of a token sent (`sent`) with a configured one (`token`) whose time says
/// nothing of the token, neither where the first difference is nor how long the token is:
/// every comparison runs over [`MAX_TOKEN_FILE`] bytes (or the sent length, if longer: the
/// client knows that one), both sides padded with zeros, and the lengths' difference is
/// folded into the same accumulator; there is no early exit.
fn constant_time_eq(sent: &[u8], token: &[u8]) -> bool {
    let span = usize::try_from(MAX_TOKEN_FILE)
        .unwrap_or(usize::MAX)
        .max(sent.len());
    // Byte `i`, or 0 past the end, without a branch on where the end is: the index is
    // clamped and the byte masked (only an empty slice takes the `None` path, at every `i`).
    let byte = |bytes: &[u8], i: usize| {
        let clamped = i.min(bytes.len().saturating_sub(1));
        let inside = u8::from(i < bytes.len()).wrapping_neg();
        bytes.get(clamped).copied().unwrap_or(0) & inside
    };
    let mut difference = (sent.len() ^ token.len()) as u64;
    for i in 0..span {
        difference |= u64::from(byte(sent, i) ^ byte(token, i));
        // Keep the optimiser from stopping at the first difference.
        difference = std::hint::black_box(difference);
    }
    difference == 0
}

/// The text of a 403: the role the request needs and the one the client has.
fn forbidden_text(request: &Request, needed: Role, granted: Option<Role>) -> String {
    let has = match granted {
        Some(role) => format!("this client has the {role} role"),
        None => "this client has no role".to_owned(),
    };
    let needs = match needed {
        Role::Admin => "the admin role".to_owned(),
        Role::ReadOnly => "the read-only or the admin role".to_owned(),
    };
    format!(
        "{} {} needs {needs}; {has}\n",
        request.method(),
        request.uri().path()
    )
}

/// The middleware: every request gets its client's role (TCP requests are checked first) and
/// goes on only when that role may make it; refusals are logged.
pub async fn check(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let peer = request.extensions().get::<Peer>();
    let public = roles::public(request.method(), request.uri().path());
    let granted = match peer {
        Some(Peer::Tcp(addr)) => match guard.tcp.admit(&request) {
            Ok(role) => Some(role),
            // The status page's files need no token; Host and Origin were checked.
            Err((StatusCode::UNAUTHORIZED, _)) if public => None,
            Err((status, why)) => {
                tracing::warn!(
                    "API {} {} from {addr} refused: {}",
                    request.method(),
                    request.uri().path(),
                    why.trim_end()
                );
                return (status, why).into_response();
            }
        },
        other => guard.unix.role_of(other),
    };
    if public {
        return next.run(request).await;
    }
    let needed = roles::needed(request.method(), request.uri().path());
    if let Some(role) = granted.filter(|role| *role >= needed) {
        // Handlers that share something between roles (`/events`) read it.
        let mut request = request;
        request.extensions_mut().insert(role);
        return next.run(request).await;
    }
    let text = forbidden_text(&request, needed, granted);
    let peer = peer.map_or_else(|| "an unknown peer".to_owned(), Peer::to_string);
    tracing::warn!("API request from {peer} refused: {}", text.trim_end());
    (StatusCode::FORBIDDEN, text).into_response()
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
            read_only_token: None,
        };
        let check = |h: &[(&str, &str)]| guard.admit(&request(h)).err().map(|(s, _)| s.as_u16());
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
            read_only_token: None,
        };
        let check = |h: &[(&str, &str)]| v6.admit(&request(h)).err().map(|(s, _)| s.as_u16());
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
            read_only_token: None,
        };
        let check = |h: &[(&str, &str)]| any.admit(&request(h)).err().map(|(s, _)| s.as_u16());
        assert_eq!(check(&[("host", "10.1.2.3:5000")]), None);
        assert_eq!(check(&[("host", "[fd00::7]:5000")]), None);
        assert_eq!(check(&[("host", "resolver.example:5000")]), Some(421));
        assert_eq!(check(&[("host", "10.1.2.3:5001")]), Some(421));
        // Only the request's own origin: not any address, not a missing (80) port.
        let origins: &[(&str, &str, Option<u16>)] = &[
            ("127.0.0.1:5000", "http://127.0.0.1:5000", None),
            ("10.1.2.3:5000", "http://10.1.2.3:5000", None),
            ("[fd00::7]:5000", "http://[fd00::7]:5000", None),
            ("LOCALHOST:5000", "http://localhost:5000", None),
            ("127.0.0.1:5000", "http://198.51.100.7", Some(403)),
            ("127.0.0.1:5000", "http://198.51.100.7:5000", Some(403)),
            ("127.0.0.1:5000", "http://127.0.0.1", Some(403)),
            ("127.0.0.1:5000", "http://localhost:5000", Some(403)),
            ("127.0.0.1:5000", "https://127.0.0.1:5000", Some(403)),
            ("127.0.0.1:5000", "http://127.0.0.1:5000/", Some(403)),
            ("127.0.0.1:5000", "http://127.0.0.1:05000x", Some(403)),
            ("10.1.2.3:5000", "http://10.1.2.4:5000", Some(403)),
            ("localhost", "http://localhost", Some(403)),
        ];
        for (host, origin, status) in origins {
            assert_eq!(
                check(&[("host", host), ("origin", origin)]),
                *status,
                "{host} {origin}"
            );
        }
        // Without a TCP endpoint (the unix socket) nothing is checked.
        let unix = TcpGuard::default();
        assert_eq!(unix.admit(&request(&[])), Ok(Role::Admin));
    }

    #[test]
    fn browsers_cannot_send_changes_from_another_site() {
        let guard = TcpGuard {
            endpoint: Some("0.0.0.0:5000".parse().expect("addr")),
            token: None,
            read_only_token: None,
        };
        let check = |method: &str, h: &[(&str, &str)]| {
            let mut b = Request::builder().method(method).uri("/stop");
            for (k, v) in h.iter().chain(&[("host", "127.0.0.1:5000")]) {
                b = b.header(*k, *v);
            }
            let request = b.body(axum::body::Body::empty()).expect("request");
            guard.admit(&request).err().map(|(s, _)| s.as_u16())
        };
        /// A method, the request's headers, the refusal's status (`None`: admitted).
        type Row<'a> = (&'a str, &'a [(&'a str, &'a str)], Option<u16>);
        let rows: &[Row] = &[
            // kresctl and upstream's kresctl: no browser headers.
            ("POST", &[], None),
            ("PUT", &[("content-type", "application/json")], None),
            ("POST", &[("content-type", "text/plain")], None),
            ("POST", &[("sec-fetch-site", "same-origin")], None),
            ("POST", &[("sec-fetch-site", "none")], None),
            ("POST", &[("sec-fetch-site", "cross-site")], Some(403)),
            ("POST", &[("sec-fetch-site", "same-site")], Some(403)),
            ("DELETE", &[("sec-fetch-site", "Cross-Site")], Some(403)),
            (
                "POST",
                &[("content-type", "application/x-www-form-urlencoded")],
                Some(403),
            ),
            (
                "POST",
                &[("content-type", "multipart/form-data; boundary=x")],
                Some(403),
            ),
            ("POST", &[("origin", "http://198.51.100.7")], Some(403)),
            ("POST", &[("origin", "http://127.0.0.1")], Some(403)),
            ("POST", &[("origin", "http://127.0.0.1:5000")], None),
            // Reads are not changes.
            ("GET", &[("sec-fetch-site", "cross-site")], None),
        ];
        for (method, headers, status) in rows {
            assert_eq!(check(method, headers), *status, "{method} {headers:?}");
        }
    }

    #[test]
    fn each_token_gives_its_role() {
        let guard = TcpGuard {
            endpoint: Some("127.0.0.1:5000".parse().expect("addr")),
            token: Some(Arc::from("admin-token")),
            read_only_token: Some(Arc::from("reader-token")),
        };
        let role = |auth: Option<&str>| {
            let mut h = vec![("host", "127.0.0.1:5000")];
            h.extend(auth.map(|a| ("authorization", a)));
            guard.admit(&request(&h)).map_err(|(s, _)| s.as_u16())
        };
        assert_eq!(role(Some("Bearer admin-token")), Ok(Role::Admin));
        assert_eq!(role(Some("Bearer reader-token")), Ok(Role::ReadOnly));
        assert_eq!(role(Some("Bearer reader-toke")), Err(401));
        assert_eq!(role(Some("Bearer admin-token ")), Err(401));
        assert_eq!(role(Some("reader-token")), Err(401));
        assert_eq!(role(None), Err(401));
    }

    #[test]
    fn tokens_are_equal_only_when_every_byte_and_the_length_are() {
        let token = b"s3cret-token";
        assert!(constant_time_eq(token, token));
        assert!(!constant_time_eq(b"s3cret-toke", token), "a prefix");
        assert!(!constant_time_eq(b"s3cret-token\0", token), "zero padding");
        assert!(!constant_time_eq(b"s3cret-tokex", token), "last byte");
        assert!(!constant_time_eq(b"", token));
        assert!(!constant_time_eq(token, b""));
        assert!(constant_time_eq(b"", b""));
        let long = vec![b'x'; MAX_TOKEN_FILE as usize];
        assert!(constant_time_eq(&long, &long));
        let mut longer = long.clone();
        longer.push(b'x');
        assert!(
            !constant_time_eq(&longer, &long),
            "beyond the longest token"
        );
        assert!(!constant_time_eq(&long, &longer));
    }

    #[test]
    fn token_files_are_checked_together() {
        let dir = std::env::temp_dir().join(format!("kres-guard-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("write");
            path
        };
        let admin = file("admin", "one-token\n");
        let same = file("same", "  one-token  \n");
        let reader = file("reader", "other-token\n");
        let blank = file("blank", "\n");
        assert_eq!(
            read_token(&admin, TOKEN_FILE_VAR).ok().as_deref(),
            Some("one-token")
        );
        let blank_refused = read_token(&blank, TOKEN_FILE_VAR).expect_err("blank");
        assert_eq!(
            blank_refused.to_string(),
            format!(
                "the API token file {} (KRES_API_TOKEN_FILE) must hold one token of printable \
                 characters",
                blank.display()
            )
        );
        assert!(read_token(&dir.join("missing"), TOKEN_FILE_VAR).is_err());
        let endpoint = Some("127.0.0.1:5000".parse().expect("addr"));
        let both = TcpGuard::from_files(endpoint, Some(&admin), Some(&reader)).expect("two tokens");
        assert_eq!(both.token.as_deref(), Some("one-token"));
        assert_eq!(both.read_only_token.as_deref(), Some("other-token"));
        // A read-only token alone would leave changes open to anyone; one token for both
        // roles is a mistake.
        assert!(TcpGuard::from_files(endpoint, None, Some(&reader)).is_err());
        assert!(TcpGuard::from_files(endpoint, Some(&admin), Some(&same)).is_err());
        assert!(TcpGuard::from_files(endpoint, Some(&admin), Some(&blank)).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
