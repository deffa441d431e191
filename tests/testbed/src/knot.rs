//! A real zone-transfer primary for tests: Knot DNS's `knotd` from the bed's rootfs, serving
//! one generated RPZ zone over loopback with TSIG, IXFR from its journal and NOTIFY.
//!
//! ```text
//! let bed = testbed::Bed::get()?;
//! let mut primary = testbed::knot::KnotPrimary::start(bed, testbed::knot::PrimarySetup {
//!     zone: "blocklist.rpz.".into(),
//!     entries: 1000,                                   // n0.blocked.zz … n999.blocked.zz
//!     key: testbed::knot::KeySetup::Generated,         // or KeySetup::None
//!     notify: Some("127.0.0.1:5354".parse()?),         // where NOTIFY goes (TCP, signed)
//! })?;
//! primary.write_key_file(&key_path)?;                 // BIND format, for `tsig-key-file`
//! // configure `primaries: ["127.0.0.1@{primary.port()}"]`, transfer, then:
//! primary.bump(&["new.blocked.zz"], &[])?;          // serial + 1, IXFR-able, NOTIFY sent
//! primary.output().wait_for("IXFR, outgoing", timeout)?;
//! ```
//! Every entry is `NAME.ZONE 3600 IN CNAME .` (RPZ's NXDOMAIN action). `zonefile-load:
//! difference` with `journal-content: changes` makes every bump an IXFR-able change;
//! `zonefile-sync: -1` keeps knotd from ever writing the file the test edits. Dropping the
//! primary kills knotd (its whole launched tree).

use std::ffi::OsStr;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::{Bed, Launched, Output, TestDir};

/// The domain below which the generated entries are (`n{i}.blocked.zz`): not a special-use
/// domain, which kresd answers NXDOMAIN by itself (names under `.test` are), so an entry's
/// NXDOMAIN shows the RPZ at work; an unlisted name there gets no NXDOMAIN (SERVFAIL or no
/// answer in time: the bed has no network).
pub const ENTRIES_BELOW: &str = "blocked.zz";

/// The lines of the zone's apex that start the zone file: its SOA and NS (as feeds have).
const APEX_LINES: usize = 2;

/// The TSIG key name every generated key has.
pub const KEY_NAME: &str = "xfr-key.";

/// The TSIG set-up of a primary.
#[derive(Clone, Debug)]
pub enum KeySetup {
    /// Transfers and NOTIFY are not signed.
    None,
    /// A fresh random hmac-sha256 key named [`KEY_NAME`].
    Generated,
    /// This hmac-sha256 secret (base64), named [`KEY_NAME`].
    Secret(String),
}

/// What the primary serves.
#[derive(Clone, Debug)]
pub struct PrimarySetup {
    /// The zone's name, absolute ("blocklist.rpz.").
    pub zone: String,
    /// How many entries the generated zone has (`n{i}.blocked.zz`).
    pub entries: usize,
    /// Whether transfers (and NOTIFYs) are signed.
    pub key: KeySetup,
    /// Where knotd sends NOTIFY on every change (over TCP, as knotd 3.5 does).
    pub notify: Option<SocketAddr>,
}

/// A running knotd serving one RPZ zone on 127.0.0.1.
pub struct KnotPrimary {
    /// The zone served, absolute.
    zone: String,
    /// The port knotd listens on (UDP and TCP).
    port: u16,
    /// The hmac-sha256 secret (base64), when transfers are signed.
    secret: Option<String>,
    /// The zone's current serial.
    serial: u32,
    /// The directory holding the configuration, the zone file, the journal and the socket.
    dir: TestDir,
    /// The running knotd (killed on drop).
    knotd: Launched,
}

