//! `GET /openapi.json` against the router it describes, through `tower::ServiceExt::oneshot`
//! on `app(state)` as in `api_router.rs`. The document must be valid OpenAPI 3.1 for a real
//! validator (`openapi-spec-validator`, Python, run as a child process on the document in a
//! file), name exactly the paths and methods the router serves (the router's paths are read
//! from axum's own route table, its methods from the `Allow` of a 405 answer), and describe
//! real answers (checked with Python's `jsonschema` against the document's schemas).
//!
//! No supervisor runs in this process, so child processes are safe here: the state's
//! `SupervisorHandle` is the kind the manager process holds, over a link whose other end the
//! test holds and on which it sends the process table.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::SystemTime;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use kres_daemon::api::app;
use kres_daemon::api::fault::FaultInjection;
use kres_daemon::api::openapi::{document, document_for, METHODS};
use kres_daemon::manager::handle::ManagerCommand;
use kres_daemon::manager::plan::{plan, Restart};
use kres_daemon::service::WorkerId;
use kres_wire::failures::ProcessFailureRecord;
use kres_wire::rpz::RpzZone;
use kres_wire::upgrade::{UpgradeOutcome, UpgradeRecord};
use serde_json::{json, Value};
use supervisor::{ExitStatus, ProcessSnapshot, ProcessState, Snapshot};

#[path = "common/router.rs"]
mod router;
use router::{request, with_body, with_headers, Fixture, History, Reply, Supervision};

/// The Python package that validates the document, and the version CI installs.
const VALIDATOR: &str = "openapi-spec-validator==0.9.0";

/// A process table with a worker of each state the answers show differently.
fn process_table() -> Snapshot {
    let now = Some(SystemTime::now());
    let process = |name: &str, kind: &str, state| ProcessSnapshot {
        name: name.into(),
        kind: kind.into(),
        pid: None,
        state,
        since: now,
        ready_at: None,
        restarts: 0,
        last_exit: None,
        failure: None,
        status_text: None,
        kill_reason: None,
        takes_queries: None,
        killed_pid: None,
    };
    Snapshot {
        processes: vec![
            ProcessSnapshot {
                pid: Some(4242),
                ready_at: now,
                takes_queries: Some(true),
                status_text: Some("serving".into()),
                ..process("kresd0", "kresd", ProcessState::Running)
            },
            ProcessSnapshot {
                restarts: 3,
                last_exit: Some(ExitStatus::Signaled {
                    signal: 9,
                    core_dumped: false,
                }),
                kill_reason: Some("stopped answering".into()),
                killed_pid: Some(4243),
                ..process("kresd1", "kresd", ProcessState::Backoff)
            },
            ProcessSnapshot {
                last_exit: Some(ExitStatus::Code(1)),
                failure: Some("exited 5 times within 10 s".into()),
                ..process("cache-gc", "gc", ProcessState::Failed)
            },
            process("policy-loader", "policy-loader", ProcessState::Exited),
            ProcessSnapshot {
                pid: Some(4244),
                ..process("manager", "manager", ProcessState::Running)
            },
        ],
        shutting_down: false,
        draining: false,
    }
}

/// The fixture of these tests: two workers configured, the process table above behind a
/// link (no supervisor runs, so the validator can run as a child), and a past to show.
async fn fixture() -> Fixture {
    let history = History {
        upgrade: Some(UpgradeRecord {
            generation: 1,
            outcome: UpgradeOutcome::Failed,
            from: "6.0.0".into(),
            to: "6.0.0".into(),
            at: 1_700_000_000,
            error: Some("the new binary cannot read the state".into()),
            first_incarnation: 2,
        }),
        process_failures: Some(ProcessFailureRecord {
            failures: 2,
            since: 1_700_000_000,
            last: "killed by signal 9 (SIGKILL)".into(),
            restarts: 3,
            last_exit: Some(supervisor::ExitStatus::Signaled {
                signal: 9,
                core_dumped: false,
            }),
        }),
    };
    Fixture::new(2, Supervision::Remote(process_table()), history).await
}

