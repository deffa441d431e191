//! NOTIFY (RFC 1996) from primaries over UDP and TCP on one address: a primary says its
//! zone changed, and the secondary refreshes it now rather than at its next SOA timer.
//!
//! A NOTIFY only ever triggers a refresh — the refresh verifies what it transfers — but it
//! is still checked as the RFCs say: the zone picks the entry, only that entry's primaries
//! are heard, and with a key only a NOTIFY signed with it (RFC 8945), whose answer is then
//! signed too. Whatever reaches the listener is bounded: message sizes, TCP connections at
//! once and their idle time; refusals are logged at most once a second.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use domain::base::iana::{Opcode, Rcode, Rtype};
use domain::base::name::ToName;
use domain::base::{Message, MessageBuilder, Name};
use domain::rdata::tsig::Time48;
use domain::rdata::Soa;
use domain::tsig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::TsigKey;

/// The largest NOTIFY taken: a question, a SOA, a TSIG record, with room to spare.
const MAX_MESSAGE: usize = 4096;

/// TCP connections served at once; further ones are closed at once.
const MAX_CONNECTIONS: usize = 32;

/// How long a TCP connection may wait for its next message.
const IDLE: Duration = Duration::from_secs(10);

/// A zone whose NOTIFYs a listener accepts.
#[derive(Clone, Debug)]
pub struct NotifyZone {
    /// The zone's name, as [`super::zone_name`] normalises it.
    pub zone: String,
    /// The addresses NOTIFY is accepted from (the zone's primaries).
    pub primaries: Vec<IpAddr>,
    /// The key a NOTIFY must be signed with, when the zone has one.
    pub key: Option<TsigKey>,
}

/// A NOTIFY accepted: the zone should be refreshed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notified {
    /// The zone, as in its [`NotifyZone`].
    pub zone: String,
    /// Where the NOTIFY came from.
    pub from: SocketAddr,
    /// The serial the NOTIFY carried in its answer section, if any.
    pub serial: Option<u32>,
}

/// A zone of the listener, its name parsed.
struct Zone {
    /// The zone's name.
    name: Name<Vec<u8>>,
    /// The entry it was made from.
    entry: NotifyZone,
}

/// Sockets answering NOTIFY on one address, UDP and TCP.
pub struct NotifyListener {
    /// The UDP socket.
    udp: UdpSocket,
    /// The TCP listener, on the same address and port.
    tcp: TcpListener,
    /// The zones accepted here.
    zones: Arc<Vec<Zone>>,
}

impl NotifyListener {
    /// Bind UDP and TCP on `addr` (port 0: one free port for both). A zone name that is
    /// not one is an `InvalidInput` error.
    pub async fn bind(addr: SocketAddr, zones: Vec<NotifyZone>) -> std::io::Result<NotifyListener> {
        let zones = zones
            .into_iter()
            .map(|entry| {
                let name = super::zone_name(&entry.zone)
                    .ok()
                    .and_then(|z| Name::<Vec<u8>>::from_str(&z).ok())
                    .ok_or_else(|| {
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidInput,
                            format!("'{}' is not a zone name", entry.zone),
                        )
                    })?;
                Ok(Zone { name, entry })
            })
            .collect::<std::io::Result<Vec<Zone>>>()?;
        let tcp = TcpListener::bind(addr).await?;
        let udp = UdpSocket::bind(tcp.local_addr()?).await?;
        Ok(NotifyListener {
            udp,
            tcp,
            zones: Arc::new(zones),
        })
    }

    /// The address bound (its port, when 0 was asked for).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Answers NOTIFYs until `stop`: the zone picks the entry; accepted only from that
    /// entry's primaries and, with a key, only when signed with it (the answer is signed
    /// too); refused ones are answered REFUSED/NOTAUTH as RFC 1996 / 8945 say, logged at most
    /// once a second.
    pub async fn serve(self, accepted: mpsc::Sender<Notified>, stop: CancellationToken) {
        let context = Arc::new(Context {
            zones: self.zones,
            accepted,
            noise: Mutex::new(Noise::default()),
            stop,
        });
        let tracker = TaskTracker::new();
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let mut buffer = vec![0u8; MAX_MESSAGE];
        loop {
            tokio::select! {
                () = context.stop.cancelled() => break,
                received = self.udp.recv_from(&mut buffer) => {
                    let Ok((len, from)) = received else { continue };
                    let handled = handle(&context.zones, &buffer[..len], from, Time48::now());
                    if let Some(answer) = &handled.answer {
                        let _ = self.udp.send_to(answer, from).await;
                    }
                    context.deliver(handled.verdict, from).await;
                }
                connection = self.tcp.accept() => {
                    let Ok((stream, from)) = connection else { continue };
                    // Only a primary may hold one of the few connection places: anyone
                    // else could keep them all, and the primaries' NOTIFY out.
                    if !context.is_primary(from) {
                        context.noise(from, "a TCP connection from no zone's primary");
                        continue;
                    }
                    let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                        context.noise(from, "too many TCP connections at once");
                        continue;
                    };
                    let context = Arc::clone(&context);
                    tracker.spawn(async move {
                        context.connection(stream, from).await;
                        drop(slot);
                    });
                }
            }
        }
        tracker.close();
        tracker.wait().await;
    }
}

