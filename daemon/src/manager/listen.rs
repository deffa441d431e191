//! Listening sockets owned by the daemon. For every `network.listen` entry kresd accepts as a
//! descriptor (`kresd -S FD[:tls]`), the daemon binds one socket set per worker slot, all in one
//! `SO_REUSEPORT` group, and keeps them open for the life of the resolver. Worker N receives
//! slot N's sockets; when it restarts or crashes its sockets stay open, so queries wait in the
//! kernel's queue instead of being dropped or rehashed to a closed socket.
//!
//! **A slot's socket is index `slot` of its reuseport group**, by construction, because the
//! supervisor's steering programs (`supervisor::steering`) name sockets by that index. The
//! kernel orders a group by joining (UDP: `bind`, TCP: `listen`) and, when a socket closes,
//! moves the last one into its place. So: [`SocketTable::prepare`] binds slot after slot (a
//! new slot joins after every slot below it); slots are only ever removed from the top
//! (`workers` shrinks), and whatever order the removed ones close in, a swap only moves
//! sockets of removed slots, above every kept one; and a socket already bound for a slot is
//! kept when only its labels change (`IP_FREEBIND`, which only matters at `bind`, or plain TCP
//! becoming DoT on the same address), so a slot never gets a second socket in one group.
//! `tests::every_slot_is_its_index_in_the_group` proves it with packets.
//!
//! The table outlives any one incarnation of the manager task (it lives in the manager's
//! context), because the supervisor holds only descriptor numbers: a socket is closed only
//! when no registered worker was given it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use kres_config::types::InterfaceHost;
use kres_config::NetworkSchema;

/// Receive buffer of a UDP socket: room for a few seconds of queries while its worker
/// restarts (the kernel's default of ~200 KiB holds a fraction of a second at a few thousand
/// queries per second).
const UDP_RECEIVE_BUFFER: usize = 8 << 20;

/// Whether the capped receive buffer was already reported.
static CAPPED_LOGGED: AtomicBool = AtomicBool::new(false);

/// Backlog of a TCP listening socket (kresd calls `listen` again with its own).
const TCP_BACKLOG: i32 = 1024;

/// Who binds the listening sockets kresd accepts as descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketOwner {
    /// The daemon binds them and passes them with `-S` (the default), and steers their
    /// reuseport groups or not.
    Daemon(Steering),
    /// kresd binds them itself from the Lua configuration, as under upstream's manager
    /// (`--kresd-binds-sockets` or `KRES_KRESD_BINDS_SOCKETS=1`).
    Kresd,
}

/// Whether the supervisor steers the workers' reuseport groups to the workers that are ready
/// (`supervisor::steering`): a worker's index in every group is its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steering {
    /// New queries go only to ready workers; stops wait until the worker's queues drained.
    Live,
    /// The kernel's hash picks among all slots, live or not (`--no-steering`,
    /// `KRES_NO_STEERING=1`): a dead worker's share waits in its queue.
    Off,
}

/// How a descriptor is named on kresd's command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    /// Plain DNS over UDP: `-S FD`.
    Udp,
    /// Plain DNS over TCP: `-S FD`.
    Tcp,
    /// DNS over TLS: `-S FD:tls`.
    Tls,
}

/// One socket the configuration asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SocketKey {
    pub addr: SocketAddr,
    pub transport: Transport,
    /// `IP_FREEBIND`: bind an address that is not (yet) configured.
    pub freebind: bool,
}

impl SocketKey {
    /// Whether a socket bound for `self` is the one `other` needs: same address and same
    /// kind of socket (so the same reuseport group); the rest are labels.
    fn same_socket(&self, other: &SocketKey) -> bool {
        self.addr == other.addr
            && (self.transport == Transport::Udp) == (other.transport == Transport::Udp)
    }
}

impl std::fmt::Display for SocketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let proto = match self.transport {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Tls => "tls",
        };
        write!(f, "{}/{proto}", self.addr)
    }
}