impl KnotPrimary {
    /// Generate the zone, write the configuration and start knotd; returns once the zone is
    /// loaded and served.
    pub fn start(bed: &Bed, setup: PrimarySetup) -> Result<KnotPrimary> {
        let dir = bed.test_dir("knotd")?;
        let port = crate::free_port()?;
        let secret = match &setup.key {
            KeySetup::None => None,
            KeySetup::Generated => Some(random_secret()?),
            KeySetup::Secret(s) => Some(s.clone()),
        };
        let zone = absolute(&setup.zone);
        let entries = entry_names(setup.entries).map(|n| entry_line(&format!("{n}.{zone}")));
        write_lines(&dir.host("zone.rpz"), &zone, 1, entries, &[])?;
        let config = config(&dir, &zone, port, secret.as_deref(), setup.notify);
        crate::write(&dir.host("knot.conf"), &config)?;
        std::fs::create_dir_all(dir.host("db"))?;
        let conf = dir.bed("knot.conf");
        let knotd = bed.launch_installed(
            Path::new("/usr/sbin/knotd"),
            &[OsStr::new("-c"), conf.as_os_str()],
            &[],
        )?;
        let primary = KnotPrimary {
            zone,
            port,
            secret,
            serial: 1,
            dir,
            knotd,
        };
        let timeout = Duration::from_secs(30 + setup.entries as u64 / 20_000);
        primary.wait_loaded(1, timeout)?;
        Ok(primary)
    }

    /// The address transfers are asked from.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The port knotd listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The zone served, absolute.
    pub fn zone(&self) -> &str {
        &self.zone
    }

    /// The zone's current serial.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    /// The hmac-sha256 secret (base64), when transfers are signed.
    pub fn secret(&self) -> Option<&str> {
        self.secret.as_deref()
    }

    /// The key in BIND's `tsig-keygen` format, when transfers are signed.
    pub fn key_file_text(&self) -> Option<String> {
        self.secret.as_ref().map(|secret| {
            format!(
                "key \"{KEY_NAME}\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{secret}\";\n}};\n"
            )
        })
    }

    /// Write [`KnotPrimary::key_file_text`] to `path` (a host path).
    pub fn write_key_file(&self, path: &Path) -> Result<()> {
        let text = self
            .key_file_text()
            .context("the primary has no TSIG key")?;
        crate::write(path, &text)
    }

    /// knotd's log (its stdout and stderr): `AXFR, outgoing` / `IXFR, outgoing` name each
    /// transfer served, `notify, outgoing` each NOTIFY sent.
    pub fn output(&self) -> &Output {
        &self.knotd.output
    }

    /// The zone file knotd loads (host path), for tests that edit it by hand.
    pub fn zone_file(&self) -> PathBuf {
        self.dir.host("zone.rpz")
    }

    /// Add the entries `added` and remove `removed` (names relative to the zone, as
    /// "x.blocked.zz"), raise the serial by one and have knotd load the change (an IXFR
    /// from the previous serial) and send NOTIFY. Returns the new serial once it is served.
    pub fn bump(&mut self, added: &[&str], removed: &[&str]) -> Result<u32> {
        self.set_serial(self.serial.wrapping_add(1), added, removed)
    }

    /// As [`KnotPrimary::bump`] with a given serial, which must be newer (RFC 1982): the
    /// wait is for knotd's log of loading it. A primary whose serial goes back is better
    /// written as a hostile one in the test.
    pub fn set_serial(&mut self, serial: u32, added: &[&str], removed: &[&str]) -> Result<u32> {
        let path = self.zone_file();
        let old = std::fs::read_to_string(&path).context("reading the zone file")?;
        let removed: Vec<String> = removed.iter().map(|n| self.owner(n)).collect();
        let kept = old
            .lines()
            .skip(APEX_LINES)
            .filter(|l| {
                let owner = l.split_whitespace().next().unwrap_or("");
                !removed.iter().any(|r| r == owner)
            })
            .map(str::to_owned);
        let added: Vec<String> = added.iter().map(|n| self.owner(n)).collect();
        write_lines(&path, &self.zone, serial, kept, &added)?;
        self.knotc(&["zone-reload", &self.zone])?;
        self.serial = serial;
        self.wait_loaded(serial, Duration::from_secs(120))?;
        Ok(serial)
    }

    /// Run `knotc` against this knotd with `args`; its standard output.
    pub fn knotc(&self, args: &[&str]) -> Result<String> {
        let bed = Bed::get()?;
        let socket = self.dir.bed("knot.sock");
        let socket = socket.to_string_lossy();
        let mut full = vec!["-s", socket.as_ref()];
        full.extend_from_slice(args);
        let out = bed.run_installed("/usr/sbin/knotc", &full)?;
        crate::succeeded(format!("knotc {}", args.join(" ")), &out)
    }