/// What the listener's tasks share.
struct Context {
    /// The zones accepted.
    zones: Arc<Vec<Zone>>,
    /// Where accepted NOTIFYs go.
    accepted: mpsc::Sender<Notified>,
    /// The rate limit of the log of refusals.
    noise: Mutex<Noise>,
    /// When to stop.
    stop: CancellationToken,
}

impl Context {
    /// Whether `from` is a primary of one of the zones.
    fn is_primary(&self, from: SocketAddr) -> bool {
        let ip = from.ip().to_canonical();
        self.zones.iter().any(|z| z.entry.primaries.contains(&ip))
    }

    /// Serve one TCP connection: messages until it closes, idles or sends too much.
    async fn connection(&self, mut stream: TcpStream, from: SocketAddr) {
        loop {
            let read = tokio::select! {
                () = self.stop.cancelled() => return,
                read = tokio::time::timeout(IDLE, read_message(&mut stream)) => read,
            };
            let request = match read {
                Ok(Ok(Some(request))) => request,
                Ok(Ok(None)) => return,
                Ok(Err(_)) | Err(_) => {
                    self.noise(from, "a TCP connection too slow, too large or broken");
                    return;
                }
            };
            let handled = handle(&self.zones, &request, from, Time48::now());
            if let Some(answer) = &handled.answer {
                let Ok(len) = u16::try_from(answer.len()) else {
                    return;
                };
                let mut framed = len.to_be_bytes().to_vec();
                framed.extend_from_slice(answer);
                if tokio::time::timeout(IDLE, stream.write_all(&framed))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            self.deliver(handled.verdict, from).await;
        }
    }

    /// Pass an accepted NOTIFY on; log a refused one (rate-limited).
    async fn deliver(&self, verdict: Verdict, from: SocketAddr) {
        match verdict {
            // Told by the zone's task, which paces it (at most a line a second).
            Verdict::Accepted(notified) => {
                tokio::select! {
                    () = self.stop.cancelled() => {}
                    _ = self.accepted.send(notified) => {}
                }
            }
            Verdict::Refused(reason) => self.noise(from, &reason),
        }
    }

    /// Log `reason` for a message from `from`, at most once a second.
    fn noise(&self, from: SocketAddr, reason: &str) {
        if let Ok(mut noise) = self.noise.lock() {
            noise.log(from, reason, Instant::now());
        }
    }
}

/// Read one length-prefixed message; `None` at a clean end of the connection.
async fn read_message(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 2];
    match stream.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = usize::from(u16::from_be_bytes(len));
    if len > MAX_MESSAGE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "a message larger than a NOTIFY",
        ));
    }
    let mut message = vec![0; len];
    stream.read_exact(&mut message).await?;
    Ok(Some(message))
}

