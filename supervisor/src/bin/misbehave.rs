//! A test helper that misbehaves on command, so the supervisor's tests can run real processes
//! doing everything a real service may do wrong (nextest's fixture binaries, tini's reaping
//! stages, process-wrap's `multiproc_helper`).
//!
//! The command line is a list of verbs run in order; each takes a fixed number of arguments:
//!
//! | verb | effect |
//! |---|---|
//! | `report FIFO` | from now on, report lines to FIFO (the test reads them); reports `pid <pid>` |
//! | `gate FIFO` | the FIFO `wait` and grandchildren block on, until a byte arrives or every writer is gone |
//! | `wait` | block on the gate |
//! | `sleep MS` | sleep (a delay the test does not order by: "ready late", "exit after T") |
//! | `exit N` | exit with code N |
//! | `die SIG` | send ourselves SIG (`TERM`, `KILL`, `SEGV`, … or a number) |
//! | `trap-term` | exit 0 from a SIGTERM handler (a graceful stop, as kresd does) |
//! | `stop-me` | have a grandchild SIGSTOP us and report `stopped`; we go on once continued |
//! | `ignore-term` | ignore SIGTERM (inherited by grandchildren forked afterwards) |
//! | `kids K HOW` | fork K grandchildren; HOW is `group` or `+`-joined flags `setsid`, `orphan` (double fork: reparented to the subreaper at once), `stdout` (keep stdout/stderr open), `forever` (ignore the gate), `hog` (touch 512 MiB first, so that dying takes a while), `notify-flood` (send `READY=1` to `$NOTIFY_SOCKET` over and over instead of waiting: a process that is not the service). Each reports `kid <pid>`, then blocks on the gate (or forever) and exits 0 |
//! | `flood MB STREAM` | write MB MiB to `stdout`/`stderr`, then report `flooded` |
//! | `invalid-utf8` | write a line of invalid UTF-8 to stdout |
//! | `long-line MB` | write one line of MB MiB to stdout |
//! | `notify TEXT` | send TEXT to `$NOTIFY_SOCKET` (`\n` in TEXT becomes a newline) |
//! | `notify-flood TEXT` | send TEXT to `$NOTIFY_SOCKET` over and over, forever |
//! | `notify-from-kid TEXT` | fork a grandchild that sends TEXT and exits at once; wait for it |
//! | `notify-garbage` | send malformed datagrams: empty, NUL, invalid UTF-8, no `=`, binary |
//! | `notify-oversize` | send `READY=1` padded past 4096 bytes |
//! | `notify-with-fd TEXT` | send TEXT with an open descriptor (of /dev/null) attached as SCM_RIGHTS |
//! | `list-env DIR` | write our environment (`KEY=VALUE` per line) to DIR/<pid> |
//! | `list-fds DIR` | write our open descriptors (`fd target` per line) and `SigBlk` to DIR/<pid> |
//!
//! Lines reported are short, so each write to the FIFO is atomic. The helper is
//! single-threaded, so forking it is safe; forked grandchildren leave with `_exit`.
// Misbehaving takes raw fork, signal dispositions and _exit: the one binary allowed unsafe
// code (besides it, only `supervisor::os` and the `heap` crate).
#![allow(unsafe_code)]

use std::io::{IoSlice, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use nix::sys::signal::{self, SigHandler, Signal};
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, setsid, ForkResult};

/// Where the helper is in its script.
#[derive(Default)]
struct Script {
    /// FIFO the test reads our reports from.
    report: Option<PathBuf>,
    /// FIFO we block on in `wait` (and grandchildren block on).
    gate: Option<PathBuf>,
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let mut script = Script::default();
    while let Some(verb) = args.next() {
        let verb = verb.to_string_lossy().into_owned();
        let mut arg = |what: &str| -> String {
            match args.next() {
                Some(a) => a.to_string_lossy().into_owned(),
                None => fail(&format!("{verb}: missing {what}")),
            }
        };
        if let Some(code) = script.run(&verb, &mut arg) {
            return code;
        }
    }
    ExitCode::SUCCESS
}