    /// The absolute owner of `name` (relative to the zone).
    fn owner(&self, name: &str) -> String {
        format!("{}.{}", name.trim_end_matches('.'), self.zone)
    }

    /// Wait until knotd serves `serial` (its log says the zone was loaded with it).
    fn wait_loaded(&self, serial: u32, timeout: Duration) -> Result<()> {
        // "[zone.] loaded, serial 1 -> 2, 515 bytes" (transfer lines end at the serial).
        let needle = format!("-> {serial}, ");
        let found = self.knotd.output.wait_for(&needle, timeout);
        if found.is_err() {
            bail!(
                "knotd did not load serial {serial} of {}; log:\n{}",
                self.zone,
                self.knotd.output.text()
            );
        }
        Ok(())
    }
}

/// The names of `n` generated entries, relative to the zone.
fn entry_names(n: usize) -> impl Iterator<Item = String> {
    (0..n).map(|i| format!("n{i}.{ENTRIES_BELOW}"))
}

fn absolute(zone: &str) -> String {
    format!("{}.", zone.trim_end_matches('.').to_ascii_lowercase())
}

/// Write the apex (SOA with `serial`, NS), the `kept` lines as they are, then an entry for each owner
/// of `added` (through a temporary file: knotd may read the file at any time).
fn write_lines(
    path: &Path,
    zone: &str,
    serial: u32,
    kept: impl Iterator<Item = String>,
    added: &[String],
) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let file = std::fs::File::create(&tmp).with_context(|| format!("creating {tmp:?}"))?;
    let mut out = BufWriter::new(file);
    writeln!(
        out,
        "{zone} 3600 IN SOA primary.{zone} hostmaster.{zone} {serial} 300 60 86400 60\n\
         {zone} 3600 IN NS primary.{zone}"
    )?;
    for line in kept {
        writeln!(out, "{line}")?;
    }
    for owner in added {
        writeln!(out, "{}", entry_line(owner))?;
    }
    out.flush()?;
    drop(out);
    std::fs::rename(&tmp, path)?;
    Ok(())
}

fn entry_line(owner: &str) -> String {
    format!("{owner} 3600 IN CNAME .")
}

/// knotd's configuration for the primary.
fn config(
    dir: &TestDir,
    zone: &str,
    port: u16,
    secret: Option<&str>,
    notify: Option<SocketAddr>,
) -> String {
    let d = dir.bed.display();
    let mut c = format!(
        "server:\n  listen: 127.0.0.1@{port}\n  rundir: {d}\n  tcp-idle-timeout: 60\n\
         log:\n  - target: stdout\n    any: info\n\
         database:\n  storage: {d}/db\n"
    );
    let key_ref = if let Some(secret) = secret {
        c += &format!(
            "key:\n  - id: {KEY_NAME}\n    algorithm: hmac-sha256\n    secret: {secret}\n"
        );
        format!("\n    key: {KEY_NAME}")
    } else {
        String::new()
    };
    c += &format!("acl:\n  - id: xfr\n    address: 127.0.0.0/8{key_ref}\n    action: transfer\n");
    if let Some(notify) = notify {
        c += &format!(
            "remote:\n  - id: secondary\n    address: {}@{}{key_ref}\n",
            notify.ip(),
            notify.port()
        );
    }
    c += &format!(
        "zone:\n  - domain: {zone}\n    file: {d}/zone.rpz\n    acl: xfr\n    \
         zonefile-load: difference\n    journal-content: changes\n    zonefile-sync: -1\n    \
         semantic-checks: off\n"
    );
    if notify.is_some() {
        c += "    notify: secondary\n";
    }
    c
}

/// 32 random bytes as base64.
fn random_secret() -> Result<String> {
    let mut bytes = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(base64(&bytes))
}

/// Standard base64 with padding.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_pads_as_the_standard_says() {
        assert_eq!(super::base64(b""), "");
        assert_eq!(super::base64(b"a"), "YQ==");
        assert_eq!(super::base64(b"ab"), "YWI=");
        assert_eq!(super::base64(b"abc"), "YWJj");
        assert_eq!(super::base64(b"abcd"), "YWJjZA==");
    }
}
