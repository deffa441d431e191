//! `kresctl ui`: the status page (`GET /ui`) in a browser when the API listens on a unix
//! socket, which browsers cannot reach. kresctl listens on a loopback address for as long as
//! it runs and passes every request on to the API with its own credentials (its uid on the
//! socket, or the bearer token it reads from the environment; the page never sees them).
//!
//! Every local user can reach a loopback port, so a request needs this run's secret: a random
//! value printed in the URL's fragment (`/ui#secret=…`, which no request carries). The page
//! trades it once for a session cookie at a route kresctl answers itself
//! ([`SESSION_ROUTE`]); every later request carries the cookie (scripts may send the secret
//! in [`SECRET_HEADER`] instead). Only the page's files, which hold no data, pass without
//! it. The cookie and the secret's header stay here: only [`PASSED_ON`] reaches the API.
//!
//! kresctl never listens wider than loopback, refuses requests whose `Host` is no loopback
//! name of its port (a page of another site resolved to 127.0.0.1: DNS rebinding) and those
//! a browser sends from another origin, so no other site can drive the resolver through it.

use std::convert::Infallible;
use std::net::SocketAddr;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::kresctl::client::{ApiClient, ClientError};

/// The largest request body passed on (the API's own limit).
const MAX_BODY: usize = 10 << 20;

/// The request headers passed on to the API; the rest (the session cookie, the secret's
/// header, a browser's `Origin`, which names kresctl's address, not the API's) stay here.
const PASSED_ON: [header::HeaderName; 7] = [
    header::ACCEPT,
    header::AUTHORIZATION,
    header::CONTENT_TYPE,
    header::IF_MATCH,
    header::IF_NONE_MATCH,
    header::CACHE_CONTROL,
    header::HeaderName::from_static("last-event-id"),
];

/// The route kresctl answers itself, never the API: `POST` with the secret in
/// [`SECRET_HEADER`] opens a session (`Set-Cookie`).
const SESSION_ROUTE: &str = "/.kresctl-ui/session";

/// The request header that carries this run's secret.
const SECRET_HEADER: &str = "x-kresctl-ui-secret";

/// The answer header that marks a refusal for want of the secret (the page shows its text).
const REFUSED_HEADER: &str = "x-kresctl-ui";

/// The page's files: no data, so `GET` and `HEAD` of these paths (exactly) pass without the
/// secret; a browser must load the page before it can trade the secret.
const PUBLIC_FILES: [&str; 4] = ["/ui", "/ui/app.js", "/ui/app.css", "/ui/favicon.svg"];

/// Random bytes in the secret and in the session's value (256 bits each).
const SECRET_BYTES: usize = 32;

/// An answer's body: the API's, as it comes (an event stream has no end), or our own.
type Body = BoxBody<Bytes, hyper::Error>;

/// What admits a request in this run: the secret printed in the URL, and the session value
/// the page trades it for. Both are drawn anew by each run of kresctl ui.
struct Keys {
    /// Printed in the URL's fragment; sent in [`SECRET_HEADER`].
    secret: String,
    /// The session cookie's value; only `Set-Cookie` ever tells it.
    session: String,
    /// The session cookie's name, with our port in it: browsers keep cookies per host, not
    /// per port, and two runs of kresctl ui on other ports keep their own.
    cookie: String,
}

impl Keys {
    /// Fresh keys from the kernel's random source, for a kresctl ui listening on `port`.
    fn draw(port: u16) -> std::io::Result<Keys> {
        Ok(Keys {
            secret: crate::manager::rundir::random_hex(SECRET_BYTES)?,
            session: crate::manager::rundir::random_hex(SECRET_BYTES)?,
            cookie: format!("kresctl-ui-{port}"),
        })
    }

    /// Whether `headers` carry the session cookie or the secret.
    fn admit(&self, headers: &hyper::HeaderMap) -> bool {
        let by_cookie = cookie_values(headers, &self.cookie).fold(false, |found, value| {
            found | same(value, self.session.as_bytes())
        });
        by_cookie | self.secret_sent(headers)
    }

    /// Whether `headers` carry the secret in [`SECRET_HEADER`].
    fn secret_sent(&self, headers: &hyper::HeaderMap) -> bool {
        headers
            .get_all(SECRET_HEADER)
            .iter()
            .fold(false, |found, value| {
                found | same(value.as_bytes(), self.secret.as_bytes())
            })
    }

    /// The session cookie: for this origin's scripts' requests and its own navigations only,
    /// never readable by a script, gone when the browser ends.
    fn set_cookie(&self) -> String {
        format!(
            "{}={}; HttpOnly; SameSite=Strict; Path=/",
            self.cookie, self.session
        )
    }
}

