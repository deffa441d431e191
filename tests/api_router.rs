//! The management API's router without a socket: requests go through
//! `tower::ServiceExt::oneshot` on `app(state)`. The state holds a real `SupervisorHandle`
//! (no children) and a manager command channel whose receiver the test drives, answering
//! `Apply` commands with success or a canary rejection.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use kres_daemon::api::app;
use kres_daemon::api::guard::{Guard, TcpGuard};
use kres_daemon::api::roles::{ApiGroups, UnixRoles};
use kres_daemon::api::server::Peer;
use kres_daemon::manager::handle::ManagerCommand;
use kres_daemon::manager::plan::{ChangePlan, Restart};
use kres_daemon::manager::{ApplyError, ChangeError};
use serde_json::{json, Value};
use tower::ServiceExt;

#[path = "common/router.rs"]
mod router;
use router::{json_body, request, with_body, Fixture, History, Reply, Supervision};

/// The fixture of these tests: one worker configured, a real supervisor without children.
async fn fixture() -> Fixture {
    Fixture::new(1, Supervision::Local, History::default()).await
}

/// How the fake manager answers an `Apply`.
enum Outcome {
    Applied,
    CanaryRejected,
}

impl Fixture {
    /// Send one request that makes a change, and answer the manager's `Apply` with
    /// `outcome`. Returns the reply and the configuration the manager was given.
    async fn change(&mut self, request: Request<Body>, outcome: Outcome) -> (Reply, Value) {
        self.with_manager(request, |command, config| {
            let ManagerCommand::Apply {
                config: new, reply, ..
            } = command
            else {
                panic!("expected an Apply command");
            };
            let raw = new.raw.clone();
            let result = match outcome {
                Outcome::Applied => {
                    config.send_replace(Arc::new(*new));
                    Ok(ChangePlan::default())
                }
                Outcome::CanaryRejected => Err(ChangeError::Apply(ApplyError::Canary {
                    reason: "exited with code 1".into(),
                    output: vec!["[net] bind to '192.0.2.1@53' failed".into()],
                })),
            };
            let _ = reply.send(result);
            raw
        })
        .await
    }
}

