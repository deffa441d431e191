//! Steering of `SO_REUSEPORT` groups among the services that are ready. A service opts in
//! with [`crate::ServiceSpec::reuseport_index`]: the index its handed sockets have in their
//! reuseport groups (the order in which the group's sockets joined it). The supervisor groups
//! the handed sockets by type and local address itself and keeps on each group a classic BPF
//! program (`SO_ATTACH_REUSEPORT_CBPF`) that sends new datagrams and connections only to
//! members whose service is running, ready and not being stopped, so that the share of a
//! dead, restarting, stopping or starting member goes to the others at once and comes back
//! when it is ready. When no member is live the program chooses among every member still
//! registered, so traffic waits in their own queues as it would under the kernel's hash, but
//! never in a socket no registered service holds (a removed slot's, not closed yet, or a new
//! slot's, not registered yet): such a queue would be closed, or waited on, for nothing. Only a
//! group the supervisor cannot name (two sockets claiming one index) is left to the kernel's
//! hash. It knows sockets and their queues, never what flows through them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd, RawFd};

use crate::os::{self, SocketType};

/// One reuseport group: the sockets of one type bound to one local address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupKey {
    pub kind: SocketType,
    pub local: SocketAddr,
}

impl std::fmt::Display for GroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            SocketType::Datagram => "udp",
            SocketType::Stream => "tcp",
        };
        write!(f, "{kind} {}", self.local)
    }
}

/// One service's socket in a group.
#[derive(Debug)]
struct Member {
    /// The service holding it.
    name: String,
    /// Its index in the group, as the service's spec declares it.
    index: u32,
    /// Our own duplicate: the program is attached and the queue read through it, and it
    /// closes with the membership.
    socket: OwnedFd,
    /// The open socket behind it: two members declaring one index must share it.
    inode: u64,
}

/// What the kernel was last told about a group.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Applied {
    /// No program: the kernel's hash picks among every socket of the group.
    Hash,
    /// A program choosing at random among these indexes.
    Among(Vec<u32>),
}

#[derive(Debug)]
struct Group {
    members: Vec<Member>,
    applied: Applied,
}

/// Every group the steered services' sockets belong to.
#[derive(Debug, Default)]
pub(crate) struct Steering {
    groups: BTreeMap<GroupKey, Group>,
}

impl Steering {
    /// Service `name`, member `index` of the groups of `fds`, joins them. Descriptors that are
    /// not bound IP sockets with `SO_REUSEPORT` are not steered.
    pub(crate) fn join(&mut self, name: &str, index: u32, fds: &[RawFd]) {
        for &fd in fds {
            let socket = match os::duplicate_raw(fd) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(name, fd, error = %e, "cannot steer a handed socket");
                    continue;
                }
            };
            let Some((kind, local)) = os::socket_group(socket.as_fd()) else {
                continue;
            };
            let Ok(inode) = os::socket_inode(socket.as_fd()) else {
                continue;
            };
            let key = GroupKey { kind, local };
            tracing::debug!(name, index, group = %key, "steered member joined");
            self.groups
                .entry(key)
                .or_insert_with(|| Group {
                    members: Vec::new(),
                    applied: Applied::Hash,
                })
                .members
                .push(Member {
                    name: name.to_owned(),
                    index,
                    socket,
                    inode,
                });
        }
    }

    /// Service `name` leaves every group. A group left empty gets the kernel's hash back.
    pub(crate) fn leave(&mut self, name: &str) {
        self.groups.retain(|key, group| {
            let Some(pos) = group.members.iter().position(|m| m.name == name) else {
                return true;
            };
            let gone = group.members.remove(pos);
            tracing::debug!(name, group = %key, "steered member left");
            if !group.members.is_empty() {
                return true;
            }
            if group.applied != Applied::Hash {
                if let Err(e) = os::detach_reuseport_program(gone.socket.as_fd()) {
                    tracing::warn!(group = %key, error = %e, "cannot detach the steering program");
                }
            }
            false
        });
    }

    /// Whether `name` is a member of any group.
    pub(crate) fn is_member(&self, name: &str) -> bool {
        self.groups
            .values()
            .any(|g| g.members.iter().any(|m| m.name == name))
    }

    /// Whether every group of `name` has another live member to take its share.
    pub(crate) fn others_take_over(&self, name: &str, live: impl Fn(&str) -> bool) -> bool {
        let mut any = false;
        for group in self.groups.values() {
            let Some(me) = group.members.iter().find(|m| m.name == name) else {
                continue;
            };
            any = true;
            if !group
                .members
                .iter()
                .any(|m| m.index != me.index && live(&m.name))
            {
                return false;
            }
        }
        any
    }

    /// What waits in `name`'s sockets (datagrams' bytes, connections to accept); a socket that
    /// cannot be asked counts as empty, so that it never holds a stop up.
    pub(crate) fn queued(&self, name: &str) -> u64 {
        let mut total = 0;
        for (key, group) in &self.groups {
            for m in group.members.iter().filter(|m| m.name == name) {
                match os::queued(m.socket.as_fd(), key.kind) {
                    Ok(n) => total += n,
                    Err(e) => {
                        tracing::debug!(name, group = %key, error = %e, "cannot read a queue")
                    }
                }
            }
        }
        total
    }

    /// Make every group's program choose among its live members (`live(name)`), telling the
    /// kernel only what changed.
    pub(crate) fn update(&mut self, live: impl Fn(&str) -> bool) {
        for (key, group) in &mut self.groups {
            let wanted = wanted(key, &group.members, &live);
            if wanted == group.applied {
                continue;
            }
            let Some(first) = group.members.first() else {
                continue;
            };
            let result = match &wanted {
                Applied::Hash => os::detach_reuseport_program(first.socket.as_fd()),
                Applied::Among(indexes) => {
                    os::attach_reuseport_program(first.socket.as_fd(), &program(indexes))
                }
            };
            match result {
                Ok(()) => {
                    match &wanted {
                        Applied::Hash => {
                            tracing::debug!(group = %key, "not steered: the kernel's hash picks")
                        }
                        Applied::Among(indexes) => {
                            tracing::debug!(group = %key, members = ?indexes, "steering")
                        }
                    }
                    group.applied = wanted;
                }
                Err(e) => {
                    tracing::warn!(group = %key, error = %e, "cannot change the steering program");
                    // Try again at the next change rather than at every pass.
                    group.applied = wanted;
                }
            }
        }
    }
}