/// Equality of a value sent with one of ours, in a time that says nothing of where they
/// differ: every byte is compared, with no early exit. Their lengths are no secret (every
/// value of ours has the same one).
fn same(sent: &[u8], ours: &[u8]) -> bool {
    if sent.len() != ours.len() {
        return false;
    }
    let difference = sent.iter().zip(ours).fold(0u8, |difference, (a, b)| {
        // Keep the optimiser from stopping at the first difference.
        std::hint::black_box(difference | (a ^ b))
    });
    difference == 0
}

/// The values of the cookies named `name` in the `Cookie` headers (`a=1; b=2`).
fn cookie_values<'a>(
    headers: &'a hyper::HeaderMap,
    name: &'a str,
) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .get_all(header::COOKIE)
        .iter()
        .flat_map(|value| value.as_bytes().split(|b| *b == b';'))
        .filter_map(move |pair| {
            let pair = pair.trim_ascii();
            let equals = pair.iter().position(|b| *b == b'=')?;
            let (key, value) = (&pair[..equals], &pair[equals + 1..]);
            (key == name.as_bytes()).then_some(value)
        })
}

/// What becomes of a request that passed the checks of Host and Origin.
#[derive(Debug, PartialEq, Eq)]
enum Admission {
    /// One of the page's files: passed on without the secret.
    PublicFile,
    /// With the session cookie or the secret: passed on.
    Admitted,
    /// The trade of the secret for a session ([`SESSION_ROUTE`]): answered here.
    OpenSession,
    /// Without the secret: refused here, before anything reaches the API.
    Refused,
}

/// What to do with a request for `path` (without its query) by its method and headers.
fn admission(
    method: &hyper::Method,
    path: &str,
    headers: &hyper::HeaderMap,
    keys: &Keys,
) -> Admission {
    if path == SESSION_ROUTE {
        return if method == hyper::Method::POST && keys.secret_sent(headers) {
            Admission::OpenSession
        } else {
            Admission::Refused
        };
    }
    let reads = method == hyper::Method::GET || method == hyper::Method::HEAD;
    if reads && PUBLIC_FILES.contains(&path) {
        Admission::PublicFile
    } else if keys.admit(headers) {
        Admission::Admitted
    } else {
        Admission::Refused
    }
}

/// Serve the status page on `listen` (a loopback address) until Ctrl-C or SIGTERM.
pub async fn serve(client: ApiClient, listen: SocketAddr) -> Result<(), ClientError> {
    if !listen.ip().is_loopback() {
        return Err(ClientError::Invalid(format!(
            "--listen {listen}: kresctl ui listens on loopback addresses only (127.0.0.0/8, ::1)"
        )));
    }
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let bound = listener.local_addr()?;
    let keys = Keys::draw(bound.port())?;
    println!(
        "The status page is at http://{}/ui#secret={} (until kresctl ends: Ctrl-C; whoever \
         has this URL acts with kresctl's rights)",
        crate::kresctl::client::authority(&bound.ip().to_string(), bound.port()),
        keys.secret
    );
    let shared = std::sync::Arc::new((client, keys));
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors, say: the next connection may succeed.
                Err(_) => continue,
            },
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let shared = shared.clone();
                async move {
                    let (client, keys) = &*shared;
                    Ok::<_, Infallible>(pass_on(client, keys, bound, request).await)
                }
            });
            // A browser that went away ends its connection; nothing to report.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// A browser's request, checked and passed on to the API; the API's answer as it comes.
async fn pass_on(
    client: &ApiClient,
    keys: &Keys,
    bound: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    if let Err(why) = check_origin(request.headers(), bound) {
        return plain(StatusCode::FORBIDDEN, why);
    }
    match admission(
        request.method(),
        request.uri().path(),
        request.headers(),
        keys,
    ) {
        Admission::PublicFile | Admission::Admitted => {}
        Admission::OpenSession => return session_opened(keys),
        Admission::Refused => return secret_needed(),
    }
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the request body is too large\n",
            )
        }
    };
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
    let mut outgoing = Request::new(Full::new(body));
    *outgoing.method_mut() = parts.method;
    *outgoing.uri_mut() = match path.parse() {
        Ok(uri) => uri,
        Err(_) => return plain(StatusCode::BAD_REQUEST, "invalid path\n"),
    };
    for name in &PASSED_ON {
        if let Some(value) = parts.headers.get(name) {
            outgoing.headers_mut().insert(name.clone(), value.clone());
        }
    }
    match client.send(outgoing).await {
        Ok(response) => response.map(BodyExt::boxed),
        Err(e) => plain(StatusCode::BAD_GATEWAY, &format!("{e}\n")),
    }
}