/// A listening socket could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("cannot bind {key}: {source}")]
    Bind {
        key: SocketKey,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot list the addresses of interface '{name}': {source}")]
    Interfaces {
        name: String,
        #[source]
        source: nix::Error,
    },
    #[error("interface '{0}' has no IP address to listen on")]
    NoAddress(String),
    /// The root process could not hold the sockets: refused before anything is bound.
    #[error(
        "{workers} workers with {sockets} listening sockets each need about {needed} open \
         descriptors in the root process ({COPIES_PER_SOCKET} of each socket, \
         {PER_WORKER_DESCRIPTORS} more per worker, {BASE_DESCRIPTORS} of its own), but its \
         limit is {limit}: raise the limit (LimitNOFILE= in the systemd unit, --ulimit \
         nofile= in a container) or lower /workers or the addresses of /network/listen"
    )]
    TooManyDescriptors {
        workers: u32,
        sockets: usize,
        needed: u64,
        limit: u64,
    },
}

/// Descriptors the root process holds for itself whatever the configuration: the notify
/// socket, the manager's link and pipes, the API socket and its fd-store copy, the signal and
/// event descriptors of its runtime, with room to spare.
pub const BASE_DESCRIPTORS: u64 = 64;

/// Descriptors the root process holds per worker besides its sockets: the read ends of the
/// worker's output pipes and a pidfd's worth of room.
pub const PER_WORKER_DESCRIPTORS: u64 = 4;

/// Copies the root process holds of every socket it hands a worker: its supervisor's (placed
/// in the worker at every restart), the steering's (the reuseport program is attached and the
/// queue read through it), and the fd store's (what the next manager incarnation, an in-place
/// upgrade or systemd's store gets back).
pub const COPIES_PER_SOCKET: u64 = 3;

/// How many descriptors the root process needs to run `workers` workers with `sockets`
/// daemon-bound listening sockets each.
pub fn descriptors_needed(workers: u32, sockets: usize) -> u64 {
    let sockets = u64::try_from(sockets).unwrap_or(u64::MAX);
    u64::from(workers)
        .saturating_mul(
            sockets
                .saturating_mul(COPIES_PER_SOCKET)
                .saturating_add(PER_WORKER_DESCRIPTORS),
        )
        .saturating_add(BASE_DESCRIPTORS)
}

/// Refuse a configuration whose sockets the root process cannot hold under `limit` (its
/// `RLIMIT_NOFILE`, which the manager process shares).
pub fn check_descriptors(workers: u32, sockets: usize, limit: u64) -> Result<(), ListenError> {
    let needed = descriptors_needed(workers, sockets);
    if needed > limit {
        return Err(ListenError::TooManyDescriptors {
            workers,
            sockets,
            needed,
            limit,
        });
    }
    Ok(())
}

/// The sockets `network` asks the daemon to bind, deduplicated, in a stable order.
pub fn wanted(network: &NetworkSchema) -> Result<Vec<SocketKey>, ListenError> {
    let mut keys = Vec::new();
    for listen in &network.listen {
        for iface in listen.interface.iter().flatten() {
            if !listen.daemon_binds(iface) {
                continue;
            }
            let port = iface.port().or(listen.port).unwrap_or(53);
            let transports: &[Transport] = match listen.kind {
                kres_config::ListenKind::Dot => &[Transport::Tls],
                _ => &[Transport::Udp, Transport::Tcp],
            };
            let addrs = match iface.host() {
                InterfaceHost::Addr(ip) => vec![SocketAddr::new(*ip, port)],
                InterfaceHost::Name(name) => interface_addrs(name.as_str(), port)?,
            };
            for addr in addrs {
                for &transport in transports {
                    keys.push(SocketKey {
                        addr,
                        transport,
                        freebind: listen.freebind,
                    });
                }
            }
        }
    }
    keys.sort_unstable();
    keys.dedup();
    Ok(keys)
}

/// The addresses of interface `name`, as kresd's `net[name]` lists them (link-local IPv6 with
/// the interface as scope).
fn interface_addrs(name: &str, port: u16) -> Result<Vec<SocketAddr>, ListenError> {
    let all = nix::ifaddrs::getifaddrs().map_err(|source| ListenError::Interfaces {
        name: name.to_owned(),
        source,
    })?;
    let mut out = Vec::new();
    for ifa in all.filter(|i| i.interface_name == name) {
        let Some(address) = ifa.address else { continue };
        if let Some(v4) = address.as_sockaddr_in() {
            out.push(SocketAddr::new(IpAddr::V4(v4.ip()), port));
        } else if let Some(v6) = address.as_sockaddr_in6() {
            let ip = v6.ip();
            let scope = if ip.is_unicast_link_local() {
                v6.scope_id()
            } else {
                0
            };
            out.push(SocketAddr::V6(SocketAddrV6::new(ip, port, 0, scope)));
        }
    }
    if out.is_empty() {
        return Err(ListenError::NoAddress(name.to_owned()));
    }
    Ok(out)
}