/// What group `key` should have: its live members' indexes, every member's when none is live,
/// or the hash when two different sockets claim one index (the kernel's order is then
/// unknown).
fn wanted(key: &GroupKey, members: &[Member], live: impl Fn(&str) -> bool) -> Applied {
    let mut by_index: BTreeMap<u32, u64> = BTreeMap::new();
    for m in members {
        if let Some(&other) = by_index.get(&m.index) {
            if other != m.inode {
                tracing::debug!(group = %key, index = m.index, "two sockets claim one index: not steered");
                return Applied::Hash;
            }
        }
        by_index.insert(m.index, m.inode);
    }
    let mut indexes: Vec<u32> = members
        .iter()
        .filter(|m| live(&m.name))
        .map(|m| m.index)
        .collect();
    if indexes.is_empty() {
        indexes = by_index.into_keys().collect();
    }
    indexes.sort_unstable();
    indexes.dedup();
    if indexes.is_empty() {
        Applied::Hash
    } else {
        Applied::Among(indexes)
    }
}

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h), as libc spells them: word size
// (`BPF_W`) and constant operand (`BPF_K`) are zero.
const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_ABS) as u16;
const BPF_ALU_MOD_K: u16 = (libc::BPF_ALU | libc::BPF_MOD) as u16;
const BPF_JMP_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ) as u16;
const BPF_RET_K: u16 = libc::BPF_RET as u16;
/// `SKF_AD_OFF + SKF_AD_RANDOM`: an absolute load from there reads a random 32-bit number.
const SKF_AD_RANDOM: u32 = (libc::SKF_AD_OFF + libc::SKF_AD_RANDOM) as u32;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// A classic BPF program for a reuseport group that returns one of `live` (socket indexes in
/// the group) at random: `A = random; A %= n;` then a jump table. With no index, it returns
/// one out of every group's range, which makes the kernel fall back to its hash.
pub fn program(live: &[u32]) -> Vec<libc::sock_filter> {
    let Some((&last, rest)) = live.split_last() else {
        return vec![insn(BPF_RET_K, 0, 0, u32::MAX)];
    };
    let n = u32::try_from(live.len()).unwrap_or(u32::MAX);
    let mut out = vec![
        insn(BPF_LD_W_ABS, 0, 0, SKF_AD_RANDOM),
        insn(BPF_ALU_MOD_K, 0, 0, n),
    ];
    for (i, &index) in (0u32..).zip(rest) {
        // If A == i, fall through to the return; else skip it.
        out.push(insn(BPF_JMP_JEQ_K, 0, 1, i));
        out.push(insn(BPF_RET_K, 0, 0, index));
    }
    out.push(insn(BPF_RET_K, 0, 0, last));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    /// `n` UDP sockets in one reuseport group on a free loopback port, in index order.
    fn group(n: usize) -> Vec<UdpSocket> {
        use nix::sys::socket::{
            bind, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn,
        };
        let first = socket(
            AddressFamily::Inet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        setsockopt(&first, sockopt::ReusePort, &true).unwrap();
        bind(first.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, 0)).unwrap();
        let first = UdpSocket::from(first);
        let port = first.local_addr().unwrap().port();
        let mut out = vec![first];
        for _ in 1..n {
            let s = socket(
                AddressFamily::Inet,
                SockType::Datagram,
                SockFlag::SOCK_CLOEXEC,
                None,
            )
            .unwrap();
            setsockopt(&s, sockopt::ReusePort, &true).unwrap();
            bind(s.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, port)).unwrap();
            out.push(UdpSocket::from(s));
        }
        for s in &out {
            s.set_nonblocking(true).unwrap();
        }
        out
    }

    /// Send `count` datagrams, each from a new source port, and count what each socket got.
    fn spread(sockets: &[UdpSocket], count: usize) -> Vec<usize> {
        let to = sockets[0].local_addr().unwrap();
        for _ in 0..count {
            UdpSocket::bind("127.0.0.1:0")
                .unwrap()
                .send_to(b"q", to)
                .unwrap();
        }
        let mut got = vec![0; sockets.len()];
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut buf = [0u8; 16];
        while got.iter().sum::<usize>() < count && Instant::now() < deadline {
            for (i, s) in sockets.iter().enumerate() {
                while s.recv(&mut buf).is_ok() {
                    got[i] += 1;
                }
            }
        }
        got
    }

    #[test]
    fn the_program_sends_only_to_live_indexes() {
        let sockets = group(3);
        let fd = sockets[1].as_fd();
        os::attach_reuseport_program(fd, &program(&[2])).unwrap();
        assert_eq!(spread(&sockets, 50), vec![0, 0, 50]);
        os::attach_reuseport_program(fd, &program(&[0, 2])).unwrap();
        let got = spread(&sockets, 200);
        assert_eq!(got[1], 0, "{got:?}");
        assert!(
            got[0] > 0 && got[2] > 0,
            "both live members get a share: {got:?}"
        );
        // Without a program the hash reaches every socket again.
        os::detach_reuseport_program(fd).unwrap();
        os::detach_reuseport_program(fd).expect("detaching twice is no error");
        let got = spread(&sockets, 300);
        assert!(got.iter().all(|&n| n > 0), "{got:?}");
        // No live index: out of range, the hash picks.
        os::attach_reuseport_program(fd, &program(&[])).unwrap();
        let got = spread(&sockets, 300);
        assert!(got.iter().all(|&n| n > 0), "{got:?}");
    }

    #[test]
    fn steering_follows_liveness_and_reports_queues() {
        let sockets = group(2);
        let fds: Vec<RawFd> = sockets.iter().map(AsRawFd::as_raw_fd).collect();
        let mut steering = Steering::default();
        steering.join("a", 0, &fds[..1]);
        steering.join("b", 1, &fds[1..]);
        assert!(steering.is_member("a"));
        steering.update(|name| name == "a");
        assert_eq!(spread(&sockets, 40), vec![40, 0]);
        assert!(steering.others_take_over("b", |name| name == "a"));
        assert!(!steering.others_take_over("a", |name| name == "a"));
        steering.update(|name| name == "b");
        // Queued but not read: the queue is seen.
        let to = sockets[0].local_addr().unwrap();
        UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .send_to(b"query", to)
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while steering.queued("b") == 0 && Instant::now() < deadline {}
        assert_eq!(steering.queued("b"), 5);
        assert_eq!(steering.queued("a"), 0);
        // Nobody live: every registered member gets its share, to wait in its own queue.
        steering.update(|_| false);
        let got = spread(&sockets, 200);
        assert!(got[0] > 0 && got[1] > 0, "{got:?}");
        // A socket whose service left gets nothing, live members or not.
        steering.leave("b");
        steering.update(|_| false);
        assert_eq!(spread(&sockets, 40), vec![40, 0]);
        steering.leave("a");
        assert!(!steering.is_member("a"));
        let got = spread(&sockets, 300);
        assert!(got[0] > 0 && got[1] > 0, "the hash is back: {got:?}");
    }

    #[test]
    fn two_sockets_claiming_one_index_are_not_steered() {
        let sockets = group(2);
        let fds: Vec<RawFd> = sockets.iter().map(AsRawFd::as_raw_fd).collect();
        let mut steering = Steering::default();
        steering.join("a", 0, &fds[..1]);
        steering.join("b", 0, &fds[1..]);
        steering.update(|name| name == "a");
        let key = *steering.groups.keys().next().unwrap();
        assert_eq!(steering.groups[&key].applied, Applied::Hash);
    }

    #[test]
    fn programs_are_jump_tables() {
        assert_eq!(program(&[]).len(), 1);
        assert_eq!(program(&[3]).len(), 3);
        let p = program(&[1, 4, 6]);
        assert_eq!(p.len(), 2 + 2 * 2 + 1);
        assert_eq!(p[1].k, 3, "modulo the number of live members");
        assert_eq!(
            p.iter()
                .filter(|i| i.code == BPF_RET_K)
                .map(|i| i.k)
                .collect::<Vec<_>>(),
            vec![1, 4, 6]
        );
    }
}
