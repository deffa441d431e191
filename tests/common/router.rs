//! The management API's router without a socket, shared by the tests that call `app(state)`
//! through `tower::ServiceExt::oneshot` (`api_router.rs`, `api_openapi.rs`): the state, the
//! manager's end of its command channel (the test plays the manager), the configuration's
//! sender, what stands behind the state's `SupervisorHandle`, and the requests and replies.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::Response;
use http_body_util::BodyExt;
use kres_config::LoadedConfig;
use kres_daemon::api::{app, ApiState};
use kres_daemon::events::EventLog;
use kres_daemon::manager::handle::ManagerCommand;
use kres_daemon::manager::ManagerHandle;
use kres_wire::failures::ProcessFailureRecord;
use kres_wire::upgrade::UpgradeRecord;
use serde_json::Value;
use supervisor::remote::{Link, Parent, ToChild};
use supervisor::{Snapshot, Supervisor, SupervisorHandle, SupervisorOptions};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// A private directory per fixture, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "kres-api-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("cache")).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What stands behind the state's `SupervisorHandle`.
pub enum Supervision {
    /// A real supervisor without children: `POST /drain` and the probes work on its table. It
    /// reaps every child of the test process, so the test starts none.
    Local,
    /// The kind of handle the manager process holds, over a link whose other end the fixture
    /// holds and on which it sent this table. No supervisor runs, so the test may run child
    /// processes.
    Remote(Snapshot),
}

/// What keeps the state's `SupervisorHandle` answering.
enum Keeper {
    /// The supervisor itself, and its actor.
    Local(SupervisorHandle, supervisor::runner::ActorTask),
    /// The root's end of the link, and the manager's end the handle talks through.
    Remote(Link, Parent),
}

/// What the state says of the daemon's past, for the routes that show it.
#[derive(Default)]
pub struct History {
    /// How the last in-place upgrade ended (`GET /upgrade`).
    pub upgrade: Option<UpgradeRecord>,
    /// The manager process's failures before this incarnation (`/processes`).
    pub process_failures: Option<ProcessFailureRecord>,
}

/// The router's world: the state, the ends of the channels the handlers talk to.
pub struct Fixture {
    pub state: ApiState,
    /// The manager's end of its command channel: the test answers what it receives.
    pub commands: mpsc::Receiver<ManagerCommand>,
    /// The running configuration, as the manager publishes it.
    pub config: watch::Sender<Arc<LoadedConfig>>,
    /// Keeps the supervisor handle answering.
    _keeper: Keeper,
    pub dir: TempDir,
}

impl Fixture {
    /// A fixture whose configuration runs `workers` workers, with `supervision` behind it.
    pub async fn new(workers: u32, supervision: Supervision, history: History) -> Fixture {
        let dir = TempDir::new();
        let file = dir.0.join("config.yaml");
        std::fs::write(
            &file,
            format!(
                "workers: {workers}\nrundir: {run}\ncache:\n  storage: {run}/cache\nmanagement:\n  unix-socket: {run}/api.sock\n",
                run = dir.0.display()
            ),
        )
        .expect("config");
        let loaded =
            kres_config::load_files(&[file], kres_config::PathChecks::Strict, Default::default())
                .expect("valid config");
        let (supervisor, keeper) = match supervision {
            Supervision::Local => {
                let (supervisor, actor) = Supervisor::start(SupervisorOptions {
                    notify_socket: dir.0.join("notify"),
                    notify_senders: None,
                    line_levels: supervisor::output::levels_by_stream,
                })
                .expect("supervisor");
                (supervisor.clone(), Keeper::Local(supervisor, actor))
            }
            Supervision::Remote(table) => {
                let (root, parent) = remote(&dir, table).await;
                (parent.handle.clone(), Keeper::Remote(root, parent))
            }
        };
        let (config, config_rx) = watch::channel(Arc::new(loaded));
        let (manager, commands) = mpsc::channel(4);
        let state = ApiState {
            supervisor,
            stop: CancellationToken::new(),
            manager: ManagerHandle::new(manager, config_rx),
            fault_injection: kres_daemon::api::fault::FaultInjection::Off,
            validation: kres_config::ValidationContext {
                resolve_root: dir.0.clone(),
                checks: kres_config::PathChecks::Manager,
                logtarget_arg: Default::default(),
            },
            rendered: Default::default(),
            guard: Default::default(),
            upgrade: history.upgrade.map(Arc::new),
            process_failures: history.process_failures.map(Arc::new),
            events: EventLog::new("test"),
            control_plane: Default::default(),
            kresd_version: Default::default(),
            query_log: Default::default(),
            heavy: Default::default(),
            fleet: None,
            rpz_lists: kres_daemon::rpz::lists::ListsHandle::new().0,
        };
        Fixture {
            state,
            commands,
            config,
            _keeper: keeper,
            dir,
        }
    }