/// Bind one socket: `SO_REUSEPORT` (the slots share the address), `IPV6_V6ONLY` for IPv6,
/// `IP_FREEBIND` when asked, non-blocking, close-on-exec (socket2 creates it so).
fn bind(key: SocketKey) -> Result<Socket, ListenError> {
    let err = |source| ListenError::Bind { key, source };
    let domain = Domain::for_address(key.addr);
    let (ty, proto) = match key.transport {
        Transport::Udp => (Type::DGRAM, Protocol::UDP),
        Transport::Tcp | Transport::Tls => (Type::STREAM, Protocol::TCP),
    };
    let socket = Socket::new(domain, ty, Some(proto)).map_err(err)?;
    socket.set_reuse_address(true).map_err(err)?;
    socket.set_reuse_port(true).map_err(err)?;
    if key.addr.is_ipv6() {
        socket.set_only_v6(true).map_err(err)?;
    }
    if key.freebind {
        if key.addr.is_ipv6() {
            socket.set_freebind_v6(true).map_err(err)?;
        } else {
            socket.set_freebind_v4(true).map_err(err)?;
        }
    }
    if key.transport == Transport::Udp {
        // Beyond `net.core.rmem_max` only with CAP_NET_ADMIN; otherwise the capped size.
        let forced = nix::sys::socket::setsockopt(
            &socket,
            nix::sys::socket::sockopt::RcvBufForce,
            &UDP_RECEIVE_BUFFER,
        );
        if forced.is_err() {
            socket
                .set_recv_buffer_size(UDP_RECEIVE_BUFFER)
                .map_err(err)?;
            // The kernel reports twice what it grants.
            let granted = socket.recv_buffer_size().map_err(err)? / 2;
            if granted < UDP_RECEIVE_BUFFER && !CAPPED_LOGGED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "UDP receive buffers are capped at {granted} bytes by net.core.rmem_max \
                     (wanted {UDP_RECEIVE_BUFFER}): fewer queries can wait while a worker \
                     restarts; raise net.core.rmem_max to keep them"
                );
            }
        }
    }
    socket.set_nonblocking(true).map_err(err)?;
    socket.bind(&SockAddr::from(key.addr)).map_err(err)?;
    if key.transport != Transport::Udp {
        socket.listen(TCP_BACKLOG).map_err(err)?;
    }
    Ok(socket)
}

/// A bound socket and what it is for.
#[derive(Debug)]
struct Bound {
    key: SocketKey,
    socket: Socket,
}

/// Sockets bound for a new configuration but not yet in the table; dropping it closes them
/// (the change was rejected and nothing changed).
#[derive(Debug, Default)]
pub struct Prepared {
    slots: BTreeMap<u32, Vec<Bound>>,
}

/// The daemon's listening sockets: one set per worker slot, plus sockets no longer wanted but
/// still given to a registered worker.
#[derive(Debug, Default)]
pub struct SocketTable {
    /// Slot → its sockets, sorted by key.
    slots: BTreeMap<u32, Vec<Bound>>,
    /// Out of the configuration, closed once no worker in `given` holds them.
    retired: Vec<Bound>,
    /// Service name → descriptors it was registered with, and their `-S` arguments.
    given: BTreeMap<String, (Vec<RawFd>, Vec<OsString>)>,
    /// Where the slots' sockets are mirrored for the next manager process, if anywhere.
    mirror: Option<tokio::sync::mpsc::UnboundedSender<Mirrored>>,
    /// Names of the sockets mirrored so far.
    mirrored: std::collections::BTreeSet<String>,
}

/// A change of the table, for the root process's fd store: a socket to keep (a duplicate of
/// the descriptor) or one to forget, by its [`stored_name`].
#[derive(Debug)]
pub enum Mirrored {
    Keep(String, std::os::fd::OwnedFd),
    Forget(String),
}