/// The rate limit of the log of refused messages.
#[derive(Debug, Default)]
struct Noise {
    /// When the last line was logged.
    last: Option<Instant>,
    /// Refusals not logged since.
    suppressed: u64,
}

impl Noise {
    /// Log a refusal unless one was logged less than a second ago; whether it was logged.
    fn log(&mut self, from: SocketAddr, reason: &str, now: Instant) -> bool {
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < Duration::from_secs(1))
        {
            self.suppressed += 1;
            return false;
        }
        let suppressed = std::mem::take(&mut self.suppressed);
        self.last = Some(now);
        if suppressed > 0 {
            tracing::warn!("rpz: NOTIFY from {from} refused: {reason} ({suppressed} more refused and not logged)");
        } else {
            tracing::warn!("rpz: NOTIFY from {from} refused: {reason}");
        }
        true
    }
}

/// What became of a message.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// A NOTIFY for a zone of ours from its primary, signed as it must be.
    Accepted(Notified),
    /// Anything else, and why.
    Refused(String),
}

/// A message handled: the answer to send back (none to garbage or to a response), and
/// what became of it.
#[derive(Debug)]
struct Handled {
    /// The answer.
    answer: Option<Vec<u8>>,
    /// What became of the message.
    verdict: Verdict,
}

fn refused(answer: Option<Vec<u8>>, reason: impl Into<String>) -> Handled {
    Handled {
        answer,
        verdict: Verdict::Refused(reason.into()),
    }
}

/// Handle the message `request` from `from` at `now`.
fn handle(zones: &[Zone], request: &[u8], from: SocketAddr, now: Time48) -> Handled {
    let Ok(mut message) = Message::from_octets(request.to_vec()) else {
        return refused(None, "shorter than a DNS header");
    };
    let header = message.header();
    if header.qr() {
        return refused(None, "a response, not a NOTIFY");
    }
    if header.opcode() != Opcode::NOTIFY {
        let opcode = header.opcode();
        return refused(
            respond(&message, Rcode::NOTIMP, None),
            format!("opcode {opcode}"),
        );
    }
    let question = match message.sole_question() {
        Ok(q) if q.qtype() == Rtype::SOA => q,
        _ => {
            return refused(
                respond(&message, Rcode::FORMERR, None),
                "not one SOA question",
            )
        }
    };
    let qname = question.qname().fmt_with_dot().to_string();
    let Some(zone) = zones.iter().find(|z| question.qname().name_eq(&z.name)) else {
        let answer = respond(&message, Rcode::NOTAUTH, None);
        return refused(answer, format!("the zone {qname} is not served here"));
    };
    if !zone.entry.primaries.contains(&from.ip().to_canonical()) {
        let answer = respond(&message, Rcode::REFUSED, None);
        return refused(answer, format!("{} is no primary of {qname}", from.ip()));
    }
    let serial = notified_serial(&message);
    let store = ZoneKey(zone.entry.key.as_ref().map(TsigKey::inner));
    let signed = match tsig::ServerTransaction::request(&store, &mut message, now) {
        Ok(signed) => signed,
        Err(error) => {
            let reason = format!("TSIG: {error}");
            let answer = error
                .build_message(&message, MessageBuilder::new_vec())
                .ok()
                .map(|b| b.finish());
            return refused(answer, reason);
        }
    };
    if signed.is_none() && zone.entry.key.is_some() {
        let answer = respond(&message, Rcode::REFUSED, None);
        return refused(answer, format!("not signed with the key of {qname}"));
    }
    Handled {
        answer: respond(&message, Rcode::NOERROR, signed),
        verdict: Verdict::Accepted(Notified {
            zone: zone.entry.zone.clone(),
            from,
            serial,
        }),
    }
}

