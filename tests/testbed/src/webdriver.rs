//! Headless Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`), for
//! tests of the status page in a real browser. The WebDriver protocol is plain HTTP with
//! JSON bodies to chromedriver on loopback: a few lines over `std::net::TcpStream`, no
//! client crate.
//!
//! The browser can reach loopback only: every other host goes to a proxy address where
//! nothing listens and no name resolves (`--proxy-server`, `--host-resolver-rules`), and its
//! own background traffic (updates, sync, safe browsing) is off. Its network log
//! ([`Browser::requested_urls`]) tells which requests a page made, so a test proves it made
//! none to another host, and its console log ([`Browser::console_errors`]) what went wrong.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

/// The browser and its driver, as Debian installs them.
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long a WebDriver command may take (a page load included).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// One chromedriver with one headless Chromium session; both end when it is dropped.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    /// Where screenshots go.
    dir: PathBuf,
}

impl Browser {
    /// Start chromedriver and a session of a headless Chromium that reaches loopback only;
    /// its profile and screenshots live in `dir`.
    pub fn start(dir: &Path) -> Result<Browser> {
        std::fs::create_dir_all(dir)?;
        let port = crate::free_port()?;
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("{CHROMEDRIVER} (apt-get install chromium-driver)"))?;
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
            dir: dir.to_owned(),
        };
        let mut last_error = None;
        crate::wait_for("chromedriver answers", COMMAND_TIMEOUT, || {
            match browser.call("GET", "/status", None) {
                Ok(status) => Ok(Some(status)),
                Err(e) => {
                    last_error = Some(e);
                    Ok(None)
                }
            }
        })
        .with_context(|| format!("last error: {last_error:?}"))?;
        let profile = dir.join("profile");
        let args = [
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--window-size=1280,1100".to_owned(),
            format!("--user-data-dir={}", profile.display()),
            // Nothing but loopback is reachable: other hosts go to a closed port, and no
            // name resolves but localhost.
            "--proxy-server=http://127.0.0.1:9".to_owned(),
            "--proxy-bypass-list=127.0.0.1;localhost;[::1]".to_owned(),
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1, EXCLUDE [::1]".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-default-apps".to_owned(),
            "--disable-extensions".to_owned(),
            "--no-first-run".to_owned(),
            "--no-default-browser-check".to_owned(),
            "--metrics-recording-only".to_owned(),
            "--safebrowsing-disable-auto-update".to_owned(),
        ];
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
            "goog:loggingPrefs": {"browser": "ALL", "performance": "ALL"},
        }}});
        let answer = browser.call("POST", "/session", Some(&capabilities))?;
        browser.session = answer["sessionId"]
            .as_str()
            .context("no session id")?
            .to_owned();
        Ok(browser)
    }

    /// Open `url` and wait for its load.
    pub fn open(&self, url: &str) -> Result<()> {
        self.command("POST", "url", Some(&json!({ "url": url })))?;
        Ok(())
    }

    /// Load the page again, as the browser's reload button does, and wait for its load.
    pub fn reload(&self) -> Result<()> {
        self.command("POST", "refresh", Some(&json!({})))?;
        Ok(())
    }

    /// Run `script` (a function body; `arguments` are `args`) in the page; its return value.
    pub fn run(&self, script: &str, args: &[Value]) -> Result<Value> {
        self.command(
            "POST",
            "execute/sync",
            Some(&json!({"script": script, "args": args})),
        )
    }

    /// Evaluate `script` until it returns something other than `null` or `false`, within
    /// `timeout`; that value.
    pub fn wait_until(&self, what: &str, timeout: Duration, script: &str) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let value = self.run(script, &[])?;
            if !value.is_null() && value != Value::Bool(false) {
                return Ok(value);
            }
            if Instant::now() >= deadline {
                bail!("{what}: not within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The text of the element with `id`, `None` when there is none.
    pub fn text_of(&self, id: &str) -> Result<Option<String>> {
        let value = self.run(
            "const e = document.getElementById(arguments[0]); return e ? e.textContent : null;",
            &[json!(id)],
        )?;
        Ok(value.as_str().map(str::to_owned))
    }

    /// Save a screenshot of the window as `name`.png in the browser's directory; its path.
    pub fn screenshot(&self, name: &str) -> Result<PathBuf> {
        let value = self.command("GET", "screenshot", None)?;
        let png = decode_base64(value.as_str().context("no screenshot")?)?;
        let path = self.dir.join(format!("{name}.png"));
        std::fs::write(&path, png)?;
        Ok(path)
    }

    /// The log entries of `kind` (`browser`, `performance`) since the last read.
    fn log(&self, kind: &str) -> Result<Vec<Value>> {
        let value = self.command("POST", "se/log", Some(&json!({ "type": kind })))?;
        Ok(value.as_array().cloned().unwrap_or_default())
    }

    /// The console's errors (level SEVERE) since the last read.
    pub fn console_errors(&self) -> Result<Vec<String>> {
        Ok(self
            .log("browser")?
            .into_iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect())
    }

    /// Every URL the browser requested since the last read (its network log).
    pub fn requested_urls(&self) -> Result<Vec<String>> {
        Ok(self.requests()?.into_iter().map(|r| r.url).collect())
    }

    /// Every request the browser made since the last read (its network log), with the
    /// headers the page gave it (those the network stack adds later, such as `Cookie`, are
    /// not there).
    pub fn requests(&self) -> Result<Vec<SentRequest>> {
        let mut requests = Vec::new();
        for entry in self.log("performance")? {
            let Some(text) = entry["message"].as_str() else {
                continue;
            };
            let message: Value = serde_json::from_str(text)?;
            if message["message"]["method"] == "Network.requestWillBeSent" {
                let request = &message["message"]["params"]["request"];
                if let Some(url) = request["url"].as_str() {
                    let headers = request["headers"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(name, value)| {
                            let value = value.as_str().unwrap_or_default();
                            (name.to_ascii_lowercase(), value.to_owned())
                        })
                        .collect();
                    requests.push(SentRequest {
                        url: url.to_owned(),
                        headers,
                    });
                }
            }
        }
        Ok(requests)
    }

    /// Resize the window to `width` × `height` CSS pixels.
    pub fn resize(&self, width: u32, height: u32) -> Result<()> {
        self.command(
            "POST",
            "window/rect",
            Some(&json!({ "width": width, "height": height })),
        )?;
        Ok(())
    }

    /// A command of the session.
    fn command(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        self.call(method, &format!("/session/{}/{path}", self.session), body)
    }

    /// One WebDriver request; its `value`, or the error it reports.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(COMMAND_TIMEOUT))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        )?;
        // chromedriver may keep the connection open: read the head, then what it announces.
        let mut raw = Vec::new();
        let mut buffer = [0u8; 16384];
        let payload = loop {
            let n = stream.read(&mut buffer)?;
            if n == 0 {
                bail!("{method} {path}: the answer ended early");
            }
            raw.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&raw);
            let Some((head, payload)) = text.split_once("\r\n\r\n") else {
                continue;
            };
            let head = head.to_ascii_lowercase();
            if head.contains("transfer-encoding: chunked") {
                if payload.ends_with("0\r\n\r\n") {
                    break dechunk(payload)?;
                }
                continue;
            }
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|l| l.trim().parse::<usize>().ok())
                .context("no Content-Length")?;
            if payload.len() >= length {
                break payload.to_owned();
            }
        };
        let answer: Value = serde_json::from_str(&payload)
            .with_context(|| format!("{method} {path}: not JSON: {payload}"))?;
        let value = answer["value"].clone();
        if let Some(error) = value.get("error").and_then(Value::as_str) {
            bail!(
                "{method} {path}: {error}: {}",
                value["message"].as_str().unwrap_or_default()
            );
        }
        Ok(value)
    }
}