impl Script {
    /// Run one verb, taking its arguments from `arg`; `Some` ends the process with that code.
    fn run(&mut self, verb: &str, arg: &mut dyn FnMut(&str) -> String) -> Option<ExitCode> {
        match verb {
            "report" => {
                self.report = Some(PathBuf::from(arg("fifo")));
                self.say(&format!("pid {}", std::process::id()));
            }
            "gate" => self.gate = Some(PathBuf::from(arg("fifo"))),
            "wait" => self.wait_gate(),
            "sleep" => std::thread::sleep(Duration::from_millis(number(&arg("ms")))),
            "print" => eprintln!("{}", arg("line")),
            "exit" => return Some(ExitCode::from(number(&arg("code")) as u8)),
            "die" => die(parse_signal(&arg("signal"))),
            "trap-term" => trap_term(),
            "stop-me" => self.stop_me(),
            "ignore-term" => ignore_term(),
            "kids" => {
                let count = number(&arg("count"));
                let how = arg("how");
                for _ in 0..count {
                    self.fork_kid(&how);
                }
            }
            "flood" => {
                let mib = number(&arg("MiB"));
                flood(mib, &arg("stream"));
                self.say("flooded");
            }
            "invalid-utf8" => write_invalid_utf8(),
            "long-line" => write_long_line(number(&arg("MiB"))),
            "notify" => send_notify(&unescape(&arg("text"))),
            "notify-flood" => flood_notify(&unescape(&arg("text"))),
            "notify-from-kid" => self.notify_from_kid(&unescape(&arg("text"))),
            "notify-garbage" => notify_garbage(),
            "notify-oversize" => notify_oversize(),
            "notify-with-fd" => notify_with_fd(&unescape(&arg("text"))),
            "list-env" => list_env(&PathBuf::from(arg("dir"))),
            "list-fds" => {
                let dir = PathBuf::from(arg("dir"));
                list_fds(&dir.join(std::process::id().to_string()));
            }
            other => fail(&format!("unknown verb {other:?}")),
        }
        None
    }

    /// Have a grandchild SIGSTOP us and report `stopped`; go on once continued.
    fn stop_me(&self) {
        let me = nix::unistd::getpid();
        // SAFETY: single-threaded, see the module comment; the child leaves with _exit.
        match unsafe { fork() } {
            Ok(ForkResult::Child) => {
                let _ = signal::kill(me, Signal::SIGSTOP);
                self.say("stopped");
                // SAFETY: _exit is always safe.
                unsafe { nix::libc::_exit(0) };
            }
            // Reaping it waits until we were stopped and continued.
            Ok(ForkResult::Parent { child }) => {
                while let Err(nix::errno::Errno::EINTR) = waitpid(child, None) {}
            }
            Err(e) => fail(&format!("fork: {e}")),
        }
    }

    /// Fork a grandchild that sends `text` to `$NOTIFY_SOCKET` and exits; wait for it.
    fn notify_from_kid(&self, text: &[u8]) {
        // SAFETY: we are single-threaded, so the child may run any code; it leaves
        // with _exit so nothing of the parent's state is flushed twice.
        match unsafe { fork() } {
            Ok(ForkResult::Child) => {
                send_notify(text);
                // SAFETY: _exit is always safe to call.
                unsafe { nix::libc::_exit(0) };
            }
            Ok(ForkResult::Parent { child }) => {
                let _ = waitpid(child, None);
                self.say(&format!("notified-from {child}"));
            }
            Err(e) => fail(&format!("fork: {e}")),
        }
    }
}

/// Send ourselves `sig`, its default action restored first so that it kills us.
fn die(sig: Signal) -> ! {
    // SAFETY: installing SIG_DFL runs no code of ours in a handler.
    let _ = unsafe { signal::signal(sig, SigHandler::SigDfl) };
    let _ = signal::raise(sig);
    fail(&format!("still alive after {sig}"));
}

/// Exit 0 from a SIGTERM handler (a graceful stop, as kresd does).
fn trap_term() {
    let action = signal::SigAction::new(
        SigHandler::Handler(exit_on_term),
        signal::SaFlags::empty(),
        signal::SigSet::empty(),
    );
    // SAFETY: the handler only calls _exit, which is async-signal-safe.
    if let Err(e) = unsafe { signal::sigaction(Signal::SIGTERM, &action) } {
        fail(&format!("cannot trap SIGTERM: {e}"));
    }
}

/// Ignore SIGTERM (inherited by grandchildren forked afterwards).
fn ignore_term() {
    // SAFETY: SIG_IGN installs no handler code.
    if let Err(e) = unsafe { signal::signal(Signal::SIGTERM, SigHandler::SigIgn) } {
        fail(&format!("cannot ignore SIGTERM: {e}"));
    }
}

/// Write a line of invalid UTF-8 to stdout.
fn write_invalid_utf8() {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(b"bad \xff\xfe\xc3\x28 bytes\n");
    let _ = out.flush();
}