    /// Send one request; no manager answers. The response as it comes (its body may be a
    /// stream that never ends).
    pub async fn respond(&self, request: Request<Body>) -> Response {
        app(self.state.clone())
            .oneshot(request)
            .await
            .expect("infallible")
    }

    /// Send one request; no manager answers.
    pub async fn send(&self, request: Request<Body>) -> Reply {
        Reply::read(self.respond(request).await).await
    }

    /// Send one request, and answer the one command it sends the manager with `answer`
    /// (given the command and the configuration's sender). Returns the reply and what
    /// `answer` returned.
    pub async fn with_manager<T>(
        &mut self,
        request: Request<Body>,
        answer: impl FnOnce(ManagerCommand, &watch::Sender<Arc<LoadedConfig>>) -> T,
    ) -> (Reply, T) {
        let router = app(self.state.clone());
        let config = &self.config;
        let commands = &mut self.commands;
        let manager = async move {
            let command = commands.recv().await.expect("a command for the manager");
            answer(command, config)
        };
        let (response, answered) = tokio::join!(router.oneshot(request), manager);
        (Reply::read(response.expect("infallible")).await, answered)
    }
}

/// A handle of the manager process's kind: the link's root end sends the welcome and `table`.
async fn remote(dir: &TempDir, table: Snapshot) -> (Link, Parent) {
    let (root, theirs) = Link::pair().expect("link");
    let welcome = ToChild::Welcome {
        incarnation: 1,
        notify_socket: dir.0.join("notify"),
        stored: 0,
    };
    root.send(&welcome, &[]).await.expect("welcome");
    root.send(&ToChild::Snapshot(Arc::new(table)), &[])
        .await
        .expect("snapshot");
    let parent = Parent::connect(Link::from_fd(theirs).expect("link"))
        .await
        .expect("connect");
    (root, parent)
}

/// An answer, read whole.
pub struct Reply {
    pub status: StatusCode,
    pub etag: Option<String>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

impl Reply {
    pub async fn read(response: Response) -> Reply {
        let status = response.status();
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v: &axum::http::HeaderValue| v.to_str().ok())
                .map(str::to_owned)
        };
        let etag = header("etag");
        let content_type = header("content-type");
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .to_vec();
        Reply {
            status,
            etag,
            content_type,
            body,
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }
}

/// A request without a body.
pub fn request(method: &str, uri: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .expect("request")
}

/// A request with `headers` and `body`.
pub fn with_headers(
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Body::from(body.to_owned())).expect("request")
}

/// A request with a body of `content_type`.
pub fn with_body(method: &str, uri: &str, content_type: &str, body: &str) -> Request<Body> {
    with_headers(method, uri, &[("content-type", content_type)], body)
}

/// A request with a JSON body.
pub fn json_body(method: &str, uri: &str, body: Value) -> Request<Body> {
    with_body(method, uri, "application/json", &body.to_string())
}
