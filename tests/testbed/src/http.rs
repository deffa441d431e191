//! A minimal HTTP/1.1 client over a unix socket or TCP, for API tests that need raw access (methods
//! and routes kresctl does not send, exact status codes and headers).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

/// A response: status, headers (lower-cased names) and body.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Send one request with `Connection: close` and read the whole response.
pub fn request(
    socket: &Path,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<HttpResponse> {
    let s = UnixStream::connect(socket)
        .with_context(|| format!("connecting to {}", socket.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    exchange(s, "localhost", method, path, headers, body)
}

/// [`request`] over TCP to `addr`, with `Host` naming `addr` unless `headers` name one.
pub fn request_tcp(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<HttpResponse> {
    let s = std::net::TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    exchange(s, &addr.to_string(), method, path, headers, body)
}

/// Write one request on `s` and read the whole response (the server closes after it).
fn exchange(
    mut s: impl Read + Write,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<HttpResponse> {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {host}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    // Room for a large answer (a whole configuration) up front, so that it is read in large
    // chunks straight into place: timing a request (the benchmarks) times the server, not
    // this reader.
    let mut raw = Vec::with_capacity(READ_CHUNK);
    s.read_to_end(&mut raw)?;
    parse(raw)
}

/// The room an answer gets before it is read.
const READ_CHUNK: usize = 1 << 20;

/// A whole response as read from its connection (by this client, or by another process's),
/// its chunked body decoded.
pub fn parse(mut raw: Vec<u8>) -> Result<HttpResponse> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of headers")?;
    let (status, headers) = parse_head(&raw[..split])?;
    let mut body = raw.split_off(split + 4);
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"))
    {
        body = dechunk(&body)?;
    }
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

/// Status and headers (lower-cased names) of a response head without its blank line.
fn parse_head(head: &[u8]) -> Result<(u16, Vec<(String, String)>)> {
    let head = String::from_utf8_lossy(head);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().context("no status line")?;
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .context("no status code")?
        .parse()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok((status, headers))
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("bad chunk")?;
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..line_end]).trim(), 16)?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(data.get(..size).context("short chunk")?);
        data = data.get(size + 2..).context("short chunk")?;
    }
}

/// One server-sent message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseMessage {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// A `GET` answered with an event stream (`text/event-stream`), read message by message as it
/// comes.
pub struct EventStream {
    stream: UnixStream,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Body bytes as received (chunked transfer coding), not yet decoded.
    raw: Vec<u8>,
    /// Decoded body bytes not yet parsed into messages.
    text: Vec<u8>,
    /// Whether the body uses the chunked transfer coding.
    chunked: bool,
    /// The last chunk arrived, or the server closed the connection.
    ended: bool,
}

impl EventStream {
    /// Send `GET path` with `headers` and read the answer's head.
    pub fn open(socket: &Path, path: &str, headers: &[(&str, &str)]) -> Result<EventStream> {
        let mut stream = UnixStream::connect(socket)
            .with_context(|| format!("connecting to {}", socket.display()))?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        stream.write_all(req.as_bytes())?;
        let mut raw = Vec::new();
        let split = loop {
            if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break split;
            }
            let mut buf = [0u8; 4096];
            let n = stream.read(&mut buf)?;
            anyhow::ensure!(n > 0, "closed before the end of the head");
            raw.extend_from_slice(&buf[..n]);
        };
        let (status, headers) = parse_head(&raw[..split])?;
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
        Ok(EventStream {
            stream,
            status,
            headers,
            raw: raw[split + 4..].to_vec(),
            text: Vec::new(),
            chunked,
            ended: false,
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The next message (comments skipped) within `timeout`; `None` once the stream ended.
    pub fn next(&mut self, timeout: Duration) -> Result<Option<SseMessage>> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            self.decode()?;
            if let Some(message) = self.parse_message() {
                return Ok(Some(message));
            }
            if self.ended {
                return Ok(None);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            anyhow::ensure!(!left.is_zero(), "no event within {timeout:?}");
            self.stream.set_read_timeout(Some(left))?;
            let mut buf = [0u8; 16384];
            match self.stream.read(&mut buf) {
                Ok(0) => self.ended = true,
                Ok(n) => self.raw.extend_from_slice(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Move whole chunks from `raw` to `text`.
    fn decode(&mut self) -> Result<()> {
        if !self.chunked {
            self.text.append(&mut self.raw);
            return Ok(());
        }
        loop {
            let Some(line_end) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                return Ok(());
            };
            let size =
                usize::from_str_radix(String::from_utf8_lossy(&self.raw[..line_end]).trim(), 16)?;
            if size == 0 {
                self.ended = true;
                self.raw.clear();
                return Ok(());
            }
            let start = line_end + 2;
            if self.raw.len() < start + size + 2 {
                return Ok(());
            }
            self.text.extend_from_slice(&self.raw[start..start + size]);
            self.raw.drain(..start + size + 2);
        }
    }

    /// Take one whole message from `text`, skipping comment-only blocks.
    fn parse_message(&mut self) -> Option<SseMessage> {
        loop {
            let end = self.text.windows(2).position(|w| w == b"\n\n")?;
            let block = String::from_utf8_lossy(&self.text[..end]).into_owned();
            self.text.drain(..end + 2);
            let mut message = SseMessage::default();
            let mut fields = false;
            for line in block.lines().filter(|l| !l.starts_with(':')) {
                let (name, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
                fields = true;
                match name {
                    "id" => message.id = Some(value),
                    "event" => message.event = Some(value),
                    "data" if message.data.is_empty() => message.data = value,
                    "data" => {
                        message.data.push('\n');
                        message.data.push_str(&value);
                    }
                    _ => {}
                }
            }
            if fields {
                return Some(message);
            }
        }
    }
}
