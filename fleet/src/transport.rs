//! One exchange with one etcd member: connect (TCP, then TLS for `https`), send one HTTP/1.1
//! POST to the JSON gateway, and read the answer within a byte bound — whole for a unary
//! call, line by line for a stream (watch, lease keep-alive). Failures are sorted by what the
//! caller may do next ([`AttemptError`]): nothing was sent (try the next member), the request
//! went out and the connection broke (a write's outcome is unknown), etcd refused it (its
//! gRPC code and message), or the answer is refused here (too large, malformed).
//!
//! Every exchange has a connection of its own (no pool): a fleet's calls are few, and a
//! connection dies with its call. hyper's connection task is owned by the call's [`Answer`]:
//! it ends with the connection, and is aborted when the answer is dropped, read or not.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::task::AbortOnDropHandle;

use crate::config::{Endpoint, Scheme, Settings};
use crate::error::Error;
use crate::wire;

/// The most bytes of an error answer read (etcd's are a line of JSON).
const MAX_ERROR_BODY: usize = 64 << 10;

/// Why one exchange with one member failed.
#[derive(Debug)]
pub(crate) enum AttemptError {
    /// Nothing was sent: the next member may be tried with any call.
    Connect(String),
    /// The request was sent and the connection failed: a write's outcome is unknown.
    Interrupted(String),
    /// etcd answered with an error (its gRPC status code and message).
    Refused { code: i64, message: String },
    /// The answer is refused here; trying elsewhere would not help.
    Final(Error),
}

/// A stream both plain TCP and TLS connections are.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Connect to `endpoint` and make an HTTP/1.1 connection on it.
async fn connect(
    settings: &Settings,
    endpoint: &Endpoint,
) -> Result<(SendRequest<Full<Bytes>>, AbortOnDropHandle<()>), AttemptError> {
    let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(|e| AttemptError::Connect(chain(&e)))?;
    // Requests are small and answered at once: no Nagle delay on them.
    let _ = tcp.set_nodelay(true);
    let io: Box<dyn Io> = match (endpoint.scheme, &settings.tls) {
        (Scheme::Http, _) => Box::new(tcp),
        (Scheme::Https, None) => {
            return Err(AttemptError::Connect(
                "https endpoint without TLS settings".to_owned(),
            ))
        }
        (Scheme::Https, Some(tls)) => {
            let name = match &tls.server_name {
                Some(name) => name.clone(),
                None => ServerName::try_from(endpoint.host.clone()).map_err(|e| {
                    AttemptError::Connect(format!("{} as a TLS name: {e}", endpoint.host))
                })?,
            };
            let stream = tls
                .connector
                .connect(name, tcp)
                .await
                .map_err(|e| AttemptError::Connect(format!("TLS: {}", chain(&e))))?;
            Box::new(stream)
        }
    };
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| AttemptError::Connect(chain(&e)))?;
    // Ends when the connection closes: after the answer, once sender and body are dropped;
    // aborted when its owner, the answer, is dropped first.
    let connection = AbortOnDropHandle::new(tokio::spawn(async move {
        let _ = connection.await;
    }));
    Ok((sender, connection))
}

/// An answer's body, with the task that drives its connection (aborted when this is dropped).
pub(crate) struct Answer {
    body: Incoming,
    _connection: AbortOnDropHandle<()>,
}

impl Answer {
    /// The body's next frame, `None` at its end.
    async fn frame(&mut self) -> Option<Result<hyper::body::Frame<Bytes>, hyper::Error>> {
        self.body.frame().await
    }
}

/// What to send: the gateway's path, the JSON body and the headers beside it.
pub(crate) struct Call<'a> {
    pub path: &'a str,
    pub body: Bytes,
    /// etcd's auth token, when auth is on.
    pub token: Option<&'a str>,
}