/// The serial of the SOA a NOTIFY may carry in its answer section (RFC 1996 §3.7).
fn notified_serial(message: &Message<Vec<u8>>) -> Option<u32> {
    let answer = message.answer().ok()?;
    answer
        .limit_to::<Soa<_>>()
        .flatten()
        .next()
        .map(|record| record.data().serial().into_int())
}

/// The answer to `request` with `rcode` (RFC 1996 §4.7: same id, opcode and question, QR
/// set; AA when accepted), signed in `signed`'s transaction when the request was.
fn respond(
    request: &Message<Vec<u8>>,
    rcode: Rcode,
    signed: Option<tsig::ServerTransaction<Arc<tsig::Key>>>,
) -> Option<Vec<u8>> {
    let mut answer = MessageBuilder::new_vec()
        .start_answer(request, rcode)
        .ok()?;
    answer.header_mut().set_aa(rcode == Rcode::NOERROR);
    let mut additional = answer.additional();
    if let Some(transaction) = signed {
        transaction.answer(&mut additional, Time48::now()).ok()?;
    }
    Some(additional.finish())
}

/// The key store of one zone: its key, or none (then every signed NOTIFY gets BADKEY).
struct ZoneKey(Option<Arc<tsig::Key>>);

impl tsig::KeyStore for ZoneKey {
    type Key = Arc<tsig::Key>;

    fn get_key<N: ToName>(&self, name: &N, algorithm: tsig::Algorithm) -> Option<Self::Key> {
        let key = self.0.as_ref()?;
        (key.name().name_eq(name) && key.algorithm() == algorithm).then(|| Arc::clone(key))
    }
}

#[cfg(test)]
mod tests {
    use domain::base::{Serial, Ttl};

    use super::*;

    const PRIMARY: &str = "192.0.2.53:53";
    const KEY: &str = "key \"xfr-key.\" { algorithm hmac-sha256; secret \"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0IQ==\"; };";
    const OTHER_KEY: &str =
        "key \"xfr-key.\" { algorithm hmac-sha256; secret \"b3RoZXItb3RoZXItb3RoZXIh\"; };";

    fn zones() -> Vec<Zone> {
        let entry = |zone: &str, key: Option<&str>| NotifyZone {
            zone: zone.to_owned(),
            primaries: vec!["192.0.2.53".parse().unwrap()],
            key: key.map(|k| TsigKey::parse(k).unwrap()),
        };
        [entry("open.rpz.", None), entry("signed.rpz.", Some(KEY))]
            .into_iter()
            .map(|entry| Zone {
                name: Name::from_str(&entry.zone).unwrap(),
                entry,
            })
            .collect()
    }

    /// A NOTIFY for `zone` carrying `serial`, signed with `key`.
    fn notify(
        zone: &str,
        opcode: Opcode,
        key: Option<&str>,
    ) -> (Vec<u8>, Option<tsig::ClientTransaction<Arc<tsig::Key>>>) {
        let mut builder = MessageBuilder::new_vec();
        builder.header_mut().set_id(4711);
        builder.header_mut().set_opcode(opcode);
        let zone = Name::<Vec<u8>>::from_str(zone).unwrap();
        let mut question = builder.question();
        question.push((&zone, Rtype::SOA)).unwrap();
        let mut answer = question.answer();
        let soa = Soa::new(
            zone.clone(),
            zone.clone(),
            Serial(42),
            Ttl::ZERO,
            Ttl::ZERO,
            Ttl::ZERO,
            Ttl::ZERO,
        );
        answer.push((&zone, Ttl::ZERO, soa)).unwrap();
        let mut additional = answer.additional();
        let transaction = key.map(|k| {
            let key = TsigKey::parse(k).unwrap().inner();
            tsig::ClientTransaction::request(key, &mut additional, Time48::now()).unwrap()
        });
        (additional.finish(), transaction)
    }