/// Refuse a request whose `Host` is no loopback name of our port, or whose `Origin` (sent by
/// browsers with every request a script makes but a plain `GET`) is not that same host.
fn check_origin(headers: &hyper::HeaderMap, bound: SocketAddr) -> Result<(), &'static str> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let Some(host) = host.filter(|h| loopback_authority(h, bound.port())) else {
        return Err("the Host header names no loopback address of kresctl ui\n");
    };
    if let Some(origin) = headers.get(header::ORIGIN) {
        if origin.to_str().ok() != Some(&format!("http://{host}")) {
            return Err("cross-origin requests are refused\n");
        }
    }
    Ok(())
}

/// Whether `authority` (`host:port`) is a loopback address or `localhost`, with `port`.
fn loopback_authority(authority: &str, port: u16) -> bool {
    let Some((name, given)) = authority.rsplit_once(':') else {
        return false;
    };
    if given.parse::<u16>().ok() != Some(port) {
        return false;
    }
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The answer to the trade of the secret: the session cookie.
fn session_opened(keys: &Keys) -> Response<Body> {
    let mut response = plain(StatusCode::NO_CONTENT, "");
    let headers = response.headers_mut();
    headers.remove(header::CONTENT_TYPE);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Hex digits and our fixed attributes: always a valid header value.
    if let Ok(cookie) = HeaderValue::from_str(&keys.set_cookie()) {
        headers.insert(header::SET_COOKIE, cookie);
    }
    response
}

/// The refusal of a request without the secret.
fn secret_needed() -> Response<Body> {
    let mut response = plain(
        StatusCode::FORBIDDEN,
        "kresctl ui refuses requests without its secret: open the URL it printed \
         (http://…/ui#secret=…)\n",
    );
    response.headers_mut().insert(
        header::HeaderName::from_static(REFUSED_HEADER),
        HeaderValue::from_static("secret-needed"),
    );
    response
}

/// An answer of ours, in plain text.
fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let body = Full::new(Bytes::from(text.to_owned()))
        .map_err(|never| match never {})
        .boxed();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_hosts_of_our_port_and_their_own_origin() {
        let bound: SocketAddr = "127.0.0.1:8453".parse().expect("address");
        let check = |host: Option<&str>, origin: Option<&str>| {
            let mut headers = hyper::HeaderMap::new();
            if let Some(h) = host {
                headers.insert(header::HOST, HeaderValue::from_str(h).expect("header"));
            }
            if let Some(o) = origin {
                headers.insert(header::ORIGIN, HeaderValue::from_str(o).expect("header"));
            }
            check_origin(&headers, bound).is_ok()
        };
        assert!(check(Some("127.0.0.1:8453"), None));
        assert!(check(Some("localhost:8453"), Some("http://localhost:8453")));
        assert!(check(Some("[::1]:8453"), Some("http://[::1]:8453")));
        assert!(!check(None, None));
        assert!(!check(Some("127.0.0.1:80"), None));
        assert!(!check(Some("evil.example:8453"), None), "DNS rebinding");
        assert!(!check(Some("127.0.0.1"), None));
        assert!(
            !check(Some("127.0.0.1:8453"), Some("http://evil.example")),
            "another site's script"
        );
        assert!(!check(Some("127.0.0.1:8453"), Some("null")));
    }

    fn keys() -> Keys {
        Keys {
            secret: "5ec12e7".repeat(9) + "5",
            session: "5e5510".repeat(10) + "abcd",
            cookie: "kresctl-ui-8453".into(),
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> hyper::HeaderMap {
        let mut headers = hyper::HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                header::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                HeaderValue::from_str(value).expect("value"),
            );
        }
        headers
    }

    #[test]
    fn values_are_equal_only_whole() {
        let ours = b"0123456789abcdef";
        assert!(same(ours, ours));
        assert!(!same(b"0123456789abcdeF", ours), "the last byte");
        assert!(!same(b"x123456789abcdef", ours), "the first byte");
        assert!(!same(b"0123456789abcde", ours), "a prefix");
        assert!(!same(b"0123456789abcdef0", ours), "longer");
        assert!(!same(b"", ours));
        assert!(same(b"", b""));
    }

    #[test]
    fn cookies_are_read_by_their_exact_name() {
        let values = |pairs: &[(&str, &str)]| -> Vec<Vec<u8>> {
            cookie_values(&headers(pairs), "kresctl-ui-8453")
                .map(<[u8]>::to_vec)
                .collect()
        };
        assert_eq!(
            values(&[("cookie", "a=1; kresctl-ui-8453=s3ss;b=2")]),
            [b"s3ss".to_vec()]
        );
        assert_eq!(
            values(&[("cookie", "a=1"), ("cookie", " kresctl-ui-8453=x=y ")]),
            [b"x=y".to_vec()],
            "a second Cookie header; `=` in the value"
        );
        assert!(values(&[("cookie", "kresctl-ui-84530=s3ss; kresctl-ui-845=s3ss")]).is_empty());
        assert!(values(&[("cookie", "kresctl-ui-8453"), ("cookie", ";;")]).is_empty());
        assert!(values(&[("x-other", "kresctl-ui-8453=s3ss")]).is_empty());
    }

    #[test]
    fn only_the_page_files_pass_without_the_secret() {
        use hyper::Method;
        let keys = keys();
        let session = format!("other=1; kresctl-ui-8453={}", keys.session);
        let none: &[(&str, &str)] = &[];
        let cookie: &[(&str, &str)] = &[("cookie", &session)];
        let secret: &[(&str, &str)] = &[(SECRET_HEADER, &keys.secret)];
        let wrong_cookie: &[(&str, &str)] = &[("cookie", "kresctl-ui-8453=5e5510")];
        let secret_as_cookie = format!("kresctl-ui-8453={}", keys.secret);
        let secret_as_cookie: &[(&str, &str)] = &[("cookie", &secret_as_cookie)];
        let session_as_secret: &[(&str, &str)] = &[(SECRET_HEADER, &keys.session)];
        type Pairs<'a> = &'a [(&'a str, &'a str)];
        let rows: &[(Method, &str, Pairs, Admission)] = &[
            (Method::GET, "/ui", none, Admission::PublicFile),
            (Method::HEAD, "/ui/app.js", none, Admission::PublicFile),
            (Method::GET, "/ui/app.css", none, Admission::PublicFile),
            (Method::GET, "/ui/favicon.svg", none, Admission::PublicFile),
            (Method::POST, "/ui", none, Admission::Refused),
            (Method::GET, "/ui/", none, Admission::Refused),
            (Method::GET, "/ui/whoami", none, Admission::Refused),
            (
                Method::GET,
                "/ui/app.js/../../v1/config",
                none,
                Admission::Refused,
            ),
            (Method::GET, "/v1/config", none, Admission::Refused),
            (Method::POST, "/stop", none, Admission::Refused),
            (Method::PUT, "/v1/config", wrong_cookie, Admission::Refused),
            (
                Method::PUT,
                "/v1/config",
                secret_as_cookie,
                Admission::Refused,
            ),
            (Method::POST, "/stop", session_as_secret, Admission::Refused),
            (Method::GET, "/events", cookie, Admission::Admitted),
            (Method::PUT, "/v1/config", cookie, Admission::Admitted),
            (Method::POST, "/stop", secret, Admission::Admitted),
            (Method::GET, "/ui/whoami", secret, Admission::Admitted),
            (Method::POST, SESSION_ROUTE, secret, Admission::OpenSession),
            (Method::POST, SESSION_ROUTE, none, Admission::Refused),
            (
                Method::POST,
                SESSION_ROUTE,
                session_as_secret,
                Admission::Refused,
            ),
            // The route is ours: never passed on, not even with the session.
            (Method::GET, SESSION_ROUTE, cookie, Admission::Refused),
            (Method::POST, SESSION_ROUTE, cookie, Admission::Refused),
        ];
        for (method, path, pairs, expected) in rows {
            assert_eq!(
                admission(method, path, &headers(pairs), &keys),
                *expected,
                "{method} {path} {pairs:?}"
            );
        }
    }

    #[test]
    fn keys_are_fresh_and_stay_here() {
        let (one, two) = (
            Keys::draw(8453).expect("keys"),
            Keys::draw(8453).expect("keys"),
        );
        assert_eq!(one.secret.len(), 2 * SECRET_BYTES);
        assert!(one.secret.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(one.secret, two.secret);
        assert_ne!(one.session, two.session);
        assert_ne!(one.secret, one.session);
        assert_eq!(
            one.set_cookie(),
            format!(
                "kresctl-ui-8453={}; HttpOnly; SameSite=Strict; Path=/",
                one.session
            )
        );
        let opened = session_opened(&one);
        assert_eq!(opened.status(), StatusCode::NO_CONTENT);
        assert_eq!(
            opened.headers()[header::SET_COOKIE].to_str().expect("text"),
            one.set_cookie()
        );
        assert_eq!(secret_needed().status(), StatusCode::FORBIDDEN);
        for kept in [
            header::COOKIE,
            header::HeaderName::from_static(SECRET_HEADER),
        ] {
            assert!(!PASSED_ON.contains(&kept), "{kept} is never passed on");
        }
    }
}
