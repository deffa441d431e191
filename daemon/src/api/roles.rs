//! Who may do what through the API: two roles, *read-only* and *admin*, and the one table
//! that says which requests only read. Everything not in that table needs the admin role, so
//! a route added later is closed to readers until someone lists it here.
//!
//! Reads that show personal data — a client's address, or the queries of one client
//! (`/query-log`, `/query-log/stream`, `/top/clients`, `/trace`) — need the admin role too
//! ([`PERSONAL_ROUTES`]): the read-only role is what monitoring gets (the Helm chart hands its
//! token to Prometheus), and monitoring is no reason to hold who asked what. Counts without
//! addresses (`/top/names`, `/query-log/status`, the metrics) stay readable.
//!
//! Over the unix socket the role comes from the peer's credentials (the kernel's, not what a
//! request says): root, the daemon's own uid and members of the admin group are admins,
//! members of the read-only group readers. The groups come from the command line
//! (`--api-admin-group`, `--api-read-only-group`) or the environment, never from the
//! configuration, which the API itself can change. Without either group everyone who can
//! connect is an admin, as under upstream's manager, whose socket only its file mode guards.
//! Over TCP the role comes from the bearer token (`api::guard`).

use axum::http::Method;

use super::server::Peer;

/// What a client may do. `ReadOnly < Admin`: an admin may do whatever a reader may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// `GET`/`HEAD` of the routes in [`READ_ROUTES`].
    ReadOnly,
    /// Everything.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::ReadOnly => "read-only",
            Role::Admin => "admin",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A path, or every path below a prefix.
enum Route {
    Exact(&'static str),
    /// Paths that start with this (which ends with `/`).
    Below(&'static str),
}

/// The routes a `GET` or `HEAD` of which only reads. Nothing else is a read.
const READ_ROUTES: &[Route] = &[
    Route::Exact("/"),
    Route::Exact("/v1/config"),
    Route::Below("/v1/config/"),
    Route::Exact("/schema"),
    Route::Exact("/schema/ui"),
    Route::Exact("/openapi.json"),
    Route::Exact("/livez"),
    Route::Exact("/readyz"),
    Route::Exact("/upgrade"),
    Route::Exact("/processes"),
    Route::Below("/processes/"),
    Route::Exact("/events"),
    Route::Exact("/metrics"),
    Route::Exact("/metrics/json"),
    Route::Exact("/metrics/prometheus"),
    Route::Exact("/rpz"),
    Route::Exact("/rpz/lists"),
    Route::Exact("/rpz/check"),
    Route::Exact("/query-log/status"),
    Route::Below("/top/"),
    Route::Exact("/upstreams"),
    Route::Exact("/fleet"),
    Route::Exact("/ui/whoami"),
];

/// Reads that show client addresses or per-query rows: admin only, though they change
/// nothing. Checked before [`READ_ROUTES`] (`/top/clients` is below `/top/`).
const PERSONAL_ROUTES: &[Route] = &[
    Route::Exact("/query-log"),
    Route::Exact("/query-log/stream"),
    Route::Exact("/top/clients"),
    Route::Below("/trace/"),
];

/// Whether `path` is one of `routes`.
fn listed(routes: &[Route], path: &str) -> bool {
    routes.iter().any(|route| match route {
        Route::Exact(p) => path == *p,
        Route::Below(prefix) => path.starts_with(prefix),
    })
}

/// Whether a request for `path` reads personal data (client addresses, per-query rows),
/// which only the admin role may ([`PERSONAL_ROUTES`]).
pub fn personal(path: &str) -> bool {
    listed(PERSONAL_ROUTES, path)
}

/// The files of the status page (`api::ui`): they carry no data, so any client the guard
/// lets through on Host and Origin gets them, with no token and no role (a browser loads the
/// page before it can ask for the token).
const PUBLIC_ROUTES: &[&str] = &["/ui", "/ui/app.js", "/ui/app.css", "/ui/favicon.svg"];

/// Whether a request reads a file of the status page, which needs no role.
pub fn public(method: &Method, path: &str) -> bool {
    (method == Method::GET || method == Method::HEAD) && PUBLIC_ROUTES.contains(&path)
}

/// The role a request needs: [`Role::ReadOnly`] for a `GET` or `HEAD` of a route in
/// [`READ_ROUTES`] that is not [`personal`], [`Role::Admin`] for anything else.
pub fn needed(method: &Method, path: &str) -> Role {
    let reads = (method == Method::GET || method == Method::HEAD)
        && !personal(path)
        && listed(READ_ROUTES, path);
    if reads {
        Role::ReadOnly
    } else {
        Role::Admin
    }
}

/// The groups whose members get a role on the unix socket, as group ids.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApiGroups {
    /// `--api-admin-group`.
    pub admin: Option<u32>,
    /// `--api-read-only-group`.
    pub read_only: Option<u32>,
}

impl ApiGroups {
    /// Whether any group was given: then peers in neither group have no role.
    pub fn any(&self) -> bool {
        self.admin.is_some() || self.read_only.is_some()
    }