/// Write one line of `mib` MiB to stdout.
fn write_long_line(mib: u64) {
    let mut out = std::io::stdout().lock();
    let chunk = vec![b'L'; 1 << 20];
    for _ in 0..mib {
        let _ = out.write_all(&chunk);
    }
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Send malformed datagrams: empty, NUL, invalid UTF-8, no `=`, binary.
fn notify_garbage() {
    let long_no_equals = vec![b'x'; 3000];
    let garbage: [&[u8]; 6] = [
        b"",
        b"READY=1\0",
        b"READY=\xff\xfe",
        b"READY",
        &long_no_equals,
        b"\x00\x01\x02\x03",
    ];
    for g in garbage {
        send_notify(g);
    }
}

/// Send `READY=1` padded past 4096 bytes.
fn notify_oversize() {
    let mut msg = b"READY=1\nX_PAD=".to_vec();
    msg.resize(5000, b'p');
    send_notify(&msg);
}

/// Send `text` with an open descriptor (of /dev/null) attached.
fn notify_with_fd(text: &[u8]) {
    let passed =
        std::fs::File::open("/dev/null").unwrap_or_else(|e| fail(&format!("open /dev/null: {e}")));
    send_notify_with_fd(text, passed.as_raw_fd());
}

/// Write our environment (`KEY=VALUE` per line) to `dir`/<pid>.
fn list_env(dir: &Path) {
    let mut text = String::new();
    for (k, v) in std::env::vars_os() {
        text.push_str(&format!(
            "{}={}\n",
            k.to_string_lossy(),
            v.to_string_lossy()
        ));
    }
    if let Err(e) = std::fs::write(dir.join(std::process::id().to_string()), text) {
        fail(&format!("list-env: {e}"));
    }
}

impl Script {
    /// Report one line to the test, if it listens. Opened per line so that our descriptor
    /// table stays clean, and non-blocking so that a test that is gone cannot hang us.
    fn say(&self, line: &str) {
        let Some(path) = &self.report else { return };
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path);
        if let Ok(mut f) = opened {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }

    /// Block until a byte arrives on the gate or every writer has closed it; without a gate,
    /// block forever.
    fn wait_gate(&self) {
        let Some(path) = &self.gate else {
            loop {
                nix::unistd::pause();
            }
        };
        // Opening non-blocking never waits for a writer; then reads block again.
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path)
            .unwrap_or_else(|e| fail(&format!("open gate {}: {e}", path.display())));
        let fd = f.as_raw_fd();
        // SAFETY: plain fcntl on a descriptor we own.
        unsafe {
            let flags = nix::libc::fcntl(fd, nix::libc::F_GETFL);
            nix::libc::fcntl(fd, nix::libc::F_SETFL, flags & !nix::libc::O_NONBLOCK);
        }
        let mut byte = [0u8; 1];
        loop {
            match f.read(&mut byte) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                _ => break,
            }
        }
    }

    /// Fork one grandchild as `how` says. Returns in the parent only.
    fn fork_kid(&self, how: &str) {
        let flags: Vec<&str> = how.split('+').collect();
        for f in &flags {
            if ![
                "group",
                "setsid",
                "orphan",
                "stdout",
                "forever",
                "hog",
                "notify-flood",
            ]
            .contains(f)
            {
                fail(&format!("kids: unknown flag {f:?}"));
            }
        }
        let orphan = flags.contains(&"orphan");
        // The grandchild writes one byte here once it has left the group and reported itself,
        // so nothing the parent does next (READY, exiting) can race with its set-up.
        let (settled_r, settled_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
            Ok(p) => p,
            Err(e) => fail(&format!("pipe: {e}")),
        };
        // SAFETY: single-threaded, see the module comment.
        match unsafe { fork() } {
            Ok(ForkResult::Parent { child }) => {
                drop(settled_w);
                if orphan {
                    // The intermediate exits at once; its child is reparented to the
                    // nearest subreaper.
                    let _ = waitpid(child, None);
                }
                let mut byte = [0u8; 1];
                let mut settled = std::fs::File::from(settled_r);
                loop {
                    match settled.read(&mut byte) {
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        _ => break,
                    }
                }
            }
            Ok(ForkResult::Child) => {
                if orphan {
                    // SAFETY: as above; the intermediate only forks and leaves.
                    match unsafe { fork() } {
                        Ok(ForkResult::Child) => {}
                        // SAFETY: _exit is always safe.
                        _ => unsafe { nix::libc::_exit(0) },
                    }
                }
                drop(settled_r);
                self.kid_body(&flags, settled_w);
            }
            Err(e) => fail(&format!("fork: {e}")),
        }
    }

    fn kid_body(&self, flags: &[&str], settled: std::os::fd::OwnedFd) -> ! {
        if flags.contains(&"setsid") {
            let _ = setsid();
        }
        if !flags.contains(&"stdout") {
            if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
                let _ = nix::unistd::dup2_stdout(&null);
                let _ = nix::unistd::dup2_stderr(&null);
            }
        }
        // Kept until we die: the kernel then has 512 MiB to tear down.
        let _hog = flags.contains(&"hog").then(|| vec![1u8; 512 << 20]);
        self.say(&format!("kid {}", std::process::id()));
        let _ = std::fs::File::from(settled).write_all(b"k");
        if flags.contains(&"notify-flood") {
            flood_notify(b"READY=1");
        }
        if flags.contains(&"forever") {
            loop {
                nix::unistd::pause();
            }
        }
        self.wait_gate();
        // SAFETY: _exit is always safe.
        unsafe { nix::libc::_exit(0) }
    }
}