    fn check(request: &[u8], from: &str) -> (Option<Message<Vec<u8>>>, Verdict) {
        let handled = handle(&zones(), request, from.parse().unwrap(), Time48::now());
        let answer = handled.answer.map(|a| Message::from_octets(a).unwrap());
        (answer, handled.verdict)
    }

    #[test]
    fn a_notify_from_a_primary_is_answered_and_accepted() {
        let (request, _) = notify("Open.RPZ.", Opcode::NOTIFY, None);
        let (answer, verdict) = check(&request, PRIMARY);
        let answer = answer.unwrap();
        let header = answer.header();
        assert_eq!(header.id(), 4711);
        assert!(header.qr() && header.aa());
        assert_eq!(header.opcode(), Opcode::NOTIFY);
        assert_eq!(header.rcode(), Rcode::NOERROR);
        let question = answer.sole_question().unwrap();
        assert_eq!(question.qname().to_string(), "Open.RPZ");
        assert_eq!(question.qtype(), Rtype::SOA);
        assert_eq!(
            verdict,
            Verdict::Accepted(Notified {
                zone: "open.rpz.".to_owned(),
                from: PRIMARY.parse().unwrap(),
                serial: Some(42),
            })
        );
    }

    #[test]
    fn a_signed_notify_gets_a_signed_answer() {
        let (request, transaction) = notify("signed.rpz.", Opcode::NOTIFY, Some(KEY));
        let (answer, verdict) = check(&request, PRIMARY);
        let mut answer = answer.unwrap();
        assert_eq!(answer.header().rcode(), Rcode::NOERROR);
        transaction
            .unwrap()
            .answer(&mut answer, Time48::now())
            .expect("the answer is signed with the key");
        assert!(matches!(verdict, Verdict::Accepted(_)));
    }

    #[test]
    fn refusals_are_answered_as_the_rfcs_say() {
        let rcode = |request: &[u8], from: &str| {
            let (answer, verdict) = check(request, from);
            assert!(matches!(verdict, Verdict::Refused(_)), "{verdict:?}");
            answer.map(|a| a.header().rcode())
        };
        let (unsigned, _) = notify("signed.rpz.", Opcode::NOTIFY, None);
        assert_eq!(rcode(&unsigned, PRIMARY), Some(Rcode::REFUSED));
        let (wrong_key, _) = notify("signed.rpz.", Opcode::NOTIFY, Some(OTHER_KEY));
        assert_eq!(rcode(&wrong_key, PRIMARY), Some(Rcode::NOTAUTH));
        let (key_unknown, _) = notify("open.rpz.", Opcode::NOTIFY, Some(KEY));
        assert_eq!(rcode(&key_unknown, PRIMARY), Some(Rcode::NOTAUTH));
        let (unknown_zone, _) = notify("other.rpz.", Opcode::NOTIFY, None);
        assert_eq!(rcode(&unknown_zone, PRIMARY), Some(Rcode::NOTAUTH));
        let (request, _) = notify("open.rpz.", Opcode::NOTIFY, None);
        assert_eq!(rcode(&request, "198.51.100.1:53"), Some(Rcode::REFUSED));
        let (query, _) = notify("open.rpz.", Opcode::QUERY, None);
        assert_eq!(rcode(&query, PRIMARY), Some(Rcode::NOTIMP));
        assert_eq!(rcode(b"garbage", PRIMARY), None);
        let (mut response, _) = notify("open.rpz.", Opcode::NOTIFY, None);
        response[2] |= 0x80;
        assert_eq!(rcode(&response, PRIMARY), None, "responses get no answer");
    }

    #[test]
    fn refusals_are_logged_at_most_once_a_second() {
        let mut noise = Noise::default();
        let from: SocketAddr = PRIMARY.parse().unwrap();
        let start = Instant::now();
        assert!(noise.log(from, "x", start));
        assert!(!noise.log(from, "x", start + Duration::from_millis(500)));
        assert!(!noise.log(from, "x", start + Duration::from_millis(999)));
        assert_eq!(noise.suppressed, 2);
        assert!(noise.log(from, "x", start + Duration::from_millis(1000)));
        assert_eq!(noise.suppressed, 0);
    }