    /// The group the API's socket file belongs to, so that the members can connect: the
    /// read-only group (admins are usually readers too), else the admin group.
    pub fn socket_group(&self) -> Option<u32> {
        self.read_only.or(self.admin)
    }
}

/// How peers of the unix socket get their role.
#[derive(Debug, Clone, Default)]
pub struct UnixRoles {
    pub groups: ApiGroups,
    /// The daemon's own uid (besides root, always an admin).
    pub own_uid: u32,
}

impl UnixRoles {
    /// The roles for a daemon running as `own_uid`.
    pub fn new(groups: ApiGroups, own_uid: u32) -> UnixRoles {
        UnixRoles { groups, own_uid }
    }

    /// The role of a peer of the unix socket, `None` when it has none. Without groups every
    /// peer is an admin; with them a peer whose credentials the kernel did not give (or a
    /// request with no peer at all) has no role.
    pub fn role_of(&self, peer: Option<&Peer>) -> Option<Role> {
        if !self.groups.any() {
            return Some(Role::Admin);
        }
        let Some(Peer::Unix {
            uid, gid, groups, ..
        }) = peer
        else {
            return None;
        };
        let member = |group: Option<u32>| group.is_some_and(|g| *gid == g || groups.contains(&g));
        if *uid == 0 || *uid == self.own_uid || member(self.groups.admin) {
            Some(Role::Admin)
        } else if member(self.groups.read_only) {
            Some(Role::ReadOnly)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn only_listed_reads_are_reads() {
        let rows: &[(Method, &str, Role)] = &[
            (Method::GET, "/", Role::ReadOnly),
            (Method::HEAD, "/v1/config", Role::ReadOnly),
            (Method::GET, "/v1/config/workers", Role::ReadOnly),
            (Method::GET, "/metrics/prometheus", Role::ReadOnly),
            (Method::GET, "/processes/kresd", Role::ReadOnly),
            (Method::GET, "/events", Role::ReadOnly),
            (Method::GET, "/upgrade", Role::ReadOnly),
            (Method::GET, "/query-log/status", Role::ReadOnly),
            (Method::GET, "/top/names", Role::ReadOnly),
            (Method::HEAD, "/top/servfail", Role::ReadOnly),
            // Client addresses and per-query rows: admin only, though reads.
            (Method::GET, "/query-log", Role::Admin),
            (Method::HEAD, "/query-log", Role::Admin),
            (Method::GET, "/query-log/stream", Role::Admin),
            (Method::GET, "/top/clients", Role::Admin),
            (Method::GET, "/trace/example.com", Role::Admin),
            (Method::PUT, "/v1/config", Role::Admin),
            (Method::PATCH, "/v1/config/workers", Role::Admin),
            (Method::DELETE, "/v1/config/workers", Role::Admin),
            (Method::POST, "/upgrade", Role::Admin),
            (Method::POST, "/reload", Role::Admin),
            (Method::POST, "/cache/clear", Role::Admin),
            (Method::GET, "/trace/example.com/A", Role::Admin),
            (Method::OPTIONS, "/v1/config", Role::Admin),
            // A route nobody listed, even a GET, is closed to readers.
            (Method::GET, "/debug/panic-manager", Role::Admin),
            (Method::GET, "/v1/configuration", Role::Admin),
            (Method::GET, "/metricsx", Role::Admin),
            (Method::GET, "/ui/whoami", Role::ReadOnly),
            (Method::POST, "/ui/whoami", Role::Admin),
        ];
        for (method, path, role) in rows {
            assert_eq!(needed(method, path), *role, "{method} {path}");
        }
        assert!(public(&Method::GET, "/ui/app.js"));
        assert!(public(&Method::HEAD, "/ui"));
        assert!(!public(&Method::POST, "/ui"));
        assert!(!public(&Method::GET, "/ui/whoami"));
        assert!(!public(&Method::GET, "/ui/"));
    }

    fn unix(uid: u32, gid: u32, groups: &[u32]) -> Peer {
        Peer::Unix {
            uid,
            gid,
            pid: Some(1),
            groups: Arc::from(groups),
        }
    }

    #[test]
    fn roles_of_unix_peers() {
        let open = UnixRoles::new(ApiGroups::default(), 995);
        assert_eq!(
            open.role_of(Some(&unix(1000, 1000, &[]))),
            Some(Role::Admin)
        );
        assert_eq!(open.role_of(None), Some(Role::Admin));
        let roles = UnixRoles::new(
            ApiGroups {
                admin: Some(10),
                read_only: Some(20),
            },
            995,
        );
        let rows: &[(Peer, Option<Role>)] = &[
            (unix(0, 0, &[]), Some(Role::Admin)),
            (unix(995, 995, &[]), Some(Role::Admin)),
            (unix(1000, 10, &[]), Some(Role::Admin)),
            (unix(1000, 1000, &[30, 10]), Some(Role::Admin)),
            (unix(1000, 1000, &[10, 20]), Some(Role::Admin)),
            (unix(1000, 20, &[]), Some(Role::ReadOnly)),
            (unix(1000, 1000, &[20]), Some(Role::ReadOnly)),
            (unix(1000, 1000, &[30]), None),
            (Peer::Unknown, None),
            (Peer::Tcp("127.0.0.1:1".parse().expect("addr")), None),
        ];
        for (peer, role) in rows {
            assert_eq!(roles.role_of(Some(peer)), *role, "{peer}");
        }
        assert_eq!(roles.role_of(None), None);
    }
}
