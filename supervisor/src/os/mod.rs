//! Every raw system call the supervisor makes, in one place, one file per purpose: processes
//! (subreaper, reaping, signals), spawning, descriptors, packets, sealed memory files, locks,
//! sockets and their steering programs, resource limits, private unix binds. The rest of the
//! crate sees typed results only; this folder is the only one that allows `unsafe`, each
//! block with its reason.
#![allow(unsafe_code)]

mod bpf;
mod descriptors;
mod limits;
mod locks;
mod memfd;
mod packets;
mod process;
mod sockets;
mod spawn;
mod unix_bind;

pub use bpf::{attach_reuseport_program, detach_reuseport_program};
pub use descriptors::{
    check_open, clear_cloexec, cloexec_inherited_fds, doorbell_pipe, duplicate_raw, set_cloexec,
    set_nonblocking, take_inherited_fd, MAX_PASSED_FDS,
};
pub use limits::{open_files_limit, raise_open_files_limit, OpenFilesLimit};
pub use locks::try_lock_exclusive;
pub use memfd::sealed_memfd;
pub use packets::{
    packet_capacity, recv_packet, send_packet, seqpacket_pair, size_packet_buffers, Packet,
    MAX_PACKET_FDS,
};
pub use process::{become_subreaper, group_exists, is_pid1, reap_one, signal_group};
pub use sockets::{peer_groups, queued, socket_group, socket_inode, SocketType};
pub use spawn::{spawn, FdPass, Spawned};
pub use unix_bind::{bind_unix_private, bound_for, SocketAccess};
