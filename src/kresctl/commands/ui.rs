//! `kresctl ui`: the status page (`GET /ui`) in a browser when the API listens on a unix
//! socket, which browsers cannot reach. kresctl listens on a loopback address for as long as
//! it runs and passes every request on to the API, with the bearer token it reads from the
//! environment (the page never sees it). It never listens wider than loopback, refuses
//! requests whose `Host` is no loopback name of its port (a page of another site resolved to
//! 127.0.0.1: DNS rebinding) and those a browser sends from another origin, so no other site
//! can drive the resolver through it.

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

/// The request headers passed on to the API; the rest (cookies, a browser's `Origin`, which
/// names kresctl's address, not the API's) stay here.
const PASSED_ON: [header::HeaderName; 7] = [
    header::ACCEPT,
    header::AUTHORIZATION,
    header::CONTENT_TYPE,
    header::IF_MATCH,
    header::IF_NONE_MATCH,
    header::CACHE_CONTROL,
    header::HeaderName::from_static("last-event-id"),
];

/// An answer's body: the API's, as it comes (an event stream has no end), or our own.
type Body = BoxBody<Bytes, hyper::Error>;

/// Serve the status page on `listen` (a loopback address) until Ctrl-C or SIGTERM.
pub async fn serve(client: ApiClient, listen: SocketAddr) -> Result<(), ClientError> {
    if !listen.ip().is_loopback() {
        return Err(ClientError::Invalid(format!(
            "--listen {listen}: kresctl ui listens on loopback addresses only (127.0.0.0/8, ::1)"
        )));
    }
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let bound = listener.local_addr()?;
    println!(
        "The status page is at http://{}/ui (until kresctl ends: Ctrl-C)",
        crate::kresctl::client::authority(&bound.ip().to_string(), bound.port())
    );
    let client = std::sync::Arc::new(client);
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
        let client = client.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let client = client.clone();
                async move { Ok::<_, Infallible>(pass_on(&client, bound, request).await) }
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
    bound: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    if let Err(why) = check_origin(request.headers(), bound) {
        return plain(StatusCode::FORBIDDEN, why);
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
}