#[tokio::test]
async fn get_returns_the_raw_config_with_an_etag_and_if_none_match_gives_304() {
    let f = fixture().await;
    let r = f.send(request("GET", "/v1/config")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.content_type.as_deref(), Some("application/json"));
    assert_eq!(r.json()["workers"], json!(1));
    let tag = r.etag.expect("etag");
    let r = f.send(request("GET", "/v1/config/workers")).await;
    assert_eq!((r.status, r.json()), (StatusCode::OK, json!(1)));
    assert_eq!(
        r.etag.as_deref(),
        Some(tag.as_str()),
        "etag of the whole document"
    );

    let conditional = |name: &str, value: &str, method: &str| {
        Request::builder()
            .method(method)
            .uri("/v1/config")
            .header(name, value)
            .body(Body::empty())
            .expect("request")
    };
    let r = f.send(conditional("if-none-match", &tag, "GET")).await;
    assert_eq!(r.status, StatusCode::NOT_MODIFIED);
    assert!(r.body.is_empty());
    let r = f
        .send(conditional("if-none-match", "\"other\"", "GET"))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = f.send(conditional("if-match", &tag, "GET")).await;
    assert_eq!(r.status, StatusCode::OK);
    // A GET with a stale If-Match is 412 (upstream: 304).
    let r = f.send(conditional("if-match", "\"stale\"", "GET")).await;
    assert_eq!(r.status, StatusCode::PRECONDITION_FAILED);
    // Writes with a failed precondition never reach the manager.
    let r = f.send(conditional("if-match", "\"stale\"", "DELETE")).await;
    assert_eq!(r.status, StatusCode::PRECONDITION_FAILED);
    let r = f.send(conditional("if-none-match", &tag, "PUT")).await;
    assert_eq!(r.status, StatusCode::PRECONDITION_FAILED);
    // A value that is not `*` or a list of entity tags is malformed: 400, not 412.
    for (name, value) in [
        ("if-match", "stale"),
        ("if-none-match", ""),
        ("if-match", "*, \"a\""),
    ] {
        let r = f.send(conditional(name, value, "GET")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{name}: {value}");
        assert!(
            r.text().contains("is not * or a list of entity tags"),
            "{}",
            r.text()
        );
    }
}

#[tokio::test]
async fn head_is_a_get_without_a_body() {
    let f = fixture().await;
    let get = f.send(request("GET", "/v1/config")).await;
    let head = f.send(request("HEAD", "/v1/config")).await;
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(head.etag, get.etag);
    assert!(head.body.is_empty());
}

#[tokio::test]
async fn put_applies_through_the_manager_and_returns_the_new_etag() {
    let mut f = fixture().await;
    let old = f.send(request("GET", "/v1/config")).await.etag;
    let (r, applied) = f
        .change(
            json_body("PUT", "/v1/config/workers", json!(2)),
            Outcome::Applied,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(applied["workers"], json!(2));
    assert!(r.etag.is_some() && r.etag != old);
    let now = f.send(request("GET", "/v1/config")).await;
    assert_eq!(now.etag, r.etag);
    assert_eq!(now.json()["workers"], json!(2));
}

#[tokio::test]
async fn a_canary_rejection_is_400_and_changes_nothing() {
    let mut f = fixture().await;
    let before = f.send(request("GET", "/v1/config")).await;
    let (r, _) = f
        .change(
            json_body("PUT", "/v1/config/workers", json!(3)),
            Outcome::CanaryRejected,
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let text = r.text();
    assert!(
        text.contains("canary") && text.contains("192.0.2.1"),
        "{text}"
    );
    let after = f.send(request("GET", "/v1/config")).await;
    assert_eq!((after.etag, after.body), (before.etag, before.body));
}

#[tokio::test]
async fn yaml_bodies_are_accepted() {
    let mut f = fixture().await;
    let (r, applied) = f
        .change(
            with_body(
                "PUT",
                "/v1/config/dns64",
                "application/yaml",
                "enable: true\nprefix: 64:ff9b::/96\n",
            ),
            Outcome::Applied,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(
        applied["dns64"],
        json!({"enable": true, "prefix": "64:ff9b::/96"})
    );
}

#[tokio::test]
async fn delete_removes_the_key() {
    let mut f = fixture().await;
    let (r, applied) = f
        .change(request("DELETE", "/v1/config/workers"), Outcome::Applied)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(applied.get("workers").is_none(), "{applied}");
}

#[tokio::test]
async fn patch_applies_json_patch_operations() {
    let mut f = fixture().await;
    let ops = json!([
        {"op": "replace", "path": "/workers", "value": 4},
        {"op": "add", "path": "/options", "value": {"minimize": false}},
        {"op": "test", "path": "/workers", "value": 4},
        {"op": "copy", "from": "/workers", "path": "/ttl-copy-is-removed"},
        {"op": "remove", "path": "/ttl-copy-is-removed"},
    ]);
    // Sent as RFC 6902's own media type (`application/json` is read too).
    let patch = with_body(
        "PATCH",
        "/v1/config",
        "application/json-patch+json",
        &ops.to_string(),
    );
    let (r, applied) = f.change(patch, Outcome::Applied).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    // Empty, as upstream answers, typed as the document says.
    assert!(r.body.is_empty(), "{}", r.text());
    assert_eq!(r.content_type.as_deref(), Some("text/plain; charset=utf-8"));
    assert_eq!(applied["workers"], json!(4));
    assert_eq!(applied["options"], json!({"minimize": false}));
    assert!(applied.get("ttl-copy-is-removed").is_none());
}

/// Ways a request can be refused before the manager is asked, with its status and a fragment
/// of the body: bodies, configurations and pointers ([`more_refusals`] has the rest).
fn refusals() -> Vec<(Request<Body>, StatusCode, &'static str)> {
    vec![
        // The body is not JSON.
        (
            with_body("PUT", "/v1/config/workers", "application/json", "{"),
            StatusCode::BAD_REQUEST,
            "request processing error",
        ),
        // Not YAML either.
        (
            with_body("PUT", "/v1/config/workers", "application/yaml", "a: [1"),
            StatusCode::BAD_REQUEST,
            "request processing error",
        ),
        // Not UTF-8.
        (
            Request::builder()
                .method("PUT")
                .uri("/v1/config/workers")
                .body(Body::from(vec![0xff, 0xfe]))
                .expect("request"),
            StatusCode::BAD_REQUEST,
            "UTF-8",
        ),
        // A valid document that is not a valid configuration.
        (
            json_body("PUT", "/v1/config/workers", json!(-1)),
            StatusCode::BAD_REQUEST,
            "/workers",
        ),
        (
            json_body("PUT", "/v1/config/no-such-section", json!(1)),
            StatusCode::BAD_REQUEST,
            "Configuration validation error detected",
        ),
        // The pointer's parent does not exist.
        (
            json_body(
                "PUT",
                "/v1/config/cache/garbage-collector/interval",
                json!("1s"),
            ),
            StatusCode::NOT_FOUND,
            "",
        ),
        // Pointing into a scalar finds nothing.
        (
            request("GET", "/v1/config/workers/0"),
            StatusCode::NOT_FOUND,
            "nothing at /workers/0",
        ),
        // Assigning below a scalar.
        (
            json_body("PUT", "/v1/config/workers/x", json!(1)),
            StatusCode::BAD_REQUEST,
            "not an object or an array",
        ),
        // A list index that is not a number.
        (
            json_body(
                "PATCH",
                "/v1/config",
                json!([{"op": "add", "path": "/l", "value": []}, {"op": "add", "path": "/l/x", "value": 1}]),
            ),
            StatusCode::BAD_REQUEST,
            "invalid array index",
        ),
        (
            request("GET", "/v1/config/no-such-key"),
            StatusCode::NOT_FOUND,
            "",
        ),
        (
            request("DELETE", "/v1/config/no-such-key"),
            StatusCode::NOT_FOUND,
            "",
        ),
    ]
}

/// Refusals of patches, media types, methods and cache clears; see [`refusals`].
fn more_refusals() -> Vec<(Request<Body>, StatusCode, &'static str)> {
    vec![
        // A malformed patch.
        (
            json_body("PATCH", "/v1/config", json!({"op": "replace"})),
            StatusCode::BAD_REQUEST,
            "request processing error",
        ),
        (
            json_body(
                "PATCH",
                "/v1/config",
                json!([{"op": "frobnicate", "path": "/x"}]),
            ),
            StatusCode::BAD_REQUEST,
            "request processing error",
        ),
        // A failed `test` operation.
        (
            json_body(
                "PATCH",
                "/v1/config",
                json!([{"op": "test", "path": "/workers", "value": 7}]),
            ),
            StatusCode::CONFLICT,
            "",
        ),
        // A MIME type we do not parse.
        (
            with_body("PUT", "/v1/config/workers", "text/plain", "2"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported MIME type 'text/plain'",
        ),
        (
            with_body(
                "PUT",
                "/v1/config/workers",
                "application/x-www-form-urlencoded",
                "2",
            ),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported MIME type",
        ),
        // A wrong method on a known path.
        (
            request("POST", "/v1/config"),
            StatusCode::METHOD_NOT_ALLOWED,
            "",
        ),
        // A bad cache-clear request.
        (
            json_body("POST", "/cache/clear", json!({"rr-type": "AAAA"})),
            StatusCode::BAD_REQUEST,
            "Configuration validation error detected",
        ),
        (
            with_body("POST", "/cache/clear", "application/json", "{"),
            StatusCode::BAD_REQUEST,
            "request processing error",
        ),
        // No body: refused as upstream's manager refuses it (`{}` clears everything).
        (
            request("POST", "/cache/clear"),
            StatusCode::BAD_REQUEST,
            "the body is empty",
        ),
        // No worker to clear the cache with.
        (
            json_body("POST", "/cache/clear", json!({})),
            StatusCode::SERVICE_UNAVAILABLE,
            "no running worker",
        ),
        (
            request("GET", "/no/such/route"),
            StatusCode::NOT_FOUND,
            "no route for /no/such/route",
        ),
        // Upstream's kresctl with `-p workers`.
        (
            request("GET", "/v1/configworkers"),
            StatusCode::NOT_FOUND,
            "a JSON pointer starts with '/' (/v1/config/workers)",
        ),
    ]
}

/// Every refusal of [`refusals`] and [`more_refusals`] is answered as it says, and none reaches the manager.
#[tokio::test]
async fn refused_requests() {
    let f = fixture().await;
    for (request, status, fragment) in refusals().into_iter().chain(more_refusals()) {
        let what = format!("{} {}", request.method(), request.uri());
        let r = f.send(request).await;
        assert_eq!(r.status, status, "{what}: {}", r.text());
        assert!(r.text().contains(fragment), "{what}: {}", r.text());
    }
    // None of them reached the manager.
    let mut commands = f.commands;
    assert!(commands.try_recv().is_err());
}

#[tokio::test]
async fn bodies_over_the_limit_get_413() {
    let f = fixture().await;
    let big = format!("\"{}\"", "x".repeat(kres_daemon::api::server::BODY_LIMIT));
    let r = f
        .send(with_body(
            "PUT",
            "/v1/config/workers",
            "application/json",
            &big,
        ))
        .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn processes_filters() {
    let f = fixture().await;
    for path in [
        "/processes",
        "/processes/all",
        "/processes/kresd",
        "/processes/gc",
    ] {
        let r = f.send(request("GET", path)).await;
        assert_eq!((r.status, r.json()), (StatusCode::OK, json!([])), "{path}");
    }
    let r = f.send(request("GET", "/processes/kres")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.text().contains("Invalid process type 'kres'"),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn probes_and_static_routes() {
    let f = fixture().await;
    // No worker exists yet: neither alive (no DNS) nor ready.
    let r = f.send(request("GET", "/livez")).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.text().contains("no worker"), "{}", r.text());
    let r = f.send(request("GET", "/readyz")).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.text().contains("0/1"), "{}", r.text());
    // Draining: not ready, whatever the workers (a real daemon's probes while draining are
    // in tests/graceful_stop.rs; no process is started here, where other tests' supervisors
    // would reap it).
    let r = f.send(request("POST", "/drain")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = f.send(request("GET", "/readyz")).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.text().contains("draining"), "{}", r.text());
    let r = f.send(request("GET", "/")).await;
    assert_eq!(r.json()["status"], json!("RUNNING"));
    let r = f.send(request("GET", "/schema")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.json()["properties"]["workers"].is_object());
    let r = f.send(request("GET", "/metrics")).await;
    assert_eq!(r.status, StatusCode::MOVED_PERMANENTLY);
    let r = f.send(request("GET", "/metrics/json")).await;
    assert_eq!((r.status, r.json()), (StatusCode::OK, json!({})));
    // Fault injection is off.
    let r = f.send(request("POST", "/debug/panic-manager")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

/// Path parameters are the types the document lists: a value none of them names is the route's
/// own answer, whatever the rest of the request.
#[tokio::test]
async fn path_parameters_outside_their_types_get_the_routes_answers() {
    let mut f = fixture().await;
    let r = f.send(request("GET", "/processes/Kresd")).await;
    assert_eq!(
        (r.status, r.text().as_str()),
        (StatusCode::BAD_REQUEST, "Invalid process type 'Kresd'\n")
    );
    let r = f.send(request("GET", "/processes/%6Bresd")).await;
    assert_eq!(r.status, StatusCode::OK, "percent-decoded: {}", r.text());
    // With fault injection on, a crash kind none of the three is the route's 404 (and nothing
    // crashes); no kind at all is no route.
    f.state.fault_injection = kres_daemon::api::fault::FaultInjection::On;
    for how in ["explode", "Abort"] {
        let r = f
            .send(request("POST", &format!("/debug/crash-manager/{how}")))
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{how}: {}", r.text());
        assert!(r.body.is_empty(), "{how}: {}", r.text());
    }
    let r = f.send(request("POST", "/debug/crash-manager/")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.text().starts_with("no route for"), "{}", r.text());
}

#[tokio::test]
async fn reload_and_renew_wait_for_the_manager() {
    let mut f = fixture().await;
    let (r, ()) = f
        .with_manager(
            request("POST", "/renew/force"),
            |command, _| match command {
                ManagerCommand::Renew {
                    restart: Restart::Always,
                    origin: kres_daemon::events::Origin::Api,
                    reply,
                } => {
                    let _ = reply.send(Ok(ChangePlan::default()));
                }
                other => panic!("expected a forced renew, got {other:?}"),
            },
        )
        .await;
    assert_eq!(
        (r.status, r.text().as_str()),
        (StatusCode::OK, "Renewing configuration...")
    );
    // With the manager gone, a change is 503.
    drop(f.commands);
    let r = app(f.state.clone())
        .oneshot(request("POST", "/reload"))
        .await
        .expect("infallible");
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let _ = &f.dir;
}

#[tokio::test]
async fn stop_cancels_the_daemon() {
    let f = fixture().await;
    let r = f.send(request("POST", "/stop")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(f.state.stop.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_change_the_manager_never_answers_times_out() {
    let f = fixture().await;
    // The manager receives the command but never replies.
    let started = tokio::time::Instant::now();
    let r = f.send(request("POST", "/reload")).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text());
    assert!(r.text().contains("no answer within"), "{}", r.text());
    assert!(started.elapsed() >= kres_daemon::api::server::CHANGE_TIMEOUT);
    drop(f.commands);
}

/// The next frame of a streamed body as text (axum writes one SSE message per frame); `None`
/// at the end.
async fn next_frame(body: &mut Body) -> Option<String> {
    let frame = tokio::time::timeout(std::time::Duration::from_secs(60), body.frame())
        .await
        .expect("a frame or the end");
    frame.map(|f| {
        let data = f.expect("frame").into_data().expect("data");
        String::from_utf8_lossy(&data).into_owned()
    })
}

/// `GET /events` with `headers`, its status and its body to read as it comes.
async fn open_events(f: &Fixture, uri: &str, headers: &[(&str, &str)]) -> (StatusCode, Body) {
    let mut request = Request::builder().method("GET").uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = app(f.state.clone())
        .oneshot(request.body(Body::empty()).expect("request"))
        .await
        .expect("infallible");
    (response.status(), response.into_body())
}

/// The value of field `name` in one SSE message.
fn field<'a>(message: &'a str, name: &str) -> Option<&'a str> {
    message
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
}

fn removed(n: usize) -> kres_daemon::events::Event {
    kres_daemon::events::Event::ProcessRemoved {
        name: format!("kresd{n}"),
    }
}

#[tokio::test]
async fn a_follower_that_stops_reading_is_cut_and_publishing_never_waits() {
    let f = fixture().await;
    let (status, mut body) = open_events(&f, "/events", &[]).await;
    assert_eq!(status, StatusCode::OK);
    // Ten thousand events while the client reads nothing.
    let started = std::time::Instant::now();
    for n in 0..10_000 {
        f.state.events.publish(removed(n));
    }
    eprintln!(
        "10,000 events published past a stalled follower in {:?}",
        started.elapsed()
    );
    let mut messages = Vec::new();
    while let Some(message) = next_frame(&mut body).await {
        messages.push(message);
    }
    let last = messages.last().expect("a message");
    assert_eq!(field(last, "event"), Some("events-lagged"), "{last}");
    assert_eq!(field(last, "id"), None, "a notice has no id: {last}");
    let data: Value = serde_json::from_str(field(last, "data").expect("data")).expect("JSON");
    assert!(data["lost"].as_u64().is_some_and(|n| n > 0), "{data}");
    assert!(messages.len() < 10_000, "{} messages", messages.len());
    eprintln!(
        "the stalled follower got {} messages, then was cut",
        messages.len()
    );
}

#[tokio::test]
async fn a_follower_resumes_after_its_last_event_id_and_followers_are_capped() {
    let f = fixture().await;
    let ids: Vec<String> = (0..3)
        .map(|n| f.state.events.publish(removed(n)).to_string())
        .collect();
    for (uri, header) in [
        ("/events", vec![("last-event-id", ids[0].as_str())]),
        (&*format!("/events?last-event-id={}", ids[0]), vec![]),
    ] {
        let (status, mut body) = open_events(&f, uri, &header).await;
        assert_eq!(status, StatusCode::OK);
        for id in &ids[1..] {
            let message = next_frame(&mut body).await.expect("a message");
            assert_eq!(field(&message, "id"), Some(id.as_str()), "{message}");
            assert_eq!(field(&message, "event"), Some("process-removed"));
        }
    }
    // An id of another incarnation: told first, then what is kept.
    let (_, mut body) = open_events(&f, "/events", &[("last-event-id", "1.0-2")]).await;
    let first = next_frame(&mut body).await.expect("a message");
    assert_eq!(field(&first, "event"), Some("events-missed"), "{first}");
    let second = next_frame(&mut body).await.expect("a message");
    assert_eq!(field(&second, "id"), Some(ids[0].as_str()), "{second}");

    // At most MAX_FOLLOWERS at once (the one above still counts); 503 beyond.
    drop(body);
    let mut open = Vec::new();
    for _ in 0..kres_daemon::events::MAX_FOLLOWERS {
        let (status, body) = open_events(&f, "/events", &[]).await;
        assert_eq!(status, StatusCode::OK);
        open.push(body);
    }
    let refused = f.send(request("GET", "/events")).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        refused.text().contains("too many event streams"),
        "{}",
        refused.text()
    );
    open.pop();
    let (status, _body) = open_events(&f, "/events", &[]).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a closed stream gives its place back"
    );
}

#[tokio::test(start_paused = true)]
async fn an_event_stream_outlives_the_request_time_limit_and_ends_at_the_stop() {
    let f = fixture().await;
    let (status, mut body) = open_events(&f, "/events", &[]).await;
    assert_eq!(status, StatusCode::OK);
    // Past the time limit of a GET (the paused clock jumps there).
    tokio::time::sleep(kres_daemon::api::server::READ_TIMEOUT + std::time::Duration::from_secs(1))
        .await;
    let keep_alive = next_frame(&mut body).await.expect("a keep-alive");
    assert!(keep_alive.starts_with(':'), "{keep_alive:?}");
    let id = f.state.events.publish(removed(0)).to_string();
    let message = next_frame(&mut body).await.expect("the event");
    assert_eq!(field(&message, "id"), Some(id.as_str()), "{message}");
    // The daemon stops: the stream says so and ends (the server's graceful stop waits for
    // nobody).
    f.state.stop.cancel();
    let last = next_frame(&mut body).await.expect("a last notice");
    assert_eq!(field(&last, "event"), Some("stopping"), "{last}");
    assert_eq!(next_frame(&mut body).await, None);
}

// Roles: the client's role by unix peer credentials or TCP bearer token, checked before any
// handler runs.

/// The admin and read-only groups of the role tests, and the daemon's own uid.
const ADMIN_GID: u32 = 4010;
const READER_GID: u32 = 4020;
const OWN_UID: u32 = 995;

/// A unix peer as the server records it.
fn unix_peer(uid: u32, gid: u32, groups: &[u32]) -> Peer {
    Peer::Unix {
        uid,
        gid,
        pid: Some(4242),
        groups: Arc::from(groups),
    }
}

/// `request` as it reaches the router from `peer`.
fn from(peer: &Peer, mut request: Request<Body>) -> Request<Body> {
    request.extensions_mut().insert(peer.clone());
    request
}

impl Fixture {
    /// A fixture whose unix socket gives roles by the groups above.
    async fn with_groups() -> Fixture {
        let mut f = fixture().await;
        f.state.guard = Arc::new(Guard {
            tcp: TcpGuard::default(),
            unix: UnixRoles::new(
                ApiGroups {
                    admin: Some(ADMIN_GID),
                    read_only: Some(READER_GID),
                },
                OWN_UID,
            ),
        });
        f
    }

    /// A fixture listening on TCP 127.0.0.1:5000 with an admin and a read-only token.
    async fn with_tokens() -> Fixture {
        let mut f = fixture().await;
        f.state.guard = Arc::new(Guard {
            tcp: TcpGuard {
                endpoint: Some("127.0.0.1:5000".parse().expect("addr")),
                token: Some(Arc::from("admin-secret")),
                read_only_token: Some(Arc::from("reader-secret")),
            },
            unix: UnixRoles::default(),
        });
        f
    }

    /// Send a request the role check must refuse: the manager hears nothing of it.
    async fn refused(&mut self, request: Request<Body>) -> Reply {
        let reply = self.send(request).await;
        assert!(
            self.commands.try_recv().is_err(),
            "a refused request reached the manager"
        );
        reply
    }
}

/// A request over TCP to 127.0.0.1:5000 with `token`, if any.
fn over_tcp(token: Option<&str>, mut request: Request<Body>) -> Request<Body> {
    let headers = request.headers_mut();
    headers.insert("host", "127.0.0.1:5000".parse().expect("header"));
    if let Some(token) = token {
        let value = format!("Bearer {token}");
        headers.insert("authorization", value.parse().expect("header"));
    }
    request
        .extensions_mut()
        .insert(Peer::Tcp("127.0.0.1:40000".parse().expect("addr")));
    request
}

#[tokio::test]
async fn admins_by_uid_or_group_read_and_change() {
    let admins = [
        unix_peer(0, 0, &[]),
        unix_peer(OWN_UID, OWN_UID, &[]),
        unix_peer(1000, ADMIN_GID, &[]),
        unix_peer(1000, 1000, &[READER_GID, ADMIN_GID]),
    ];
    for (n, peer) in admins.iter().enumerate() {
        let mut f = Fixture::with_groups().await;
        let r = f.send(from(peer, request("GET", "/v1/config"))).await;
        assert_eq!(r.status, StatusCode::OK, "{peer}");
        let (r, applied) = f
            .change(
                from(peer, json_body("PUT", "/v1/config/workers", json!(n + 2))),
                Outcome::Applied,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{peer}: {}", r.text());
        assert_eq!(applied["workers"], json!(n + 2));
    }
}

#[tokio::test]
async fn a_reader_reads_and_every_change_is_403() {
    for peer in [
        unix_peer(1000, 1000, &[READER_GID]),
        unix_peer(1000, READER_GID, &[]),
    ] {
        let mut f = Fixture::with_groups().await;
        let before = f.send(from(&peer, request("GET", "/v1/config"))).await;
        assert_eq!(before.status, StatusCode::OK, "{peer}");
        for path in [
            "/v1/config/workers",
            "/processes",
            "/schema",
            "/",
            "/upgrade",
        ] {
            let r = f.send(from(&peer, request("GET", path))).await;
            assert_eq!(r.status, StatusCode::OK, "{peer} GET {path}: {}", r.text());
        }
        let r = f.send(from(&peer, request("HEAD", "/v1/config"))).await;
        assert_eq!(r.status, StatusCode::OK);
        let changes = [
            json_body("PUT", "/v1/config/workers", json!(2)),
            request("DELETE", "/v1/config/cache"),
            with_body(
                "PATCH",
                "/v1/config",
                "application/json-patch+json",
                r#"[{"op":"replace","path":"/workers","value":2}]"#,
            ),
            request("POST", "/reload"),
            request("POST", "/renew/force"),
            request("POST", "/stop"),
            request("POST", "/drain"),
            request("POST", "/upgrade"),
            json_body("POST", "/cache/clear", json!({})),
            // A GET nobody listed as a read is closed too.
            request("GET", "/debug/panic-manager"),
        ];
        for change in changes {
            let what = format!("{} {}", change.method(), change.uri());
            let r = f.refused(from(&peer, change)).await;
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{peer} {what}");
            assert_eq!(
                r.text(),
                format!("{what} needs the admin role; this client has the read-only role\n")
            );
        }
        assert!(!f.state.stop.is_cancelled(), "POST /stop was refused");
        let after = f.send(from(&peer, request("GET", "/v1/config"))).await;
        assert_eq!((after.etag, after.body), (before.etag, before.body));
    }
}

#[tokio::test]
async fn a_peer_in_neither_group_gets_403_for_everything() {
    let mut f = Fixture::with_groups().await;
    for peer in [unix_peer(1000, 1000, &[27, 100]), Peer::Unknown] {
        let r = f.refused(from(&peer, request("GET", "/v1/config"))).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        assert_eq!(
            r.text(),
            "GET /v1/config needs the read-only or the admin role; this client has no role\n"
        );
        let r = f
            .refused(from(
                &peer,
                json_body("PUT", "/v1/config/workers", json!(2)),
            ))
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
    }
    // A request that carries no peer at all is nobody's.
    let r = f.refused(request("GET", "/livez")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn without_groups_every_unix_peer_is_an_admin() {
    let mut f = fixture().await;
    let peer = unix_peer(1000, 1000, &[]);
    let (r, _) = f
        .change(
            from(&peer, json_body("PUT", "/v1/config/workers", json!(2))),
            Outcome::Applied,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
}

#[tokio::test]
async fn tcp_tokens_give_their_roles() {
    let mut f = Fixture::with_tokens().await;
    // The read-only token reads, and changes nothing.
    let before = f
        .send(over_tcp(
            Some("reader-secret"),
            request("GET", "/v1/config"),
        ))
        .await;
    assert_eq!(before.status, StatusCode::OK);
    let r = f
        .send(over_tcp(
            Some("reader-secret"),
            request("GET", "/processes"),
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = f
        .refused(over_tcp(
            Some("reader-secret"),
            json_body("PUT", "/v1/config/workers", json!(2)),
        ))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.text(),
        "PUT /v1/config/workers needs the admin role; this client has the read-only role\n"
    );
    let r = f
        .refused(over_tcp(Some("reader-secret"), request("POST", "/reload")))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // No token, or a wrong one: 401, for reads too.
    for token in [None, Some("reader-secre"), Some("admin-secret2"), Some("")] {
        let r = f
            .refused(over_tcp(token, request("GET", "/v1/config")))
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{token:?}");
        let r = f
            .refused(over_tcp(
                token,
                json_body("PUT", "/v1/config/workers", json!(2)),
            ))
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{token:?}");
    }
    let after = f
        .send(over_tcp(Some("admin-secret"), request("GET", "/v1/config")))
        .await;
    assert_eq!((after.etag, after.body), (before.etag, before.body));
    // The admin token changes.
    let (r, applied) = f
        .change(
            over_tcp(
                Some("admin-secret"),
                json_body("PUT", "/v1/config/workers", json!(3)),
            ),
            Outcome::Applied,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(applied["workers"], json!(3));
}

#[tokio::test]
async fn readers_cannot_take_the_event_streams_kept_for_admins() {
    use kres_daemon::events::{MAX_FOLLOWERS, RESERVED_FOLLOWERS};
    let mut f = fixture().await;
    let groups = ApiGroups {
        admin: Some(10),
        read_only: Some(20),
    };
    f.state.guard = Arc::new(Guard {
        tcp: TcpGuard::default(),
        unix: UnixRoles::new(groups, 995),
    });
    let peer = |uid: u32, gid: u32| Peer::Unix {
        uid,
        gid,
        pid: None,
        groups: Arc::from([]),
    };
    let open_as = |peer: Peer| {
        let router = app(f.state.clone());
        async move {
            let request = Request::builder()
                .uri("/events")
                .extension(peer)
                .body(Body::empty())
                .expect("request");
            let response = router.oneshot(request).await.expect("infallible");
            let status = response.status();
            (status, response.into_body())
        }
    };
    let mut open = Vec::new();
    for _ in 0..MAX_FOLLOWERS - RESERVED_FOLLOWERS {
        let (status, body) = open_as(peer(1000, 20)).await;
        assert_eq!(status, StatusCode::OK);
        open.push(body);
    }
    let (status, refused) = open_as(peer(1000, 20)).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a reader beyond its share"
    );
    let text =
        String::from_utf8_lossy(&refused.collect().await.expect("body").to_bytes()).into_owned();
    assert!(text.contains("kept for admins"), "{text}");
    // The places kept are the admins'.
    for _ in 0..RESERVED_FOLLOWERS {
        let (status, body) = open_as(peer(1001, 10)).await;
        assert_eq!(status, StatusCode::OK, "an admin");
        open.push(body);
    }
    let (status, _) = open_as(peer(1001, 10)).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "every place is taken"
    );
    // A reader's stream closed gives a place back to readers.
    drop(open.remove(0));
    let (status, _body) = open_as(peer(1000, 20)).await;
    assert_eq!(status, StatusCode::OK);
}

/// The status page's files need no token (they hold no data; the page asks for the token),
/// carry a Content-Security-Policy that allows this origin only, and still pass the Host and
/// Origin checks; `/ui/whoami` needs a token and tells its role.
#[tokio::test]
async fn the_status_page_loads_without_a_token_and_whoami_tells_the_role() {
    let f = Fixture::with_tokens().await;
    for path in ["/ui", "/ui/app.js", "/ui/app.css", "/ui/favicon.svg"] {
        let response = f.respond(over_tcp(None, request("GET", path))).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let csp = response
            .headers()
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(
            csp.starts_with("default-src 'none'; script-src 'self'; style-src 'self'; "),
            "{path}: {csp}"
        );
        let r = Reply::read(response).await;
        assert!(!r.body.is_empty(), "{path}");
        // The files hold neither token.
        assert!(
            !r.text().contains("admin-secret") && !r.text().contains("reader-secret"),
            "{path}"
        );
    }
    let mut rebinding = over_tcp(None, request("GET", "/ui"));
    rebinding
        .headers_mut()
        .insert("host", "evil.example:5000".parse().expect("header"));
    assert_eq!(
        f.send(rebinding).await.status,
        StatusCode::MISDIRECTED_REQUEST
    );
    let r = f.send(over_tcp(None, request("GET", "/ui/whoami"))).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = f.send(over_tcp(None, request("POST", "/ui"))).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "only reads are public");
    for (token, role) in [("reader-secret", "read-only"), ("admin-secret", "admin")] {
        let r = f
            .send(over_tcp(Some(token), request("GET", "/ui/whoami")))
            .await;
        assert_eq!(r.status, StatusCode::OK);
        let who = r.json();
        assert_eq!(who["role"], role);
        assert_eq!(who["workers"], 1);
        assert!(who["generation"].is_u64(), "{who}");
        assert!(
            who["etag"].as_str().is_some_and(|e| e.starts_with('"')),
            "{who}"
        );
        assert!(
            who["events_from"]
                .as_str()
                .is_some_and(|e| e.ends_with("-0")),
            "{who}"
        );
    }
}