/// Prefix of the fd store's names of listening sockets.
pub const STORED_PREFIX: &str = "sock ";

/// The fd store's name of slot `slot`'s socket for `key`.
pub fn stored_name(slot: u32, key: &SocketKey) -> String {
    let transport = match key.transport {
        Transport::Udp => "udp",
        Transport::Tcp => "tcp",
        Transport::Tls => "tls",
    };
    format!(
        "{STORED_PREFIX}{slot} {transport} {} {}",
        u8::from(key.freebind),
        key.addr
    )
}

/// The slot and key a [`stored_name`] stands for.
fn parse_stored_name(name: &str) -> Option<(u32, SocketKey)> {
    let mut parts = name.strip_prefix(STORED_PREFIX)?.split(' ');
    let slot = parts.next()?.parse().ok()?;
    let transport = match parts.next()? {
        "udp" => Transport::Udp,
        "tcp" => Transport::Tcp,
        "tls" => Transport::Tls,
        _ => return None,
    };
    let freebind = parts.next()? == "1";
    let addr = parts.next()?.parse().ok()?;
    Some((
        slot,
        SocketKey {
            addr,
            transport,
            freebind,
        },
    ))
}

impl SocketTable {
    /// A table holding `stored` sockets (a previous manager process's, from the fd store),
    /// mirroring its changes to `mirror`. Entries whose names are not understood are dropped.
    pub fn restore(
        stored: Vec<(String, std::os::fd::OwnedFd)>,
        mirror: Option<tokio::sync::mpsc::UnboundedSender<Mirrored>>,
    ) -> SocketTable {
        let mut table = SocketTable {
            mirror,
            ..SocketTable::default()
        };
        for (name, fd) in stored {
            match parse_stored_name(&name) {
                Some((slot, key)) => {
                    table.slots.entry(slot).or_default().push(Bound {
                        key,
                        socket: Socket::from(fd),
                    });
                    table.mirrored.insert(name);
                }
                None => tracing::warn!("ignoring a stored descriptor named {name:?}"),
            }
        }
        for sockets in table.slots.values_mut() {
            sockets.sort_by_key(|b| b.key);
        }
        table
    }

    /// Tell the mirror what changed since it last heard.
    fn mirror_changes(&mut self) {
        let Some(mirror) = &self.mirror else { return };
        let mut now = std::collections::BTreeSet::new();
        for (slot, sockets) in &self.slots {
            for bound in sockets {
                let name = stored_name(*slot, &bound.key);
                if !self.mirrored.contains(&name) {
                    match bound.socket.try_clone() {
                        Ok(dup) => {
                            let _ = mirror.send(Mirrored::Keep(name.clone(), dup.into()));
                        }
                        Err(e) => tracing::warn!("cannot keep {} for later: {e}", bound.key),
                    }
                }
                now.insert(name);
            }
        }
        for gone in self.mirrored.difference(&now) {
            let _ = mirror.send(Mirrored::Forget(gone.clone()));
        }
        self.mirrored = now;
    }

    /// Bind what slots `0..workers` need for `keys` and do not have yet, slot after slot (so
    /// that each new socket's index in its reuseport group is its slot). Nothing in the table
    /// changes; a failure closes whatever this call bound.
    pub fn prepare(&self, keys: &[SocketKey], workers: u32) -> Result<Prepared, ListenError> {
        let mut prepared = Prepared::default();
        for slot in 0..workers {
            let have = self.slots.get(&slot);
            for &key in keys {
                if have.is_some_and(|v| v.iter().any(|b| b.key.same_socket(&key))) {
                    continue;
                }
                let socket = bind(key)?;
                prepared
                    .slots
                    .entry(slot)
                    .or_default()
                    .push(Bound { key, socket });
            }
        }
        Ok(prepared)
    }