extern "C" fn exit_on_term(_: nix::libc::c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { nix::libc::_exit(0) }
}

fn flood(mib: u64, stream: &str) {
    let mut line = vec![b'f'; 127];
    line.push(b'\n');
    let chunk: Vec<u8> = line.repeat(8192); // 1 MiB of 128-byte lines
    let write = |out: &mut dyn Write| {
        for _ in 0..mib {
            if out.write_all(&chunk).is_err() {
                fail("flood: write failed");
            }
        }
        let _ = out.flush();
    };
    match stream {
        "stdout" => write(&mut std::io::stdout().lock()),
        "stderr" => write(&mut std::io::stderr().lock()),
        other => fail(&format!("flood: unknown stream {other:?}")),
    }
}

fn notify_socket() -> PathBuf {
    std::env::var_os("NOTIFY_SOCKET")
        .map(PathBuf::from)
        .unwrap_or_else(|| fail("NOTIFY_SOCKET is not set"))
}

/// Send `text` to `$NOTIFY_SOCKET` over and over, forever.
fn flood_notify(text: &[u8]) -> ! {
    let sock = UnixDatagram::unbound().unwrap_or_else(|e| fail(&format!("socket: {e}")));
    let path = notify_socket();
    loop {
        // Blocks while the receiver's queue is full: as fast as it can take them.
        if let Err(e) = sock.send_to(text, &path) {
            fail(&format!("send to NOTIFY_SOCKET: {e}"));
        }
    }
}

fn send_notify(payload: &[u8]) {
    let sock = UnixDatagram::unbound().unwrap_or_else(|e| fail(&format!("socket: {e}")));
    if let Err(e) = sock.send_to(payload, notify_socket()) {
        fail(&format!("send to NOTIFY_SOCKET: {e}"));
    }
}

fn send_notify_with_fd(payload: &[u8], fd: i32) {
    let sock = UnixDatagram::unbound().unwrap_or_else(|e| fail(&format!("socket: {e}")));
    let addr = UnixAddr::new(&notify_socket()).unwrap_or_else(|e| fail(&format!("addr: {e}")));
    let fds = [fd];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    if let Err(e) = sendmsg(
        sock.as_raw_fd(),
        &[IoSlice::new(payload)],
        &cmsg,
        MsgFlags::empty(),
        Some(&addr),
    ) {
        fail(&format!("sendmsg with fd: {e}"));
    }
}

/// Write `fd target` lines for every open descriptor except the directory handle used to
/// list them, then `SigBlk: <hex>` from /proc/self/status.
fn list_fds(path: &Path) {
    let mut text = String::new();
    let dir = std::fs::read_dir("/proc/self/fd").unwrap_or_else(|e| fail(&format!("{e}")));
    let own_dir = format!("/proc/{}/fd", std::process::id());
    for entry in dir.flatten() {
        let target = std::fs::read_link(entry.path())
            .map(|t| t.display().to_string())
            .unwrap_or_default();
        if target == own_dir {
            continue;
        }
        text.push_str(&format!(
            "{} {target}\n",
            entry.file_name().to_string_lossy()
        ));
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(line) = status.lines().find(|l| l.starts_with("SigBlk:")) {
        text.push_str(line);
        text.push('\n');
    }
    // Write then rename, so that a reader never sees half a list.
    let tmp = path.with_extension("tmp");
    if let Err(e) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path)) {
        fail(&format!("list-fds {}: {e}", path.display()));
    }
}

fn unescape(text: &str) -> Vec<u8> {
    text.replace("\\n", "\n").into_bytes()
}

fn number(s: &str) -> u64 {
    s.parse()
        .unwrap_or_else(|_| fail(&format!("not a number: {s:?}")))
}

fn parse_signal(s: &str) -> Signal {
    if let Ok(n) = s.parse::<i32>() {
        return Signal::try_from(n).unwrap_or_else(|_| fail(&format!("bad signal {n}")));
    }
    let name = if s.starts_with("SIG") {
        s.to_owned()
    } else {
        format!("SIG{s}")
    };
    name.parse()
        .unwrap_or_else(|_| fail(&format!("bad signal {s:?}")))
}

fn fail(message: &str) -> ! {
    eprintln!("misbehave: {message}");
    std::process::exit(101)
}
