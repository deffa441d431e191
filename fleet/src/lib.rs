//! The store a fleet of resolvers shares its configuration through: a small etcd v3 client
//! with exactly the calls a fleet needs; the daemon's `fleet` module follows a fleet with it
//! (kresctl does not link it: it asks a node's API).
//!
//! What it gives ([`Store`]):
//! - [`Store::get`]: a key's value and modification revision, and the store's revision;
//! - [`Store::put_if`]: a compare-and-swap in one transaction (the key's modification
//!   revision, or create-only), giving the new revision or [`Error::Conflict`] with the
//!   current one;
//! - [`Store::watch`]: the changes under a prefix from a revision on, resumed across lost
//!   members, with compaction reported apart ([`WatchEvent::Compacted`]: read it all again);
//! - [`Store::grant_lease`], [`Store::keep_alive`], [`Store::put_with_lease`],
//!   [`Store::revoke_lease`]: records that go when their node stops renewing them.
//!
//! Every call is bounded in time (one timeout over all members tried: two members of three
//! down fails a write with [`Error::Timeout`] naming etcd's last refusal, never a hang) and
//! in size (a value over [`StoreOptions::max_value_bytes`], 16 MiB by default, is refused
//! with [`Error::TooLarge`] having read no more than that in base64 plus 64 KiB: a 20 MB
//! value read with the default bound peaked at 24.9 MB resident and was refused; with the
//! bound raised to take it, 54.8 MB). Everything
//! etcd answers is checked (JSON shape, base64, keys, revisions) with errors naming what was
//! read. Several endpoints fail over; TLS (a CA, a client certificate) and etcd's user and
//! password are options ([`StoreOptions`]).
//!
//! # Why etcd's JSON gateway and not the `etcd-client` crate
//!
//! Measured on this project's tree (Debian 12, etcd 3.4.23, Rust 1.95, release profile of
//! the workspace: `opt-level = "s"`, fat LTO, one codegen unit; 2 shared cores):
//!
//! | | `etcd-client` 0.17 (tonic 0.14), `tls` | this crate (JSON gateway over hyper) |
//! |---|---|---|
//! | needs at build time | `protoc` (its build script runs `tonic-prost-build` on etcd's `.proto` files; no vendored compiler: Debian's `protobuf-compiler`, or `protoc-bin-vendored` wired in by hand) | nothing new |
//! | crates new to `Cargo.lock` | 28 (tonic, tonic-build, tonic-prost(-build), prost-build, prost-types, h2, petgraph, pulldown-cmark, regex, prettyplease, multimap, tokio-stream, hyper-timeout, async-trait, pin-project, rustls, …) | 6, all TLS: rustls 0.23 on the ring already built for `domain` (no aws-lc, no system OpenSSL), rustls-webpki, rustls-pki-types, tokio-rustls, subtle, zeroize |
//! | a probe making every call here, TLS and auth on, built alone from scratch | 2.72 MB, 104 crates, 71 s | 2.23 MB, 55 crates, 50 s |
//!
//! etcd serves its v3 API as JSON on the client port (grpc-gateway: `/v3/kv/range`,
//! `/v3/kv/put`, `/v3/kv/txn`, `/v3/watch` as a stream of JSON lines, `/v3/lease/*`,
//! `/v3/auth/authenticate`) from 3.4 on, over HTTP/1.1 and TLS alike; every call the fleet
//! needs is there (a keep-alive is one request on its stream; a watch outlives the end of
//! its request body). `grpc-metadata-hasleader: true` makes a member cut off from the
//! leader refuse at once ("no leader") rather than hold a call.
//!
//! Cost in the daemon: linked in and used — measured on a release build of `knot-resolver`
//! whose `main` made every call here, TLS included — the binary grew from 8,095,520 to
//! 9,546,928 bytes (+1.45 MB; text +1.20 MB), most of it rustls and ring's TLS code. A
//! daemon without `fleet` never runs that code, so none of it becomes resident.
//!
//! What the gateway costs instead: a connection per call (no pool, no HTTP/2), which a
//! fleet's few calls afford; etcd's gRPC-only features (none needed) are out of reach.

#![forbid(unsafe_code)]

mod config;
mod error;
mod store;
mod transport;
mod watch;
mod wire;

pub use config::{
    ClientCert, Credentials, StoreOptions, TlsOptions, DEFAULT_MAX_VALUE_BYTES, DEFAULT_TIMEOUT,
    MAX_ENDPOINTS,
};
pub use error::{ConfigError, Error};
pub use store::{Also, Entry, Expect, Lease, Listing, Read, Store};
pub use watch::{Change, Watch, WatchEvent};
