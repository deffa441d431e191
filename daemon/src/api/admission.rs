//! Which API connections stay open when there are too many: no number of idle, slow,
//! unauthenticated or refused connections may keep a probe or an admin out.
//!
//! Every accepted connection is admitted at once (nothing waits in the listen backlog behind
//! connections that send nothing) and recorded here with its peer (unix: uid; TCP: source
//! address, IPv6 by /64) and its standing: *unproven* until a request of it passed the guard,
//! *serving* while a request is in flight, *proven* once one was answered with anything but a
//! refusal (a refused connection is closed after its answer), *stalled* while its answer
//! waits for the client to read (`server::WriteDeadline` says so). When the open connections
//! reach the bound (derived from the descriptor limit, [`connection_bound`]), a new one sheds
//! an old one instead of being refused: from the peer holding the most connections (so one
//! uid or address cannot take every place from another), its oldest unproven connection,
//! else its oldest idle proven one, else its oldest stalled one. A connection whose request
//! is being worked on, or whose answer its client is taking, is never shed: slow readers
//! cannot keep a probe or an admin out.
//! The request-head deadline (`server::HEADER_READ_TIMEOUT`) bounds how long any connection
//! stays without a request.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// Connections open at once, whatever the descriptor limit: what idle connections can make
/// the manager hold in memory (a read buffer each) stays small.
pub const MAX_OPEN_CONNECTIONS: usize = 4096;

/// Descriptors kept for everything else the manager opens (the link, the workers' control
/// sockets, generated files, the fd store) when the bound is derived from the limit.
pub const RESERVED_DESCRIPTORS: u64 = 256;

/// Sheds are logged at most this often (a flood would otherwise flood the log).
const SHED_REPORT_INTERVAL: Duration = Duration::from_secs(60);

/// The bound of open API connections for a soft descriptor limit of `nofile`: what the
/// limit leaves after [`RESERVED_DESCRIPTORS`] (half of a limit too small for that), at most
/// [`MAX_OPEN_CONNECTIONS`].
pub fn connection_bound(nofile: u64) -> usize {
    let free = if nofile > 2 * RESERVED_DESCRIPTORS {
        nofile - RESERVED_DESCRIPTORS
    } else {
        nofile / 2
    };
    usize::try_from(free)
        .unwrap_or(usize::MAX)
        .clamp(1, MAX_OPEN_CONNECTIONS)
}

/// The bound for this process's soft descriptor limit.
pub fn bound_for_this_process() -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft);
    connection_bound(soft)
}

/// Whose connections count together: a unix peer's uid, a TCP peer's address (an IPv6
/// address by its /64, the least a host is usually given).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerKey {
    /// A unix peer, by its uid (`SO_PEERCRED`).
    Uid(u32),
    /// A TCP peer, by its IPv4 address or its IPv6 /64.
    Address(IpAddr),
    /// The kernel did not say (all such peers share one key).
    Unknown,
}

impl PeerKey {
    /// The key of a TCP peer at `ip`.
    pub fn address(ip: IpAddr) -> PeerKey {
        match ip {
            IpAddr::V4(v4) => PeerKey::Address(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => PeerKey::Address(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                    PeerKey::Address(IpAddr::V6(prefix.into()))
                }
            },
        }
    }
}

/// Where a connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// No request of it has passed the guard yet: the first to go.
    Unproven,
    /// A request is in flight: never shed.
    Serving,
    /// Idle after a request that passed the guard: shed only when its peer has no unproven
    /// connection left.
    Proven,
    /// A request in flight whose answer waits for the client to read it: shed only when its
    /// peer has no unproven or idle connection left.
    Stalled,
}

/// How a request ended, for the standing of its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOutcome {
    /// It passed the guard (whatever its status): the connection has proven itself.
    Answered,
    /// It was refused (401, 403, 421, 413…): the connection is being closed.
    Refused,
}

/// Why a new connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Full;

/// One open connection.
#[derive(Debug)]
struct Entry {
    /// Whose share it counts in.
    peer: PeerKey,
    /// Whether it may be shed, and before what.
    standing: Standing,
    /// Cancelled to shed it: its task then drops (closes) it.
    shed: CancellationToken,
}

