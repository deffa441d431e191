//! How kresctl prints what it got: the output format a command was asked for, JSON and
//! YAML rendering, and printing to standard output or into a file.

use serde_json::Value;

use super::error::ClientError;
pub use super::error::WriteError;

/// The form of a command's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// JSON, for a program (`--json`).
    Json,
    /// YAML (`--yaml`, the default of commands that print a configuration).
    Yaml,
    /// For a person: a table or lines (the default of the others).
    Text,
}

/// A value as pretty JSON, newline-terminated.
pub fn pretty_json(value: &Value) -> Result<String, ClientError> {
    Ok(format!("{}\n", serde_json::to_string_pretty(value)?))
}

/// A value as pretty JSON in [`OutputFormat::Json`], otherwise as YAML; newline-terminated.
pub fn document(value: &Value, format: OutputFormat) -> Result<String, ClientError> {
    match format {
        OutputFormat::Json => pretty_json(value),
        OutputFormat::Yaml | OutputFormat::Text => Ok(to_yaml(value)),
    }
}

/// `text` with its control characters (C0 but the tab, DEL, C1) written as escapes (`\x1b`,
/// `\u{9b}`), so text the API relays from elsewhere (kresd's log, a record) cannot move the
/// cursor, recolour or retitle the terminal it is printed on, nor start a line of its own.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    let escaped = |c: char| c.is_control() && c != '\t';
    if !text.chars().any(escaped) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match u32::from(c) {
            n if escaped(c) && n < 0x80 => out.push_str(&format!("\\x{n:02x}")),
            n if escaped(c) => out.push_str(&format!("\\u{{{n:x}}}")),
            _ => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// JSON text (as [`pretty_json`] writes it) with DEL and the C1 controls escaped too
/// (`\u009b`): serde_json escapes only C0. The same JSON value, nothing a terminal obeys.
pub fn json_without_controls(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match u32::from(c) {
            // Outside strings JSON has no such character: they are all inside strings.
            n @ 0x7f..=0x9f => out.push_str(&format!("\\u{n:04x}")),
            _ => out.push(c),
        }
    }
    out
}

/// A JSON response body; an empty one is `null`.
pub fn json_body(body: &[u8]) -> Result<Value, ClientError> {
    if body.is_empty() {
        Ok(Value::Null)
    } else {
        Ok(serde_json::from_slice(body)?)
    }
}

/// Print `text`, or write it to `file` and say so.
pub fn emit(text: &str, file: Option<&std::path::Path>) -> Result<(), ClientError> {
    match file {
        Some(f) => {
            std::fs::write(f, text)?;
            print(&format!("saved to: {}\n", f.display()))?;
        }
        None => print(text)?,
    }
    Ok(())
}

/// Write `text` to standard output and flush it, so a reader that is gone is seen here, as
/// [`WriteError::Closed`], and never as a panic of `print!`.
pub fn print(text: &str) -> Result<(), WriteError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => WriteError::Closed,
            _ => WriteError::Io(e),
        })
}

/// [`print`] with a newline after `text`.
pub fn println(text: &str) -> Result<(), WriteError> {
    print(&format!("{text}\n"))
}

/// Resolves once standard output's reader is gone (a pipe whose reader closed, a socket
/// whose peer hung up), without anything being written: a command that prints only when
/// something happens (`events`, `processes --watch`) ends as soon as its reader does. Never
/// resolves for a terminal or a file.
pub async fn closed() {
    let (tell, told) = tokio::sync::oneshot::channel();
    // A thread of its own, never joined: it blocks in poll(2) for the life of the process
    // when standard output never closes, and must not keep the runtime from ending.
    let spawned = std::thread::Builder::new()
        .name("stdout-watch".into())
        .spawn(move || {
            if wait_for_hangup() {
                let _ = tell.send(());
            }
        });
    if spawned.is_err() || told.await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Block until standard output reports an error or a hang-up; `false` if it cannot be
/// watched.
fn wait_for_hangup() -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let stdout = std::io::stdout();
    loop {
        // No event asked for: poll(2) reports only POLLERR, POLLHUP and POLLNVAL.
        let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::empty())];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {
                let gone = PollFlags::POLLERR | PollFlags::POLLHUP;
                match fds[0].revents() {
                    Some(revents) if revents.intersects(gone) => return true,
                    Some(revents) if revents.contains(PollFlags::POLLNVAL) => return false,
                    _ => {}
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
}

/// Render a JSON value as YAML.
pub fn to_yaml(value: &Value) -> String {
    let yaml = json_to_yaml(value);
    let mut out = String::new();
    let mut emitter = yaml_rust2::YamlEmitter::new(&mut out);
    if emitter.dump(&yaml).is_err() {
        return format!("{value}\n");
    }
    let trimmed = out
        .strip_prefix("---\n")
        .or_else(|| out.strip_prefix("--- "))
        .unwrap_or(&out);
    format!("{trimmed}\n")
}

fn json_to_yaml(value: &Value) -> yaml_rust2::Yaml {
    use yaml_rust2::Yaml;
    match value {
        Value::Null => Yaml::Null,
        Value::Bool(b) => Yaml::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Yaml::Integer(i),
            None => Yaml::Real(n.to_string()),
        },
        Value::String(s) => Yaml::String(s.clone()),
        Value::Array(a) => Yaml::Array(a.iter().map(json_to_yaml).collect()),
        Value::Object(m) => Yaml::Hash(
            m.iter()
                .map(|(k, v)| (Yaml::String(k.clone()), json_to_yaml(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_as_json_or_yaml() {
        let value = json!({"workers": 2, "cache": {"size-max": "100M"}, "ids": [1, 2.5]});
        assert_eq!(
            document(&value, OutputFormat::Json).expect("json"),
            "{\n  \"workers\": 2,\n  \"cache\": {\n    \"size-max\": \"100M\"\n  },\n  \
             \"ids\": [\n    1,\n    2.5\n  ]\n}\n"
        );
        assert_eq!(
            document(&value, OutputFormat::Yaml).expect("yaml"),
            "workers: 2\ncache:\n  size-max: 100M\nids:\n  - 1\n  - 2.5\n"
        );
        assert_eq!(json_body(b"").expect("empty"), Value::Null);
        assert!(json_body(b"{").is_err());
    }

    #[test]
    fn control_characters_are_escaped_for_the_terminal() {
        let check = |text: &str, shown: &str| assert_eq!(escape_controls(text), shown, "{text:?}");
        check(
            "plain [resolv] text\twith a tab",
            "plain [resolv] text\twith a tab",
        );
        check("\x1b]0;owned\x07title", "\\x1b]0;owned\\x07title");
        check("\x1b[2J\x1b[31mred", "\\x1b[2J\\x1b[31mred");
        check("one\nfake line\r", "one\\x0afake line\\x0d");
        check("\0\x7f", "\\x00\\x7f");
        check("c1 \u{9b}31m and \u{85}", "c1 \\u{9b}31m and \\u{85}");
        check("\\032 and é, 名前", "\\032 and é, 名前");
        assert!(matches!(
            escape_controls("nothing to do"),
            std::borrow::Cow::Borrowed(_)
        ));

        let value = json!({"log": ["\x1b[31m \u{7f} \u{9b} é"]});
        let printed = json_without_controls(&pretty_json(&value).expect("json"));
        assert_eq!(
            printed,
            "{\n  \"log\": [\n    \"\\u001b[31m \\u007f \\u009b é\"\n  ]\n}\n"
        );
        let read: Value = serde_json::from_str(&printed).expect("still JSON");
        assert_eq!(read, value, "the same value");
    }
}
