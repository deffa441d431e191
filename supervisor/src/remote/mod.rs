//! The supervisor across a process boundary. A service that directs other services (the
//! resolver's manager) runs as a child of the supervisor's process and commands it through a
//! [`SupervisorHandle`] like any in-process caller; the calls travel over a `SOCK_SEQPACKET`
//! link, descriptors with them (`SCM_RIGHTS`). If that child crashes, hangs or is killed,
//! the supervisor and every service it started stay up; the next incarnation is welcomed with
//! what the last one stored (an fd store, like systemd's `FDSTORE=1`) and the current process
//! table, and adopts them.
//!
//! The parent's side ([`serve_child`]) parses only small, bounded JSON messages of a closed
//! set and executes them on its own handle; it never interprets what is stored.
//!
//! Every message the parent sends fits what the link carries: the link's buffers are sized
//! for [`MAX_MESSAGE`] when it is made, free text is cut where it is received
//! ([`crate::text`]), and a process table of any size goes in parts of at most
//! [`TABLE_PART`] bytes. A message that still cannot be sent ends serving that incarnation
//! with [`ChildEnd::LinkFailed`], which says why.
//!
//! One file per part: [`wire`] (the link and its messages), [`fd_store`], [`policy`] (what a
//! child may ask), [`table`] (the process table in parts), [`parent_side`] (serving a child)
//! and [`child_side`] (a child's handle on its parent).

use std::time::Duration;

mod child_side;
mod fd_store;
mod parent_side;
mod policy;
mod table;
mod wire;

pub use child_side::{LinkTask, Parent};
pub use fd_store::{FdStore, StoreRefused};
pub use parent_side::{
    serve_child, ChildEnd, ChildService, LinkFailure, Misbehaviour, ReexecRefused, ReexecRequest,
};
pub use policy::{ChildPolicy, EnvironmentPolicy, MAX_EXTENSION};
pub use table::{table_messages, TableAssembly};
pub use wire::{Link, ToChild, ToParent};

/// Largest message on the link, either way.
pub const MAX_MESSAGE: usize = 256 * 1024;
/// The most entries the fd store keeps.
pub const MAX_STORED: usize = 8192;
/// The longest name of a stored descriptor.
pub const MAX_NAME: usize = 256;
/// The longest status text passed upward (and kept in snapshots).
pub use crate::text::MAX_STATUS;
/// The most bytes of processes one message of a process table carries: far below what any
/// link carries (the default send buffer takes packets of 212,960 bytes), so a table of any
/// size goes over in parts ([`ToChild::SnapshotPart`]).
pub const TABLE_PART: usize = 64 * 1024;
/// What a message of a table takes beside its processes (the envelope and the table's flags),
/// at most.
const TABLE_ENVELOPE: usize = 256;
/// The most processes a table assembled from parts may have.
const MAX_TABLE_PROCESSES: usize = 1 << 16;
/// How often the parent asks the child whether it is alive.
pub const PING_INTERVAL: Duration = Duration::from_secs(5);