/// One peer's connections.
#[derive(Debug, Default)]
struct Share {
    /// How many it has open, in any standing.
    open: usize,
    /// Its unproven connections without a request in flight, by id (oldest first).
    unproven: BTreeSet<u64>,
    /// Its idle proven connections, by id (oldest first).
    proven: BTreeSet<u64>,
    /// Its connections whose answers wait for it, by id (oldest first).
    stalled: BTreeSet<u64>,
}

impl Share {
    /// Its next connection to shed: the oldest unproven, else the oldest idle proven, else
    /// the oldest stalled.
    fn victim(&self) -> Option<u64> {
        self.unproven
            .first()
            .or_else(|| self.proven.first())
            .or_else(|| self.stalled.first())
            .copied()
    }

    fn set_of(&mut self, standing: Standing) -> Option<&mut BTreeSet<u64>> {
        match standing {
            Standing::Unproven => Some(&mut self.unproven),
            Standing::Proven => Some(&mut self.proven),
            Standing::Stalled => Some(&mut self.stalled),
            Standing::Serving => None,
        }
    }
}

/// The open connections and their shares: pure bookkeeping, no clock, no I/O.
#[derive(Debug)]
struct Table {
    /// Open connections at most (a new one beyond sheds an old one).
    bound: usize,
    /// The id of the next connection; ids grow with age, so the smallest is the oldest.
    next_id: u64,
    /// Every open connection by id: what counts against the bound.
    connections: HashMap<u64, Entry>,
    /// Every peer with an open connection: whose share is largest, and what it may lose.
    shares: HashMap<PeerKey, Share>,
}

impl Table {
    fn new(bound: usize) -> Table {
        Table {
            bound: bound.max(1),
            next_id: 0,
            connections: HashMap::new(),
            shares: HashMap::new(),
        }
    }

    /// Record a new connection of `peer`; at the bound, first take out the connection to
    /// shed (its token is returned to cancel). `Full` when every open connection is serving.
    fn admit(
        &mut self,
        peer: PeerKey,
        shed: CancellationToken,
    ) -> Result<(u64, Option<CancellationToken>), Full> {
        let victim = if self.connections.len() >= self.bound {
            Some(self.shed_one(Some(peer)).ok_or(Full)?)
        } else {
            None
        };
        let id = self.next_id;
        self.next_id += 1;
        self.connections.insert(
            id,
            Entry {
                peer,
                standing: Standing::Unproven,
                shed,
            },
        );
        let share = self.shares.entry(peer).or_default();
        share.open += 1;
        share.unproven.insert(id);
        Ok((id, victim))
    }

    /// Take out the connection to shed: the next victim of the peer holding the most
    /// connections among those that have one, `newcomer`'s new connection counted (so at a
    /// tie a peer's new connection takes the place of its own old one; other ties: the peer
    /// whose victim is oldest).
    fn shed_one(&mut self, newcomer: Option<PeerKey>) -> Option<CancellationToken> {
        let victim = self
            .shares
            .iter()
            .filter_map(|(peer, share)| {
                let held = share.open + usize::from(Some(*peer) == newcomer);
                share.victim().map(|id| (held, std::cmp::Reverse(id)))
            })
            .max()
            .map(|(_, std::cmp::Reverse(id))| id)?;
        self.remove(victim).map(|entry| entry.shed)
    }

    /// Forget a connection (closed, or shed).
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.connections.remove(&id)?;
        if let Some(share) = self.shares.get_mut(&entry.peer) {
            share.open -= 1;
            if let Some(set) = share.set_of(entry.standing) {
                set.remove(&id);
            }
            if share.open == 0 {
                self.shares.remove(&entry.peer);
            }
        }
        Some(entry)
    }

    /// Move a connection from `from` to `to`, if it stands there.
    fn move_standing(&mut self, id: u64, from: Standing, to: Standing) {
        if self
            .connections
            .get(&id)
            .is_some_and(|e| e.standing == from)
        {
            self.set_standing(id, to);
        }
    }

    /// Move a connection to `standing`.
    fn set_standing(&mut self, id: u64, standing: Standing) {
        let Some(entry) = self.connections.get_mut(&id) else {
            return;
        };
        let before = std::mem::replace(&mut entry.standing, standing);
        if let Some(share) = self.shares.get_mut(&entry.peer) {
            if let Some(set) = share.set_of(before) {
                set.remove(&id);
            }
            if let Some(set) = share.set_of(standing) {
                set.insert(id);
            }
        }
    }
}