/// Send a request that makes a dry run, and answer the manager's `DryRun` with what the real
/// planner says of it (the workers of the running configuration registered).
async fn dry_run(fixture: &mut Fixture, request: Request<Body>) -> Reply {
    let running = fixture.config.borrow().clone();
    let (reply, ()) = fixture
        .with_manager(request, |command, _| {
            let ManagerCommand::DryRun { config, reply, .. } = command else {
                panic!("expected a DryRun command");
            };
            let registered: Vec<WorkerId> = WorkerId::all(running.model.workers).collect();
            let plan = plan(
                &running.model,
                &config.model,
                &registered,
                Restart::WhenNeeded,
            )
            .expect("a mutable section");
            let _ = reply.send(Ok(plan));
        })
        .await;
    reply
}

/// Run `python3` with `args`; its output, or a failure that says how to get the validator.
fn python(args: &[&str]) -> std::process::Output {
    let output = std::process::Command::new("python3")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): install python3 and {VALIDATOR}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("No module named"),
        "the validator is missing: pip install {VALIDATOR}\n{stderr}"
    );
    output
}

#[tokio::test]
async fn the_document_is_valid_openapi_3_1() {
    let fixture = fixture().await;
    let reply = fixture.send(request("GET", "/openapi.json")).await;
    assert_eq!(reply.status, StatusCode::OK);
    let served = reply.json();
    assert_eq!(&served, document(), "the document served is the one built");
    assert_eq!(served["openapi"], "3.1.0");
    assert_eq!(served["info"]["version"], kres_daemon::build_version());
    assert_eq!(
        served["components"]["schemas"]["KresConfig"]["properties"]
            .as_object()
            .map(|m| m.keys().cloned().collect::<BTreeSet<_>>()),
        kres_config::json_schema()["properties"]
            .as_object()
            .map(|m| m.keys().cloned().collect::<BTreeSet<_>>()),
        "the configuration's schema is embedded"
    );

    let file = fixture.dir.0.join("openapi.json");
    std::fs::write(&file, serde_json::to_vec(&served).expect("JSON")).expect("write");
    let file = file.to_str().expect("UTF-8 path");
    let output = python(&["-m", "openapi_spec_validator", "--schema", "3.1", file]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("openapi-spec-validator: {}", stdout.trim());
    assert!(
        output.status.success() && stdout.contains("OK"),
        "the document is not valid OpenAPI 3.1:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // The validator fails a document that breaks the rules (a path parameter left undeclared).
    let mut broken = served.clone();
    broken["paths"]["/processes/{kind}"]["get"]["parameters"] = json!([]);
    let broken_file = fixture.dir.0.join("broken.json");
    std::fs::write(&broken_file, serde_json::to_vec(&broken).expect("JSON")).expect("write");
    let output = python(&[
        "-m",
        "openapi_spec_validator",
        "--schema",
        "3.1",
        broken_file.to_str().expect("UTF-8 path"),
    ]);
    assert!(!output.status.success(), "the validator passes anything");
}

/// The paths in axum's route table, from its `Debug` form (`RouteId(n): "/path"`); axum has no
/// other way to list them. Its fallback router's catch-all (`__private__axum_fallback`) is the
/// 404 of every other path, no route.
fn router_paths(router: &axum::Router) -> BTreeSet<String> {
    let text = format!("{router:?}");
    let paths: BTreeSet<String> = text
        .split("RouteId(")
        .skip(1)
        .filter_map(|rest| {
            let (_, after) = rest.split_once("): \"")?;
            let (path, _) = after.split_once('"')?;
            (!path.contains("__private__axum")).then(|| path.to_owned())
        })
        .collect();
    assert!(
        paths.contains("/"),
        "no route found in the router's debug form (has axum changed it?):\n{text}"
    );
    paths
}

/// A concrete path for a route template: each `{name}` or `{*name}` becomes `probe`.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|segment| {
            if segment.starts_with('{') {
                "probe"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The methods the router serves at `path`: the `Allow` of its 405 answer to a method no route
/// takes (no handler runs), or `None` when it answers 404 (no route).
async fn served_methods(fixture: &Fixture, path: &str) -> Option<BTreeSet<String>> {
    let response = fixture.respond(request("PROBE", path)).await;
    if response.status() == StatusCode::NOT_FOUND {
        return None;
    }
    assert_eq!(
        response.status(),
        StatusCode::METHOD_NOT_ALLOWED,
        "PROBE {path}"
    );
    let allow = response
        .headers()
        .get("allow")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no Allow header at {path}"));
    Some(
        allow
            .split(',')
            .map(|m| m.trim().to_ascii_lowercase())
            .filter(|m| !m.is_empty())
            .collect(),
    )
}

/// The methods the document describes at an OpenAPI path.
fn documented_methods(doc: &Value, path: &str) -> Option<BTreeSet<String>> {
    let item = doc["paths"].get(path)?;
    Some(
        METHODS
            .iter()
            .filter(|m| item.get(**m).is_some())
            .map(|m| (*m).to_owned())
            .collect(),
    )
}

#[tokio::test]
async fn the_router_serves_exactly_what_the_document_describes() {
    let mut fixture = fixture().await;
    for faults in [FaultInjection::Off, FaultInjection::On] {
        fixture.state.fault_injection = faults;
        served_as_described(&fixture).await;
    }
    // The production document lists no fault-injection route; a server with them does.
    let debug_paths = |doc: &Value| {
        doc["paths"]
            .as_object()
            .expect("paths")
            .keys()
            .filter(|p| p.starts_with("/debug/"))
            .count()
    };
    assert_eq!(debug_paths(document()), 0);
    assert_eq!(debug_paths(document_for(FaultInjection::On)), 2);
    fixture.state.fault_injection = FaultInjection::Off;
    let served = fixture.send(request("GET", "/openapi.json")).await.json();
    assert_eq!(debug_paths(&served), 0);
    assert_eq!(
        served_methods(&fixture, "/debug/panic-manager").await,
        None,
        "no route"
    );
}

/// The router of `fixture`'s state serves exactly what its document describes.
async fn served_as_described(fixture: &Fixture) {
    let doc = document_for(fixture.state.fault_injection);
    let router = app(fixture.state.clone());

    // Every route of the router, with the methods it serves, is in the document.
    let routes = router_paths(&router);
    let mut missing = Vec::new();
    for route in &routes {
        let openapi_path = route.replace("{*", "{");
        let served = served_methods(fixture, &concrete(route))
            .await
            .unwrap_or_else(|| panic!("the router's own route {route} answers 404"));
        match documented_methods(doc, &openapi_path) {
            Some(documented) if documented == served => {}
            Some(documented) => missing.push(format!(
                "{route}: served {served:?}, documented {documented:?}"
            )),
            None => missing.push(format!("{route}: served {served:?}, not documented")),
        }
    }
    assert!(
        missing.is_empty(),
        "routes served but not described:\n{}",
        missing.join("\n")
    );

    // Every path of the document is served, with exactly its methods.
    let paths: Vec<&String> = doc["paths"].as_object().expect("paths").keys().collect();
    for path in &paths {
        let served = served_methods(fixture, &concrete(path)).await;
        assert_eq!(
            served,
            documented_methods(doc, path),
            "{path}: the methods served and documented differ"
        );
    }
    assert_eq!(
        routes.len(),
        paths.len(),
        "router paths {routes:?}, documented {paths:?}"
    );
    eprintln!(
        "{} paths, {} operations, served and documented alike",
        paths.len(),
        paths
            .iter()
            .filter_map(|p| documented_methods(doc, p))
            .map(|m| m.len())
            .sum::<usize>()
    );

    // A path no route serves is a 404, as the document says.
    assert_eq!(served_methods(fixture, "/no/such/route").await, None);
}

/// One real answer, to check against the document.
struct Case {
    name: String,
    /// The document's path template and method of the operation that answered.
    path: &'static str,
    method: &'static str,
    /// Whether the instance must validate (one case must not: the check can fail).
    valid: bool,
    status: StatusCode,
    content_type: Option<String>,
    body: Vec<u8>,
}

impl Case {
    /// A real answer of the operation at `path` and `method`, which must validate.
    fn of(name: String, path: &'static str, method: &'static str, reply: Reply) -> Case {
        Case {
            name,
            path,
            method,
            valid: true,
            status: reply.status,
            content_type: reply.content_type,
            body: reply.body,
        }
    }
}

/// The JSON pointer of the schema the document gives for `case`'s answer, after checking that
/// the status is documented for the operation, and the media type when there is a body.
fn schema_pointer(doc: &Value, case: &Case) -> Option<String> {
    let escape = |s: &str| s.replace('~', "~0").replace('/', "~1");
    let op = format!("/paths/{}/{}", escape(case.path), case.method);
    let status = case.status.as_str();
    let mut response_at = format!("{op}/responses/{status}");
    let mut response = doc
        .pointer(&response_at)
        .unwrap_or_else(|| panic!("{}: status {status} is not documented at {op}", case.name));
    if let Some(reference) = response.get("$ref").and_then(Value::as_str) {
        response_at = reference.trim_start_matches('#').to_owned();
        response = doc
            .pointer(&response_at)
            .expect("a response reference resolves");
    }
    if case.body.is_empty() {
        return None;
    }
    let essence = |m: &str| {
        m.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    };
    let actual = essence(case.content_type.as_deref().unwrap_or(""));
    let content = response["content"]
        .as_object()
        .unwrap_or_else(|| panic!("{}: a body, but none is documented", case.name));
    let media = content
        .keys()
        .find(|m| essence(m) == actual)
        .unwrap_or_else(|| {
            panic!(
                "{}: content type {actual} answered, {:?} documented",
                case.name,
                content.keys().collect::<Vec<_>>()
            )
        });
    Some(format!("{response_at}/content/{}/schema", escape(media)))
}

/// Validates every case's instance against its schema, inside the document (so references
/// resolve), with Python's `jsonschema` (Draft 2020-12, OpenAPI 3.1's dialect).
const VALIDATE_INSTANCES: &str = r#"
import json, sys
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
doc = json.load(open(sys.argv[1]))
cases = json.load(open(sys.argv[2]))
registry = Registry().with_resource("urn:kres-api", DRAFT202012.create_resource(doc))
wrong = 0
for case in cases:
    validator = Draft202012Validator({"$ref": "urn:kres-api#" + case["schema"]}, registry=registry)
    errors = [f"{e.message} at {list(e.absolute_path)}" for e in validator.iter_errors(case["instance"])]
    if bool(errors) == case["valid"]:
        wrong += 1
        print(f"{case['name']}: expected {'valid' if case['valid'] else 'invalid'}: {errors}")
    else:
        print(f"{case['name']}: as expected ({len(errors)} errors)")
sys.exit(1 if wrong else 0)
"#;

/// The requests whose answers are checked, each with the document's path template and method
/// of the operation that answers it; `etag` is the running configuration's.
fn documented_requests(etag: &str) -> Vec<(&'static str, &'static str, Request<Body>)> {
    let with = with_headers;
    let json_type = [("content-type", "application/json")];
    vec![
        ("/", "get", request("GET", "/")),
        ("/processes", "get", request("GET", "/processes")),
        (
            "/processes/{kind}",
            "get",
            request("GET", "/processes/kresd"),
        ),
        ("/processes/{kind}", "get", request("GET", "/processes/gc")),
        (
            "/processes/{kind}",
            "get",
            request("GET", "/processes/nope"),
        ),
        ("/upgrade", "get", request("GET", "/upgrade")),
        ("/rpz", "get", request("GET", "/rpz")),
        ("/v1/config", "get", request("GET", "/v1/config")),
        ("/v1/config", "head", request("HEAD", "/v1/config")),
        (
            "/v1/config",
            "get",
            with("GET", "/v1/config", &[("if-none-match", etag)], ""),
        ),
        (
            "/v1/config",
            "get",
            with("GET", "/v1/config", &[("if-match", "\"other\"")], ""),
        ),
        (
            "/v1/config/{pointer}",
            "get",
            request("GET", "/v1/config/workers"),
        ),
        (
            "/v1/config/{pointer}",
            "get",
            request("GET", "/v1/config/no/such"),
        ),
        (
            "/v1/config",
            "put",
            with("PUT", "/v1/config", &json_type, r#"{"workers": "many"}"#),
        ),
        (
            "/v1/config",
            "put",
            with("PUT", "/v1/config", &[("content-type", "text/html")], "<p>"),
        ),
        (
            "/v1/config",
            "put",
            with("PUT", "/v1/config?dry-run=maybe", &json_type, "{}"),
        ),
        (
            "/v1/config/{pointer}",
            "delete",
            request("DELETE", "/v1/config/no/such"),
        ),
        (
            "/v1/config",
            "patch",
            with(
                "PATCH",
                "/v1/config",
                &json_type,
                r#"[{"op": "test", "path": "/workers", "value": 99}]"#,
            ),
        ),
        ("/livez", "get", request("GET", "/livez")),
        ("/readyz", "get", request("GET", "/readyz")),
        ("/schema", "get", request("GET", "/schema")),
        ("/schema/ui", "get", request("GET", "/schema/ui")),
        ("/openapi.json", "get", request("GET", "/openapi.json")),
        ("/metrics", "get", request("GET", "/metrics")),
        (
            "/cache/clear",
            "post",
            with("POST", "/cache/clear", &json_type, "{"),
        ),
    ]
}

/// What the answers are, beyond their schemas; the process table listed.
fn check_what_they_are(cases: &[Case]) -> Value {
    let status_of = |name: &str| {
        cases
            .iter()
            .find(|c| c.name.starts_with(name))
            .map(|c| c.status.as_u16())
    };
    assert_eq!(status_of("PUT /v1/config?dry-run=maybe"), Some(400));
    assert_eq!(status_of("GET /processes/nope"), Some(400));
    assert_eq!(status_of("PATCH /v1/config"), Some(409));
    let rejection = cases
        .iter()
        .find(|c| c.name.starts_with("PUT /v1/config →") && c.status == StatusCode::BAD_REQUEST)
        .expect("the invalid configuration is refused");
    // Upstream's header, once.
    let text = String::from_utf8_lossy(&rejection.body);
    assert!(
        text.starts_with("Configuration validation error")
            && text.matches("validation error").count() == 1,
        "{text}"
    );
    let processes = cases
        .iter()
        .find(|c| c.name.starts_with("GET /processes →"))
        .expect("processes");
    let listed: Value = serde_json::from_slice(&processes.body).expect("JSON");
    assert_eq!(listed.as_array().map(Vec::len), Some(5), "{listed}");
    // The manager's entry alone carries its failures (validated against the schema above).
    let manager = &listed[4];
    assert_eq!(manager["failures"]["process_failures"], 2, "{manager}");
    assert!(listed[0].get("failures").is_none(), "{listed}");
    listed
}

/// Validate every case's instance against its schema in `doc` (files written in `dir`).
fn validate_against(doc: &Value, cases: &[Case], dir: &Path) {
    let mut checks = Vec::new();
    for case in cases {
        let Some(schema) = schema_pointer(doc, case) else {
            continue;
        };
        let is_json = case
            .content_type
            .as_deref()
            .is_some_and(|t| t.starts_with("application/json"));
        let instance = if is_json {
            serde_json::from_slice(&case.body)
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", case.name))
        } else {
            Value::String(String::from_utf8_lossy(&case.body).into_owned())
        };
        checks.push(json!({
            "name": case.name, "schema": schema, "instance": instance, "valid": case.valid,
        }));
    }
    let doc_file = dir.join("openapi.json");
    let cases_file = dir.join("cases.json");
    std::fs::write(&doc_file, serde_json::to_vec(doc).expect("JSON")).expect("write");
    std::fs::write(&cases_file, serde_json::to_vec(&checks).expect("JSON")).expect("write");
    let output = python(&[
        "-c",
        VALIDATE_INSTANCES,
        path_str(&doc_file),
        path_str(&cases_file),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!(
        "{} answers checked against their schemas:\n{stdout}",
        checks.len()
    );
    assert!(
        output.status.success(),
        "answers that do not match the document:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn answers_match_their_documented_schemas() {
    let mut fixture = fixture().await;
    let doc = document();
    let etag = fixture
        .send(request("GET", "/v1/config"))
        .await
        .etag
        .expect("ETag");
    let mut cases = Vec::new();
    for (path, method, request) in documented_requests(&etag) {
        let name = format!("{} {}", request.method(), request.uri());
        let reply = fixture.send(request).await;
        cases.push(Case::of(
            format!("{name} → {}", reply.status),
            path,
            method,
            reply,
        ));
    }
    // Dry runs, planned by the real planner: a scale-down rolls the workers, a change of views
    // only resets their rules.
    for (uri, body) in [
        ("/v1/config/workers?dry-run=true", "1"),
        (
            "/v1/config/views?dry-run=true",
            r#"[{"subnets": ["192.0.2.0/24"], "answer": "refused"}]"#,
        ),
    ] {
        let request = with_body("PUT", uri, "application/json", body);
        let reply = dry_run(&mut fixture, request).await;
        let name = format!("PUT {uri} → {}", reply.status);
        cases.push(Case::of(name, "/v1/config/{pointer}", "put", reply));
    }
    let plans: Vec<Value> = cases
        .iter()
        .filter(|c| c.name.contains("dry-run=true"))
        .map(|c| serde_json::from_slice(&c.body).expect("a plan"))
        .collect();
    assert_eq!(plans[0]["workers"]["action"], "restart", "{}", plans[0]);
    assert_eq!(plans[1]["workers"]["action"], "rules-reset", "{}", plans[1]);

    // The event stream never ends: its head only.
    let events = fixture.respond(request("GET", "/events")).await;
    assert_eq!(events.status(), StatusCode::OK);
    let events_type = events
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    assert_eq!(events_type.as_deref(), Some("text/event-stream"));
    assert!(
        doc["paths"]["/events"]["get"]["responses"]["200"]["content"]
            .get("text/event-stream")
            .is_some(),
        "the event stream's media type is documented"
    );
    drop(events);

    let listed = check_what_they_are(&cases);

    // A process entry without its name must fail its schema: the check can fail.
    let mut nameless = listed[0].clone();
    nameless.as_object_mut().expect("object").remove("name");
    cases.push(Case {
        name: "a process entry without its name".into(),
        path: "/processes",
        method: "get",
        valid: false,
        status: StatusCode::OK,
        content_type: Some("application/json".into()),
        body: serde_json::to_vec(&json!([nameless])).expect("JSON"),
    });
    // An RPZ zone as the tally serializes it, with its expiry, matches `/rpz`'s schema; an
    // expiry that is not a time does not (the field is documented, as a number).
    let zone = RpzZone {
        zone: "block.rpz.".into(),
        file: "/var/rpz/block.rpz".into(),
        primaries: vec!["192.0.2.53:53".into()],
        serial: Some(8),
        last_transfer: None,
        last_success: Some(1_700_000_000.0),
        next_refresh: Some(1_700_000_300.0),
        expires: Some(1_700_086_400.0),
        expired: false,
        broken: None,
    };
    let zone = serde_json::to_value(&zone).expect("JSON");
    assert_eq!(zone["expires"], 1_700_086_400.0, "{zone}");
    let mut untimed = zone.clone();
    untimed["expires"] = json!("tomorrow");
    for (name, instance, valid) in [
        ("an RPZ zone with its expiry", zone, true),
        ("an RPZ zone expiring at no time", untimed, false),
    ] {
        cases.push(Case {
            name: name.into(),
            path: "/rpz",
            method: "get",
            valid,
            status: StatusCode::OK,
            content_type: Some("application/json".into()),
            body: serde_json::to_vec(&json!([instance])).expect("JSON"),
        });
    }
    // A configuration the validator refuses must fail the embedded schema too.
    cases.push(Case {
        name: "a configuration with workers: many".into(),
        path: "/v1/config",
        method: "get",
        valid: false,
        status: StatusCode::OK,
        content_type: Some("application/json".into()),
        body: br#"{"workers": "many"}"#.to_vec(),
    });

    validate_against(doc, &cases, &fixture.dir.0);
}

/// The records `/events` sends are what the document's `EventRecord` says, and a record of
/// an unknown kind is not.
#[tokio::test]
async fn event_records_match_their_documented_schema() {
    use kres_daemon::events::{Event, EventLog, Record};
    let fixture = fixture().await;
    let log = EventLog::new("1");
    let mut follower = log
        .follow(None, kres_daemon::events::FollowerClass::Ordinary)
        .expect("a follower");
    let published = [
        Event::ProcessExited {
            name: "kresd0".into(),
            pid: 42,
            status: Some(ExitStatus::Signaled {
                signal: 9,
                core_dumped: false,
            }),
        },
        Event::ProcessSpawned {
            name: "kresd1".into(),
            pid: 43,
        },
        Event::Draining,
    ];
    for event in published.clone() {
        log.publish(event);
    }
    let mut instances = Vec::new();
    for _ in &published {
        let record = follower.next().await.expect("a record");
        assert!(record.id.is_some(), "published records have ids");
        instances.push(serde_json::to_value(&*record).expect("JSON"));
    }
    instances.push(serde_json::to_value(Record::notice(Event::Stopping)).expect("JSON"));
    let missed = Event::EventsMissed {
        last_event_id: "0-7".into(),
        reason: "gone from the log".into(),
    };
    instances.push(serde_json::to_value(Record::notice(missed)).expect("JSON"));
    let schema = "/components/schemas/EventRecord";
    let mut checks: Vec<Value> = instances
        .iter()
        .enumerate()
        .map(|(i, instance)| {
            json!({"name": format!("record {i}: {instance}"), "schema": schema,
                   "instance": instance, "valid": true})
        })
        .collect();
    checks.push(
        json!({"name": "a record of no known kind", "schema": schema,
        "instance": {"id": "1-1", "time": 1.5, "kind": "no-such-kind"}, "valid": false}),
    );
    checks.push(
        json!({"name": "a record without its time", "schema": schema,
        "instance": {"kind": "draining"}, "valid": false}),
    );
    let doc_file = fixture.dir.0.join("openapi-events.json");
    let cases_file = fixture.dir.0.join("events-cases.json");
    std::fs::write(&doc_file, serde_json::to_vec(document()).expect("JSON")).expect("write");
    std::fs::write(&cases_file, serde_json::to_vec(&checks).expect("JSON")).expect("write");
    let output = python(&[
        "-c",
        VALIDATE_INSTANCES,
        path_str(&doc_file),
        path_str(&cases_file),
    ]);
    assert!(
        output.status.success(),
        "event records that do not match the document:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        document()["paths"]["/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
            ["schema"]["properties"]["data"]["contentSchema"],
        json!({"$ref": "#/components/schemas/EventRecord"})
    );
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}