    /// Make `keys` over slots `0..workers` the table: add what `prepared` bound, retire the
    /// rest (closed by [`SocketTable::close_unused`] once no worker holds them).
    pub fn commit(&mut self, mut prepared: Prepared, keys: &[SocketKey], workers: u32) {
        let old = std::mem::take(&mut self.slots);
        for (slot, sockets) in old {
            for mut bound in sockets {
                let wanted = keys.iter().find(|k| k.same_socket(&bound.key));
                if let (true, Some(&key)) = (slot < workers, wanted) {
                    // Kept, with the labels asked for now.
                    bound.key = key;
                    self.slots.entry(slot).or_default().push(bound);
                } else {
                    self.retired.push(bound);
                }
            }
        }
        for (slot, sockets) in std::mem::take(&mut prepared.slots) {
            for bound in &sockets {
                tracing::info!("listening on {} for worker {slot}", bound.key);
            }
            self.slots.entry(slot).or_default().extend(sockets);
        }
        for sockets in self.slots.values_mut() {
            sockets.sort_by_key(|b| b.key);
        }
        self.mirror_changes();
    }

    /// Slot `slot`'s descriptors with kresd's `-S` arguments for them.
    pub fn slot(&self, slot: u32) -> (Vec<RawFd>, Vec<OsString>) {
        let mut fds = Vec::new();
        let mut args = Vec::new();
        for bound in self.slots.get(&slot).into_iter().flatten() {
            let fd = bound.socket.as_raw_fd();
            fds.push(fd);
            args.push(OsString::from("-S"));
            args.push(OsString::from(match bound.key.transport {
                Transport::Udp | Transport::Tcp => fd.to_string(),
                Transport::Tls => format!("{fd}:tls"),
            }));
        }
        (fds, args)
    }

    /// Record that service `name` was registered with slot `slot`'s descriptors and
    /// arguments, as [`SocketTable::slot`] gives them now (replacing what it had).
    pub fn given(&mut self, name: &str, slot: u32) {
        self.given.insert(name.to_owned(), self.slot(slot));
    }

    /// Record that service `name` is gone, then close what nobody holds.
    pub fn taken_back(&mut self, name: &str) {
        self.given.remove(name);
        self.close_unused();
    }

    /// Whether service `name` holds exactly the descriptors of slot `slot`, named as now.
    pub fn is_current(&self, name: &str, slot: u32) -> bool {
        self.given.get(name) == Some(&self.slot(slot))
    }