/// A request of the network log.
#[derive(Debug, Clone)]
pub struct SentRequest {
    pub url: String,
    /// Header names in lower case, and their values.
    pub headers: Vec<(String, String)>,
}

impl SentRequest {
    /// The value of the header `name` (in lower case), if the request carried it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.call("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A chunked HTTP body, joined.
fn dechunk(mut rest: &str) -> Result<String> {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").context("chunk size")?;
        let size = usize::from_str_radix(size.trim(), 16)?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(after.get(..size).context("short chunk")?);
        rest = after.get(size + 2..).context("chunk end")?;
    }
}

/// Standard base64 (the screenshots' encoding).
fn decode_base64(text: &str) -> Result<Vec<u8>> {
    let value = |c: u8| -> Result<u32> {
        Ok(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => bail!("not base64: {c}"),
        }
        .into())
    };
    let bytes: Vec<u8> = text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c)? << (18 - 6 * i);
        }
        let produced = chunk.len().saturating_sub(1);
        for i in 0..produced {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_chunks() {
        assert_eq!(decode_base64("aGVsbG8=").expect("b64"), b"hello");
        assert_eq!(decode_base64("aGk=").expect("b64"), b"hi");
        assert_eq!(decode_base64("YWJj").expect("b64"), b"abc");
        assert_eq!(
            dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").expect("chunks"),
            "abcde"
        );
    }
}