/// Send `call` to `endpoint`; the answer's body when etcd said 200.
pub(crate) async fn send(
    settings: &Settings,
    endpoint: &Endpoint,
    call: &Call<'_>,
) -> Result<Answer, AttemptError> {
    let (mut sender, connection) = connect(settings, endpoint).await?;
    let mut request = Request::post(call.path)
        .header(hyper::header::HOST, host_header(endpoint))
        .header(hyper::header::CONTENT_TYPE, "application/json")
        // etcd refuses the call at once ("no leader") on a member cut off from the
        // leader, instead of holding it: the next member is tried.
        .header("grpc-metadata-hasleader", "true");
    if let Some(token) = call.token {
        request = request.header(hyper::header::AUTHORIZATION, token);
    }
    let request = request
        .body(Full::new(call.body.clone()))
        .map_err(|e| AttemptError::Final(Error::malformed("request", e)))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| AttemptError::Interrupted(chain(&e)))?;
    let status = response.status();
    let body = Answer {
        body: response.into_body(),
        _connection: connection,
    };
    if status == StatusCode::OK {
        return Ok(body);
    }
    let text = read_to_end(body, MAX_ERROR_BODY, "an error answer").await?;
    match wire::parse::<wire::ErrorBody>("an error answer", &text) {
        Ok(e) => Err(AttemptError::Refused {
            code: e.code,
            message: if e.message.is_empty() {
                e.error
            } else {
                e.message
            },
        }),
        Err(_) => Err(AttemptError::Refused {
            code: -1,
            message: format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&text[..text.len().min(200)])
            ),
        }),
    }
}

fn host_header(endpoint: &Endpoint) -> String {
    if endpoint.host.contains(':') {
        format!("[{}]:{}", endpoint.host, endpoint.port)
    } else {
        format!("{}:{}", endpoint.host, endpoint.port)
    }
}

/// The whole body, refused past `limit` bytes (read no further than that).
pub(crate) async fn read_to_end(
    mut body: Answer,
    limit: usize,
    what: &str,
) -> Result<Vec<u8>, AttemptError> {
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| AttemptError::Interrupted(chain(&e)))?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > limit {
                return Err(AttemptError::Final(Error::TooLarge {
                    what: what.to_owned(),
                    limit,
                }));
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

/// A streamed answer read line by line (grpc-gateway writes one JSON message a line), each
/// line bounded.
pub(crate) struct Lines {
    body: Answer,
    /// Bytes read and not yet returned (at most one line and what followed it in a frame).
    buffered: Vec<u8>,
    /// How much of `buffered` is known to hold no line end.
    scanned: usize,
    /// The longest line taken.
    limit: usize,
    /// What is being read, for errors.
    what: String,
}

impl Lines {
    pub(crate) fn new(body: Answer, limit: usize, what: String) -> Lines {
        Lines {
            body,
            buffered: Vec::new(),
            scanned: 0,
            limit,
            what,
        }
    }

    /// The next non-empty line, or `None` at the end of the stream.
    pub(crate) async fn next(&mut self) -> Result<Option<Vec<u8>>, AttemptError> {
        loop {
            let end = self.buffered[self.scanned..]
                .iter()
                .position(|b| *b == b'\n')
                .map(|at| self.scanned + at);
            self.scanned = self.buffered.len();
            if let Some(at) = end {
                self.scanned = 0;
                let mut line: Vec<u8> = self.buffered.drain(..=at).collect();
                line.pop();
                if line.len() > self.limit {
                    return Err(AttemptError::Final(Error::TooLarge {
                        what: self.what.clone(),
                        limit: self.limit,
                    }));
                }
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            if self.buffered.len() > self.limit {
                return Err(AttemptError::Final(Error::TooLarge {
                    what: self.what.clone(),
                    limit: self.limit,
                }));
            }
            let Some(frame) = self.body.frame().await else {
                return Ok(None);
            };
            let frame = frame.map_err(|e| AttemptError::Interrupted(chain(&e)))?;
            if let Ok(data) = frame.into_data() {
                // hyper hands a body over in pieces of at most its read buffer (~400 KiB),
                // so a line without an end is refused having held little over `limit`.
                self.buffered.extend_from_slice(&data);
            }
        }
    }
}

/// An error with its causes, as hyper and rustls keep the telling part in a source ("connection
/// error: received fatal alert: CertificateRequired").
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}