    /// A listener on 127.0.0.1 for `open.rpz` from `primary`, serving.
    struct Serving {
        addr: SocketAddr,
        accepted: mpsc::Receiver<Notified>,
        stop: CancellationToken,
        served: tokio::task::JoinHandle<()>,
    }

    impl Serving {
        async fn start(primary: &str) -> Serving {
            let zone = NotifyZone {
                zone: "open.rpz".to_owned(),
                primaries: vec![primary.parse().unwrap()],
                key: None,
            };
            let listener = NotifyListener::bind("127.0.0.1:0".parse().unwrap(), vec![zone])
                .await
                .unwrap();
            let (tx, accepted) = mpsc::channel(4);
            let stop = CancellationToken::new();
            Serving {
                addr: listener.local_addr().unwrap(),
                accepted,
                served: tokio::spawn(listener.serve(tx, stop.clone())),
                stop,
            }
        }

        async fn stop(self) {
            self.stop.cancel();
            self.served.await.unwrap();
        }
    }

    /// `message` with its TCP length prefix.
    fn framed(message: &[u8]) -> Vec<u8> {
        let mut framed = u16::try_from(message.len()).unwrap().to_be_bytes().to_vec();
        framed.extend_from_slice(message);
        framed
    }

    #[tokio::test]
    async fn notify_is_heard_over_udp_and_tcp_on_one_address() {
        let mut serving = Serving::start("127.0.0.1").await;
        let (addr, rx) = (serving.addr, &mut serving.accepted);
        let (request, _) = notify("open.rpz.", Opcode::NOTIFY, None);

        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        udp.send_to(&request, addr).await.unwrap();
        let mut buffer = [0u8; 512];
        let len = udp.recv(&mut buffer).await.unwrap();
        let answer = Message::from_octets(buffer[..len].to_vec()).unwrap();
        assert_eq!(answer.header().rcode(), Rcode::NOERROR);
        assert_eq!(rx.recv().await.unwrap().from, udp.local_addr().unwrap());

        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(&framed(&request)).await.unwrap();
        let answer = read_message(&mut tcp).await.unwrap().unwrap();
        let answer = Message::from_octets(answer).unwrap();
        assert_eq!(answer.header().id(), 4711);
        let notified = rx.recv().await.unwrap();
        assert_eq!(
            (notified.zone.as_str(), notified.serial),
            ("open.rpz", Some(42))
        );
        // An oversized message closes the connection.
        tcp.write_all(&[0xff, 0xff]).await.unwrap();
        assert_eq!(read_message(&mut tcp).await.unwrap(), None);
        serving.stop().await;
    }

    #[tokio::test]
    async fn idle_connections_from_no_primary_keep_no_place_from_the_primaries() {
        // The primary is 127.0.0.2; the hostile client connects from 127.0.0.1.
        let mut serving = Serving::start("127.0.0.2").await;
        let addr = serving.addr;
        // Twice as many idle connections as there are places, all queued before the
        // primary's: were they held, the primary's would find none and be closed unanswered.
        let mut idle = Vec::new();
        for _ in 0..2 * MAX_CONNECTIONS {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut primary = socket.connect(addr).await.unwrap();
        let (request, _) = notify("open.rpz.", Opcode::NOTIFY, None);
        primary.write_all(&framed(&request)).await.unwrap();
        let answer = read_message(&mut primary).await.unwrap().unwrap();
        let answer = Message::from_octets(answer).unwrap();
        assert_eq!(answer.header().rcode(), Rcode::NOERROR);
        assert_eq!(serving.accepted.recv().await.unwrap().zone, "open.rpz");
        serving.stop().await;
    }
}