/// The admission of one endpoint's connections: shared by the accept loop and every
/// connection's task.
#[derive(Debug)]
pub struct Admission {
    /// The table and the sheds not yet logged, under one lock never held across an await.
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The open connections.
    table: Table,
    /// Connections shed since the last report.
    shed_unreported: u64,
    /// New connections closed since the last report because none could be shed.
    refused_unreported: u64,
    /// When sheds were last logged.
    reported_at: Option<Instant>,
}

impl Admission {
    /// Admission of at most `bound` open connections.
    pub fn new(bound: usize) -> Arc<Admission> {
        Arc::new(Admission {
            state: Mutex::new(State {
                table: Table::new(bound),
                shed_unreported: 0,
                refused_unreported: 0,
                reported_at: None,
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change of the table completes under the lock, so a poisoned one is intact.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Admit a connection of `peer`, shedding another at the bound. `None` when every open
    /// connection has a request in flight: the caller closes the new one.
    pub fn admit(self: &Arc<Admission>, peer: PeerKey) -> Option<Ticket> {
        let shed = CancellationToken::new();
        let mut state = self.state();
        let admitted = state.table.admit(peer, shed.clone());
        let (id, victim) = match admitted {
            Ok(admitted) => admitted,
            Err(Full) => {
                state.refused_unreported += 1;
                state.report();
                return None;
            }
        };
        if let Some(victim) = victim {
            victim.cancel();
            state.shed_unreported += 1;
            state.report();
        }
        Some(Ticket {
            admission: self.clone(),
            id,
            shed,
        })
    }

    /// Shed one connection (the one a new connection would), to free a descriptor; false when
    /// none may be.
    pub fn shed_one(&self) -> bool {
        let mut state = self.state();
        match state.table.shed_one(None) {
            Some(victim) => {
                victim.cancel();
                state.shed_unreported += 1;
                state.report();
                true
            }
            None => false,
        }
    }
}

impl State {
    /// Log the sheds and refusals not yet logged, at most once per [`SHED_REPORT_INTERVAL`].
    fn report(&mut self) {
        let now = Instant::now();
        if self
            .reported_at
            .is_some_and(|at| now.duration_since(at) < SHED_REPORT_INTERVAL)
        {
            return;
        }
        tracing::warn!(
            "management API: {} connections open (the bound); closed {} idle or unproven \
             ones of the peers holding the most, and {} new ones while every connection had \
             a request in flight",
            self.table.connections.len(),
            self.shed_unreported,
            self.refused_unreported,
        );
        self.shed_unreported = 0;
        self.refused_unreported = 0;
        self.reported_at = Some(now);
    }
}

/// One admitted connection's place: its standing follows its requests, and it is forgotten
/// when dropped.
#[derive(Debug)]
pub struct Ticket {
    /// The table it is recorded in.
    admission: Arc<Admission>,
    /// Its id there.
    id: u64,
    /// Cancelled when it is shed.
    shed: CancellationToken,
}

impl Ticket {
    /// Fires when this connection is shed: close it.
    pub fn shed(&self) -> &CancellationToken {
        &self.shed
    }

    /// A request arrived whole: the connection is serving (never shed) until the returned
    /// mark is dropped or ended.
    pub fn request_began(self: &Arc<Ticket>) -> RequestMark {
        self.admission
            .state()
            .table
            .set_standing(self.id, Standing::Serving);
        RequestMark {
            ticket: self.clone(),
            outcome: RequestOutcome::Refused,
        }
    }
}

impl Ticket {
    /// The answer in flight began (`true`) or ceased (`false`) to wait for the client to
    /// read it: the connection is stalled, and may be shed, meanwhile. Nothing changes for a
    /// connection with no request in flight.
    pub fn answer_waits(&self, waits: bool) {
        let (from, to) = if waits {
            (Standing::Serving, Standing::Stalled)
        } else {
            (Standing::Stalled, Standing::Serving)
        };
        self.admission
            .state()
            .table
            .move_standing(self.id, from, to);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.state().table.remove(self.id);
    }
}

/// A request in flight on a connection; when dropped (its answer was written, or abandoned),
/// the connection is idle again, proven when the request was [`RequestOutcome::Answered`].
#[derive(Debug)]
pub struct RequestMark {
    /// The connection.
    ticket: Arc<Ticket>,
    /// How the request ended so far: refused until it is known to have passed the guard.
    outcome: RequestOutcome,
}

impl RequestMark {
    /// Record how the request ended.
    pub fn ended(&mut self, outcome: RequestOutcome) {
        self.outcome = outcome;
    }
}

impl Drop for RequestMark {
    fn drop(&mut self) {
        let standing = match self.outcome {
            RequestOutcome::Answered => Standing::Proven,
            RequestOutcome::Refused => Standing::Unproven,
        };
        // A connection already forgotten (closed) stays forgotten.
        self.ticket
            .admission
            .state()
            .table
            .set_standing(self.ticket.id, standing);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: PeerKey = PeerKey::Uid(1000);
    const B: PeerKey = PeerKey::Uid(1001);

    /// Steps on a table and what each must give.
    enum Step {
        /// A connection of this peer; it sheds this id (`None`: none).
        Admit(PeerKey, Option<u64>),
        /// A connection of this peer finds every place serving.
        Refused(PeerKey),
        Serve(u64),
        /// The answer of this serving connection waits for its client (`true`) or no more.
        Waits(u64, bool),
        End(u64, Standing),
        Close(u64),
    }

    /// Run `steps` on a table of `bound`, checking each.
    fn check(bound: usize, steps: &[Step]) {
        let mut table = Table::new(bound);
        let mut tokens: HashMap<u64, CancellationToken> = HashMap::new();
        for (n, step) in steps.iter().enumerate() {
            match step {
                Step::Admit(peer, expected) => {
                    let token = CancellationToken::new();
                    let (id, shed) = table.admit(*peer, token.clone()).expect("admitted");
                    tokens.insert(id, token);
                    if let Some(shed) = shed {
                        shed.cancel();
                    }
                    let shed: Vec<u64> = tokens
                        .iter()
                        .filter(|(_, t)| t.is_cancelled())
                        .map(|(id, _)| *id)
                        .collect();
                    assert_eq!(shed.first().copied(), *expected, "step {n}");
                    assert!(shed.len() <= 1, "step {n}: shed {shed:?}");
                    if let Some(id) = shed.first() {
                        tokens.remove(id);
                    }
                }
                Step::Refused(peer) => {
                    assert_eq!(
                        table.admit(*peer, CancellationToken::new()).err(),
                        Some(Full),
                        "step {n}"
                    );
                }
                Step::Serve(id) => table.set_standing(*id, Standing::Serving),
                Step::Waits(id, true) => {
                    table.move_standing(*id, Standing::Serving, Standing::Stalled)
                }
                Step::Waits(id, false) => {
                    table.move_standing(*id, Standing::Stalled, Standing::Serving)
                }
                Step::End(id, standing) => table.set_standing(*id, *standing),
                Step::Close(id) => {
                    table.remove(*id);
                    tokens.remove(id);
                }
            }
            assert!(table.connections.len() <= table.bound, "step {n}");
            let open: usize = table.shares.values().map(|s| s.open).sum();
            assert_eq!(open, table.connections.len(), "step {n}");
        }
    }

    #[test]
    fn below_the_bound_nothing_is_shed() {
        use Step::*;
        check(3, &[Admit(A, None), Admit(B, None), Admit(A, None)]);
    }

    #[test]
    fn the_peer_holding_the_most_loses_its_oldest_unproven_connection() {
        use Step::*;
        check(
            4,
            &[
                // B came first and holds one connection; A floods.
                Admit(B, None),
                Admit(A, None),
                Admit(A, None),
                Admit(A, None),
                Admit(A, Some(1)),
                Admit(A, Some(2)),
                // B's new connection sheds from A too.
                Admit(B, Some(3)),
                // Now B holds 2 and A 2 (4, 5): A's new connection makes 3, so A's 4 goes.
                Admit(A, Some(4)),
                // B's makes it 3 against A's 2: B's oldest goes.
                Admit(B, Some(0)),
            ],
        );
    }

    #[test]
    fn unproven_connections_go_before_proven_ones_and_serving_ones_never() {
        use Step::*;
        check(
            3,
            &[
                Admit(A, None),
                Admit(A, None),
                Admit(A, None),
                // 0 is serving, 1 proven (idle after an admitted request): 2 goes first.
                Serve(0),
                Serve(1),
                End(1, Standing::Proven),
                Admit(A, Some(2)),
                // With 3 serving, nothing unproven is left: the proven 1 goes.
                Serve(3),
                Admit(A, Some(1)),
                Serve(4),
                // Every place serves a request: a new connection is refused.
                Refused(B),
                Close(0),
                Admit(B, None),
            ],
        );
    }

    #[test]
    fn stalled_answers_go_last_and_oldest_first() {
        use Step::*;
        check(
            3,
            &[
                Admit(A, None),
                Admit(A, None),
                Admit(A, None),
                // Every place serves; 1 and 2 wait for their slow client.
                Serve(0),
                Serve(1),
                Serve(2),
                Waits(2, true),
                Waits(1, true),
                // A probe's connection: the oldest stalled answer, 1, makes way.
                Admit(B, Some(1)),
                Serve(3),
                // 2's client read again: serving, not to be shed; nothing is left to shed.
                Waits(2, false),
                Refused(B),
                // A connection that is not serving cannot be stalled; one that ended is not
                // serving again because its last write was taken.
                Waits(3, true),
                End(3, Standing::Proven),
                Waits(3, false),
                Admit(B, Some(3)),
            ],
        );
    }

    #[test]
    fn a_peer_with_nothing_to_shed_is_passed_over() {
        use Step::*;
        check(
            3,
            &[
                Admit(A, None),
                Admit(A, None),
                Admit(B, None),
                Serve(0),
                Serve(1),
                // A holds the most but serves both: B's unproven 2 is shed.
                Admit(B, Some(2)),
            ],
        );
    }

    #[test]
    fn bounds_follow_the_descriptor_limit() {
        assert_eq!(connection_bound(1024), 1024 - RESERVED_DESCRIPTORS as usize);
        assert_eq!(connection_bound(20_000), MAX_OPEN_CONNECTIONS);
        assert_eq!(connection_bound(400), 200);
        assert_eq!(connection_bound(0), 1);
    }

    #[test]
    fn ipv6_peers_count_by_their_64() {
        let a = PeerKey::address("2001:db8:1:2::1".parse().expect("ip"));
        let b = PeerKey::address("2001:db8:1:2:ffff::9".parse().expect("ip"));
        let c = PeerKey::address("2001:db8:1:3::1".parse().expect("ip"));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(
            PeerKey::address("::ffff:127.0.0.2".parse().expect("ip")),
            PeerKey::Address("127.0.0.2".parse().expect("ip"))
        );
        assert_ne!(
            PeerKey::address("127.0.0.1".parse().expect("ip")),
            PeerKey::address("127.0.0.2".parse().expect("ip"))
        );
    }

    #[test]
    fn a_request_mark_leaves_the_connection_proven_or_unproven() {
        let admission = Admission::new(2);
        let first = Arc::new(admission.admit(A).expect("admitted"));
        let second = Arc::new(admission.admit(A).expect("admitted"));
        let mut mark = first.request_began();
        mark.ended(RequestOutcome::Answered);
        drop(mark);
        drop(second.request_began());
        // The second was refused: unproven, so it goes before the proven first.
        let third = admission.admit(B).expect("admitted");
        assert!(second.shed().is_cancelled());
        assert!(!first.shed().is_cancelled());
        drop(third);
        assert_eq!(admission.state().table.connections.len(), 1);
    }
}