    /// Close the retired sockets no registered service holds.
    pub fn close_unused(&mut self) {
        let given = &self.given;
        self.retired.retain(|b| {
            let fd = b.socket.as_raw_fd();
            let held = given.values().any(|(fds, _)| fds.contains(&fd));
            if !held {
                tracing::info!("closing listening socket {}", b.key);
            }
            held
        });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn descriptors_are_counted_against_the_limit() {
        // 16 workers, 16 addresses over UDP and TCP: more than systemd's default soft limit.
        assert_eq!(
            super::descriptors_needed(16, 32),
            16 * (3 * 32 + super::PER_WORKER_DESCRIPTORS) + super::BASE_DESCRIPTORS
        );
        let refused = super::check_descriptors(16, 32, 1024).expect_err("does not fit");
        let text = refused.to_string();
        for number in [
            "16 workers",
            "32 listening sockets",
            "1664",
            "limit is 1024",
        ] {
            assert!(text.contains(number), "{number:?} missing from {text:?}");
        }
        super::check_descriptors(16, 32, 524_288).expect("fits under systemd's hard limit");
        super::check_descriptors(1, 2, super::descriptors_needed(1, 2)).expect("exactly fits");
        assert_eq!(super::descriptors_needed(u32::MAX, usize::MAX), u64::MAX);
    }

    use super::*;

    fn key(addr: &str, transport: Transport) -> SocketKey {
        SocketKey {
            addr: addr.parse().unwrap(),
            transport,
            freebind: false,
        }
    }

    /// A port free, when asked, for everything these tests bind on it: UDP and TCP on
    /// 127.0.0.1, TCP on ::1. A port free for UDP alone may be the local port of another
    /// test's TCP connection, and a listener could not bind it.
    fn free_udp_port() -> u16 {
        for _ in 0..1000 {
            let port = std::net::UdpSocket::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let tcp_v4 = std::net::TcpListener::bind(("127.0.0.1", port));
            let tcp_v6 = std::net::TcpListener::bind(("::1", port));
            if tcp_v4.is_ok() && tcp_v6.is_ok() {
                return port;
            }
        }
        panic!("no port free for UDP and TCP on 127.0.0.1 and TCP on ::1 in 1000 tries");
    }

    #[test]
    fn slots_share_the_address_and_survive_an_unchanged_commit() {
        let port = free_udp_port();
        let keys = vec![
            key(&format!("127.0.0.1:{port}"), Transport::Udp),
            key(&format!("127.0.0.1:{port}"), Transport::Tcp),
        ];
        let mut table = SocketTable::default();
        let prepared = table.prepare(&keys, 2).expect("two slots bind");
        table.commit(prepared, &keys, 2);
        let (fds0, args0) = table.slot(0);
        assert_eq!(fds0.len(), 2);
        assert_eq!(args0[0], "-S");
        table.given("kresd0", 0);
        // The same configuration binds nothing new and keeps every descriptor.
        let prepared = table.prepare(&keys, 2).unwrap();
        assert!(prepared.slots.is_empty());
        table.commit(prepared, &keys, 2);
        assert!(table.is_current("kresd0", 0));
        // Scaling down retires slot 1; nobody holds it, so it closes.
        table.commit(Prepared::default(), &keys, 1);
        table.close_unused();
        assert!(table.retired.is_empty());
        assert_eq!(table.slot(1).0, Vec::<RawFd>::new());
    }

    #[test]
    fn retired_sockets_stay_open_while_a_worker_holds_them() {
        let port = free_udp_port();
        let keys = vec![key(&format!("127.0.0.1:{port}"), Transport::Udp)];
        let mut table = SocketTable::default();
        let prepared = table.prepare(&keys, 1).unwrap();
        table.commit(prepared, &keys, 1);
        table.given("kresd0", 0);
        table.commit(Prepared::default(), &[], 1);
        table.close_unused();
        assert_eq!(table.retired.len(), 1, "kresd0 still holds it");
        assert!(!table.is_current("kresd0", 0));
        table.taken_back("kresd0");
        assert!(table.retired.is_empty());
    }

    #[test]
    fn a_taken_address_is_a_bind_error_and_nothing_is_kept() {
        let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let keys = vec![key(
            &taken.local_addr().unwrap().to_string(),
            Transport::Udp,
        )];
        let table = SocketTable::default();
        let err = table.prepare(&keys, 1).expect_err("address in use");
        assert!(
            err.to_string().starts_with("cannot bind 127.0.0.1:"),
            "{err}"
        );
    }

    #[test]
    fn the_table_is_mirrored_and_restored_by_name() {
        let port = free_udp_port();
        let keys = vec![
            key(&format!("127.0.0.1:{port}"), Transport::Udp),
            key(&format!("[::1]:{port}"), Transport::Tls),
        ];
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut table = SocketTable::restore(Vec::new(), Some(tx));
        let prepared = table.prepare(&keys, 2).unwrap();
        table.commit(prepared, &keys, 2);
        let mut kept = Vec::new();
        while let Ok(Mirrored::Keep(name, fd)) = rx.try_recv() {
            kept.push((name, fd));
        }
        assert_eq!(kept.len(), 4, "two keys over two slots");
        // A new process restores the same slots from the stored names.
        let restored = SocketTable::restore(kept, None);
        assert_eq!(restored.slot(0).0.len(), 2);
        assert_eq!(restored.slot(1).0.len(), 2);
        assert_eq!(restored.slots[&1][1].key, keys[1]);
        // Scaling down forgets slot 1's sockets.
        table.commit(Prepared::default(), &keys, 1);
        let mut forgotten = Vec::new();
        while let Ok(Mirrored::Forget(name)) = rx.try_recv() {
            forgotten.push(name);
        }
        assert_eq!(forgotten.len(), 2);
        assert!(
            forgotten.iter().all(|n| n.starts_with("sock 1 ")),
            "{forgotten:?}"
        );
    }

    /// Which slot's socket of `transport` receives a datagram or connection to `addr` while
    /// the group's program returns index `index`.
    fn receiver(table: &SocketTable, transport: Transport, addr: SocketAddr, index: u32) -> u32 {
        use std::os::fd::AsFd;
        let sockets: Vec<(u32, Socket)> = table
            .slots
            .iter()
            .flat_map(|(slot, v)| v.iter().map(move |b| (*slot, b)))
            .filter(|(_, b)| b.key.transport == transport)
            .map(|(slot, b)| (slot, b.socket.try_clone().unwrap()))
            .collect();
        let program = supervisor::steering::program(&[index]);
        supervisor::os::attach_reuseport_program(sockets[0].1.as_fd(), &program).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 16];
        // The client's end stays open until the server's end was found.
        let _client: Box<dyn std::any::Any> = match transport {
            Transport::Udp => {
                let c = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                c.send_to(b"q", addr).unwrap();
                Box::new(c)
            }
            Transport::Tcp | Transport::Tls => {
                Box::new(std::net::TcpStream::connect(addr).unwrap())
            }
        };
        loop {
            for (slot, s) in &sockets {
                let got = match transport {
                    Transport::Udp => s.recv(&mut buf).is_ok(),
                    Transport::Tcp | Transport::Tls => s.accept().is_ok(),
                };
                if got {
                    return *slot;
                }
            }
            assert!(std::time::Instant::now() < deadline, "nothing arrived");
        }
    }

