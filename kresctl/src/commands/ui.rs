//! `kresctl ui`: the status page (`GET /ui`) in a browser when the API listens on a unix
//! socket, which browsers cannot reach. kresctl listens on a loopback address for as long as
//! it runs and passes every request on to the API with its own credentials (its uid on the
//! socket, or the bearer token it reads from the environment; the page never sees them).
//!
//! Every local user can reach a loopback port, so a request needs this run's secret: a random
//! value printed in the URL's fragment (`/ui#secret=…`, which no request carries). The page
//! keeps it in its tab's `sessionStorage` (its own origin's, port included) and sends it in
//! [`SECRET_HEADER`] with every request; only the page's files, which hold no data, pass
//! without it. No cookie: browsers send the cookies of 127.0.0.1 to every port of it, so a
//! page another local user serves on another port would receive one and could replay it; a
//! header is sent only by the page's own script. The header stays here: only [`PASSED_ON`]
//! reaches the API.
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

use crate::client::{ApiClient, ClientError};

/// The largest request body passed on (the API's own limit).
const MAX_BODY: usize = 10 << 20;

/// The request headers passed on to the API; the rest (the secret's header, cookies, a
/// browser's `Origin`, which names kresctl's address, not the API's) stay here.
const PASSED_ON: [header::HeaderName; 7] = [
    header::ACCEPT,
    header::AUTHORIZATION,
    header::CONTENT_TYPE,
    header::IF_MATCH,
    header::IF_NONE_MATCH,
    header::CACHE_CONTROL,
    header::HeaderName::from_static("last-event-id"),
];

/// The request header that carries this run's secret.
const SECRET_HEADER: &str = "x-kresctl-ui-secret";

/// The answer header that marks a refusal for want of the secret (the page shows its text).
const REFUSED_HEADER: &str = "x-kresctl-ui";

/// The page's files: no data, so `GET` and `HEAD` of these paths (exactly) pass without the
/// secret; a browser must load the page before its script can send the secret.
const PUBLIC_FILES: [&str; 4] = ["/ui", "/ui/app.js", "/ui/app.css", "/ui/favicon.svg"];

/// Random bytes in the secret (256 bits).
const SECRET_BYTES: usize = 32;

/// An answer's body: the API's, as it comes (an event stream has no end), or our own.
type Body = BoxBody<Bytes, hyper::Error>;

/// What admits a request in this run: the secret printed in the URL, drawn anew by each run
/// of kresctl ui.
struct Keys {
    /// Printed in the URL's fragment; sent in [`SECRET_HEADER`].
    secret: String,
}

impl Keys {
    /// A fresh secret from the kernel's random source.
    fn draw() -> std::io::Result<Keys> {
        Ok(Keys {
            secret: kres_wire::random_hex(SECRET_BYTES)?,
        })
    }

    /// Whether `headers` carry the secret in [`SECRET_HEADER`].
    fn admit(&self, headers: &hyper::HeaderMap) -> bool {
        headers
            .get_all(SECRET_HEADER)
            .iter()
            .fold(false, |found, value| {
                found | same(value.as_bytes(), self.secret.as_bytes())
            })
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

/// What becomes of a request that passed the checks of Host and Origin.
#[derive(Debug, PartialEq, Eq)]
enum Admission {
    /// One of the page's files: passed on without the secret.
    PublicFile,
    /// With the secret: passed on.
    Admitted,
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
    let keys = Keys::draw()?;
    println!(
        "The status page is at http://{}/ui#secret={} (until kresctl ends: Ctrl-C; whoever \
         has this URL acts with kresctl's rights)",
        crate::client::authority(&bound.ip().to_string(), bound.port()),
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
    fn only_the_page_files_pass_without_the_secret() {
        use hyper::Method;
        let keys = keys();
        let none: &[(&str, &str)] = &[];
        let secret: &[(&str, &str)] = &[(SECRET_HEADER, &keys.secret)];
        let wrong = "0".repeat(keys.secret.len());
        let wrong: &[(&str, &str)] = &[(SECRET_HEADER, &wrong)];
        let prefix: &[(&str, &str)] = &[(SECRET_HEADER, &keys.secret[..32])];
        let wrong_then_secret: &[(&str, &str)] =
            &[(SECRET_HEADER, "0"), (SECRET_HEADER, &keys.secret)];
        // A cookie admits nothing, not even one that holds the secret: a page of another
        // port of 127.0.0.1 would have received it.
        let as_cookie = format!("kresctl-ui-8453={0}; secret={0}", keys.secret);
        let as_cookie: &[(&str, &str)] = &[("cookie", &as_cookie)];
        let as_bearer = format!("Bearer {}", keys.secret);
        let as_bearer: &[(&str, &str)] = &[("authorization", &as_bearer)];
        type Pairs<'a> = &'a [(&'a str, &'a str)];
        let rows: &[(Method, &str, Pairs, Admission)] = &[
            (Method::GET, "/ui", none, Admission::PublicFile),
            (Method::HEAD, "/ui/app.js", none, Admission::PublicFile),
            (Method::GET, "/ui/app.css", none, Admission::PublicFile),
            (Method::GET, "/ui/favicon.svg", none, Admission::PublicFile),
            (Method::GET, "/ui", as_cookie, Admission::PublicFile),
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
            (Method::POST, "/stop", wrong, Admission::Refused),
            (Method::POST, "/stop", prefix, Admission::Refused),
            (Method::PUT, "/v1/config", as_cookie, Admission::Refused),
            (Method::GET, "/events", as_cookie, Admission::Refused),
            (Method::PUT, "/v1/config", as_bearer, Admission::Refused),
            (Method::GET, "/events", secret, Admission::Admitted),
            (Method::PUT, "/v1/config", secret, Admission::Admitted),
            (Method::POST, "/stop", secret, Admission::Admitted),
            (Method::GET, "/ui/whoami", secret, Admission::Admitted),
            (
                Method::POST,
                "/stop",
                wrong_then_secret,
                Admission::Admitted,
            ),
            // The route of the former session trade is the API's like any other.
            (
                Method::POST,
                "/.kresctl-ui/session",
                none,
                Admission::Refused,
            ),
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
    fn secrets_are_fresh_and_stay_here() {
        let (one, two) = (Keys::draw().expect("keys"), Keys::draw().expect("keys"));
        assert_eq!(one.secret.len(), 2 * SECRET_BYTES);
        assert!(one.secret.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(one.secret, two.secret);
        let refused = secret_needed();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        assert_eq!(refused.headers()[REFUSED_HEADER], "secret-needed");
        assert!(!refused.headers().contains_key(header::SET_COOKIE));
        for kept in [
            header::COOKIE,
            header::HeaderName::from_static(SECRET_HEADER),
        ] {
            assert!(!PASSED_ON.contains(&kept), "{kept} is never passed on");
        }
    }
}
