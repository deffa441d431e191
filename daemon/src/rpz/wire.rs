//! DNS messages over TCP to a primary, within the bounds of [`Limits`]: every connect and
//! every message read must finish within the idle bound and before the refresh's deadline,
//! and the bytes received are counted against the size bound. A message is at most 64 KiB
//! (its length prefix), so reading one never holds more.

use std::net::SocketAddr;
use std::time::Duration;

use domain::base::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{Limits, TransferError};

/// What one refresh may still spend: time and bytes.
#[derive(Debug)]
pub(crate) struct Budget {
    /// The bounds.
    limits: Limits,
    /// When the refresh must be over.
    deadline: Instant,
    /// Bytes of messages received so far.
    bytes: u64,
}

impl Budget {
    /// The budget of a refresh starting now.
    pub(crate) fn new(limits: &Limits) -> Budget {
        Budget {
            limits: limits.clone(),
            deadline: Instant::now() + limits.max_duration,
            bytes: 0,
        }
    }

    /// Bytes received so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The bounds.
    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Run `io` (`what`, for the error) within the idle bound and the deadline.
    async fn within<T>(
        &self,
        what: &str,
        io: impl std::future::Future<Output = T>,
    ) -> Result<T, TransferError> {
        let idle = Instant::now() + self.limits.idle;
        let (until, bound) = if idle < self.deadline {
            (idle, format!("idle bound of {}", seconds(self.limits.idle)))
        } else {
            (
                self.deadline,
                format!("bound of {}", seconds(self.limits.max_duration)),
            )
        };
        tokio::time::timeout_at(until, io)
            .await
            .map_err(|_| TransferError::Timeout(format!("{what}: the {bound} was reached")))
    }

    /// Count `n` bytes received.
    fn count(&mut self, n: usize) -> Result<(), TransferError> {
        self.bytes += n as u64;
        if self.bytes > self.limits.max_bytes {
            return Err(TransferError::TooLarge(format!(
                "more than {} bytes",
                self.limits.max_bytes
            )));
        }
        Ok(())
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// A TCP connection to a primary.
pub(crate) struct Connection {
    /// The stream, read through a buffer.
    stream: BufReader<TcpStream>,
    /// The primary, for errors.
    primary: SocketAddr,
}

impl Connection {
    /// Connect to `primary`.
    pub(crate) async fn open(
        primary: SocketAddr,
        budget: &Budget,
    ) -> Result<Connection, TransferError> {
        let stream = budget
            .within("connecting", TcpStream::connect(primary))
            .await?
            .map_err(|source| TransferError::Connect { primary, source })?;
        let _ = stream.set_nodelay(true);
        Ok(Connection {
            stream: BufReader::with_capacity(64 * 1024, stream),
            primary,
        })
    }

    fn network(&self, source: std::io::Error) -> TransferError {
        TransferError::Network {
            primary: self.primary,
            source,
        }
    }

    /// Send `message` (without its length prefix).
    pub(crate) async fn send(
        &mut self,
        message: &[u8],
        budget: &Budget,
    ) -> Result<(), TransferError> {
        let len = u16::try_from(message.len())
            .map_err(|_| TransferError::Malformed("a query over 64 KiB".to_owned()))?;
        let mut framed = Vec::with_capacity(message.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(message);
        let stream = self.stream.get_mut();
        let sent = budget.within("sending", stream.write_all(&framed)).await?;
        sent.map_err(|e| self.network(e))
    }

    /// Receive the next message.
    pub(crate) async fn receive(
        &mut self,
        budget: &mut Budget,
    ) -> Result<Message<Vec<u8>>, TransferError> {
        let stream = &mut self.stream;
        let read = budget
            .within("waiting for the primary", async {
                let len = stream.read_u16().await?;
                let mut message = vec![0; usize::from(len)];
                stream.read_exact(&mut message).await?;
                Ok::<_, std::io::Error>(message)
            })
            .await?;
        let message = match read {
            Ok(message) => message,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(TransferError::Malformed(
                    "the primary closed the connection in the middle of the answer".to_owned(),
                ))
            }
            Err(e) => return Err(self.network(e)),
        };
        budget.count(message.len() + 2)?;
        Message::from_octets(message)
            .map_err(|_| TransferError::Malformed("a message shorter than its header".to_owned()))
    }
}