    /// Every slot's socket is at its own index, for UDP and TCP.
    fn assert_slots_are_indexes(table: &SocketTable, addr: SocketAddr, workers: u32) {
        for transport in [Transport::Udp, Transport::Tcp] {
            for slot in 0..workers {
                assert_eq!(
                    receiver(table, transport, addr, slot),
                    slot,
                    "{transport:?} index {slot} of {workers}"
                );
            }
        }
    }

    #[test]
    fn every_slot_is_its_index_in_the_group() {
        let port = free_udp_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let keys = vec![
            key(&addr.to_string(), Transport::Udp),
            key(&addr.to_string(), Transport::Tcp),
        ];
        let mut table = SocketTable::default();
        let scale = |table: &mut SocketTable, keys: &[SocketKey], workers: u32| {
            let prepared = table.prepare(keys, workers).unwrap();
            table.commit(prepared, keys, workers);
            table.close_unused();
            assert_slots_are_indexes(table, addr, workers);
        };
        scale(&mut table, &keys, 3);
        // Up: new slots join after the others.
        scale(&mut table, &keys, 4);
        // Down by two: the removed slots close in whatever order, the kept ones stay put.
        scale(&mut table, &keys, 2);
        scale(&mut table, &keys, 5);
        scale(&mut table, &keys, 1);
        scale(&mut table, &keys, 3);
        // A label that only matters at bind time keeps the socket: no second one joins.
        let before = table.slot(2).0;
        let freebind: Vec<SocketKey> = keys
            .iter()
            .map(|k| SocketKey {
                freebind: true,
                ..*k
            })
            .collect();
        scale(&mut table, &freebind, 3);
        assert_eq!(table.slot(2).0, before);
        assert!(table.slots[&2].iter().all(|b| b.key.freebind));
    }

    #[test]
    fn plain_tcp_becoming_dot_keeps_its_socket_under_a_new_name() {
        let port = free_udp_port();
        let addr = format!("127.0.0.1:{port}");
        let mut table = SocketTable::default();
        let tcp = vec![key(&addr, Transport::Tcp)];
        let prepared = table.prepare(&tcp, 1).unwrap();
        table.commit(prepared, &tcp, 1);
        table.given("kresd0", 0);
        let (fds, _) = table.slot(0);
        let tls = vec![key(&addr, Transport::Tls)];
        let prepared = table.prepare(&tls, 1).unwrap();
        assert!(prepared.slots.is_empty(), "nothing new is bound");
        table.commit(prepared, &tls, 1);
        let (now, args) = table.slot(0);
        assert_eq!(now, fds);
        assert_eq!(args[1], OsString::from(format!("{}:tls", fds[0])));
        assert!(
            !table.is_current("kresd0", 0),
            "its arguments changed: registered again"
        );
    }

    #[test]
    fn dot_is_passed_as_tls() {
        let port = free_udp_port();
        let keys = vec![key(&format!("127.0.0.1:{port}"), Transport::Tls)];
        let mut table = SocketTable::default();
        let prepared = table.prepare(&keys, 1).unwrap();
        table.commit(prepared, &keys, 1);
        let (fds, args) = table.slot(0);
        assert_eq!(args[1], OsString::from(format!("{}:tls", fds[0])));
    }
}
