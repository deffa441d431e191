//! A real three-member etcd cluster on loopback, for the fleet's store: Debian's `etcd` and
//! `etcdctl` on the host (`tests/run.sh` installs `etcd-server` and `etcd-client`), each
//! member its own process, data directory and ports, optionally with TLS on the client port
//! (a CA, a server and a client certificate made with the host's openssl; etcd then asks
//! every client for its certificate). Members are killed with SIGKILL and started again on
//! their data, for tests of member and quorum loss. Readiness is etcd's own health check
//! (`etcdctl endpoint health`, a read through the quorum), polled, never a sleep.
//!
//! ```text
//! let mut cluster = testbed::etcd::EtcdCluster::start(Security::Tls)?;
//! cluster.endpoints();          // https://127.0.0.1:P1, …
//! cluster.leader()?;            // which member leads
//! cluster.kill(0)?;             // SIGKILL, waited for
//! cluster.restart(0)?;          // same data, same ports
//! cluster.wait_healthy(timeout)?;
//! cluster.etcdctl(&["compact", "5"])?;
//! ```
//! Dropping the cluster kills its members and removes its directory.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::{launch_on_host, Launched};

/// How long a member set takes to agree at most before a test fails.
pub const HEALTHY_WITHIN: Duration = Duration::from_secs(30);
/// The largest request the members take: above the 20 MiB values tests write, so the
/// client's own bound is what refuses them.
pub const MAX_REQUEST_BYTES: usize = 32 << 20;

/// Whether the client port speaks TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    Plain,
    /// TLS with client certificates required.
    Tls,
}

/// The PEM files a client of a TLS cluster needs.
#[derive(Debug, Clone)]
pub struct ClientTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// One member: its name, ports and data, and its process while it runs.
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    data_dir: PathBuf,
    process: Option<Launched>,
}

/// Three etcd members on 127.0.0.1.
pub struct EtcdCluster {
    /// Holds the members' data directories and the certificates.
    dir: PathBuf,
    members: Vec<Member>,
    security: Security,
    /// The client's certificates, for `Security::Tls`.
    tls: Option<ClientTls>,
}

impl EtcdCluster {
    /// Start three members and wait until the cluster is healthy.
    pub fn start(security: Security) -> Result<EtcdCluster> {
        crate::remove_stale_dirs(&std::env::temp_dir(), "kr-etcd-");
        let dir = std::env::temp_dir().join(format!(
            "kr-etcd-{}-{}",
            std::process::id(),
            crate::COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let tls = match security {
            Security::Plain => None,
            Security::Tls => Some(make_certificates(&dir)?),
        };
        let mut members = Vec::new();
        for i in 1..=3 {
            members.push(Member {
                name: format!("m{i}"),
                client_port: crate::free_port()?,
                peer_port: crate::free_port()?,
                data_dir: dir.join(format!("m{i}")),
                process: None,
            });
        }
        let mut cluster = EtcdCluster {
            dir,
            members,
            security,
            tls,
        };
        for i in 0..cluster.members.len() {
            cluster.restart(i)?;
        }
        cluster.wait_healthy(HEALTHY_WITHIN)?;
        Ok(cluster)
    }

    /// Every member's client URL, in member order.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.endpoint(i)).collect()
    }

    /// Member `i`'s client URL.
    pub fn endpoint(&self, i: usize) -> String {
        let scheme = match self.security {
            Security::Plain => "http",
            Security::Tls => "https",
        };
        format!("{scheme}://127.0.0.1:{}", self.members[i].client_port)
    }

    /// The certificates a client needs (`Security::Tls` only).
    pub fn client_tls(&self) -> Option<&ClientTls> {
        self.tls.as_ref()
    }

    /// Kill member `i` with SIGKILL and wait until it is gone.
    pub fn kill(&mut self, i: usize) -> Result<()> {
        let member = &mut self.members[i];
        let mut process = member
            .process
            .take()
            .with_context(|| format!("member {} is not running", member.name))?;
        process.signal(nix::sys::signal::Signal::SIGKILL)?;
        process.wait(Duration::from_secs(10))?;
        Ok(())
    }

    /// Stop member `i` with SIGSTOP (`true`) or let it go on with SIGCONT (`false`): a member
    /// whose kernel still accepts connections but which answers nothing, as a hung or
    /// overloaded one.
    pub fn pause(&mut self, i: usize, paused: bool) -> Result<()> {
        let member = &mut self.members[i];
        let process = member
            .process
            .as_mut()
            .with_context(|| format!("member {} is not running", member.name))?;
        process.signal(if paused {
            nix::sys::signal::Signal::SIGSTOP
        } else {
            nix::sys::signal::Signal::SIGCONT
        })?;
        Ok(())
    }

    /// Start member `i` (again, on its data). It serves once a quorum runs: see
    /// [`EtcdCluster::wait_healthy`].
    pub fn restart(&mut self, i: usize) -> Result<()> {
        let initial_cluster = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let client_url = self.endpoint(i);
        let member = &self.members[i];
        if member.process.is_some() {
            bail!("member {} is already running", member.name);
        }
        let peer_url = format!("http://127.0.0.1:{}", member.peer_port);
        let mut args: Vec<OsString> = [
            "--name",
            &member.name,
            "--listen-client-urls",
            &client_url,
            "--advertise-client-urls",
            &client_url,
            "--listen-peer-urls",
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
            "--initial-cluster",
            &initial_cluster,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            "kr-testbed",
            // Elections within a second: member loss shows in a test's time, not etcd's
            // production defaults.
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
            "--max-request-bytes",
            &MAX_REQUEST_BYTES.to_string(),
        ]
        .iter()
        .map(OsString::from)
        .collect();
        args.push("--data-dir".into());
        args.push(member.data_dir.clone().into_os_string());
        if let Some(tls) = &self.tls {
            let server = self.dir.join("server");
            args.extend([
                "--cert-file".into(),
                server.with_extension("pem").into_os_string(),
                "--key-file".into(),
                server.with_extension("key").into_os_string(),
                "--trusted-ca-file".into(),
                tls.ca.clone().into_os_string(),
                "--client-cert-auth".into(),
            ]);
        }
        let process = launch_on_host("etcd", &args)?;
        self.members[i].process = Some(process);
        Ok(())
    }

    /// Wait until every running member answers etcd's health check (which reads through
    /// the quorum, so it needs a majority running).
    pub fn wait_healthy(&self, timeout: Duration) -> Result<()> {
        let running: Vec<String> = (0..self.members.len())
            .filter(|i| self.members[*i].process.is_some())
            .map(|i| self.endpoint(i))
            .collect();
        let endpoints = running.join(",");
        crate::wait_for("etcd members healthy", timeout, || {
            let out =
                self.etcdctl_at(&endpoints, &["endpoint", "health", "--command-timeout=1s"])?;
            Ok(out.status.success().then_some(()))
        })
        .with_context(|| format!("members' output:\n{}", self.output()))
    }

    /// The index of the member that leads now (as the running members report it).
    pub fn leader(&self) -> Result<usize> {
        let text = self.etcdctl(&["endpoint", "status", "--write-out=json"])?;
        let statuses: serde_json::Value =
            serde_json::from_str(&text).context("etcdctl endpoint status as JSON")?;
        let statuses = statuses.as_array().context("a list of statuses")?;
        for status in statuses {
            let member = &status["Status"]["header"]["member_id"];
            if member.is_u64() && *member == status["Status"]["leader"] {
                let endpoint = status["Endpoint"].as_str().unwrap_or_default();
                return (0..self.members.len())
                    .find(|i| self.endpoint(*i) == endpoint)
                    .with_context(|| format!("the leader {endpoint} is no member"));
            }
        }
        bail!("no running member leads: {text}")
    }

    /// Run etcdctl (API v3) against the running members; its standard output.
    pub fn etcdctl(&self, args: &[&str]) -> Result<String> {
        let running: Vec<String> = (0..self.members.len())
            .filter(|i| self.members[*i].process.is_some())
            .map(|i| self.endpoint(i))
            .collect();
        let out = self.etcdctl_at(&running.join(","), args)?;
        crate::succeeded(format!("etcdctl {}", args.join(" ")), &out)
    }

    fn etcdctl_at(&self, endpoints: &str, args: &[&str]) -> Result<std::process::Output> {
        let mut cmd = Command::new("etcdctl");
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoints}"))
            .arg("--dial-timeout=1s");
        if let Some(tls) = &self.tls {
            cmd.arg("--cacert")
                .arg(&tls.ca)
                .arg("--cert")
                .arg(&tls.cert)
                .arg("--key")
                .arg(&tls.key);
        }
        cmd.args(args)
            .output()
            .context("running etcdctl (install it: apt-get install etcd-client)")
    }

    /// Write `value` at `key` through member `i`'s JSON gateway, as etcdctl cannot past its
    /// 2 MiB message bound (plain clusters only).
    pub fn put_raw(&self, i: usize, key: &[u8], value: &[u8]) -> Result<()> {
        if self.security != Security::Plain {
            bail!("put_raw speaks plain HTTP");
        }
        let body = format!(
            r#"{{"key":"{}","value":"{}"}}"#,
            crate::knot::base64(key),
            crate::knot::base64(value)
        );
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.members[i].client_port));
        let answer = crate::http::request_tcp(
            addr,
            "POST",
            "/v3/kv/put",
            &[("content-type", "application/json")],
            body.as_bytes(),
        )?;
        if answer.status != 200 {
            bail!(
                "put of {} bytes: HTTP {}: {}",
                value.len(),
                answer.status,
                answer.text()
            );
        }
        Ok(())
    }

    /// Every member's output so far, for failure messages.
    pub fn output(&self) -> String {
        self.members
            .iter()
            .filter_map(|m| {
                m.process
                    .as_ref()
                    .map(|p| format!("--- {}\n{}", m.name, p.output.text()))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            member.process.take();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, signed by the CA.
fn make_certificates(dir: &Path) -> Result<ClientTls> {
    let ca = dir.join("ca.pem");
    let ca_key = dir.join("ca.key");
    crate::self_signed_cert("kr-testbed etcd CA", &ca, &ca_key)?;
    sign(
        dir,
        "server",
        "etcd",
        &ca,
        &ca_key,
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    )?;
    sign(
        dir,
        "client",
        "fleet-client",
        &ca,
        &ca_key,
        "extendedKeyUsage=clientAuth\n",
    )?;
    Ok(ClientTls {
        ca,
        cert: dir.join("client.pem"),
        key: dir.join("client.key"),
    })
}

/// `NAME.pem` and `NAME.key` for `cn`, signed by the CA, with `extensions`.
fn sign(
    dir: &Path,
    name: &str,
    cn: &str,
    ca: &Path,
    ca_key: &Path,
    extensions: &str,
) -> Result<()> {
    let key = dir.join(format!("{name}.key"));
    let csr = dir.join(format!("{name}.csr"));
    let cert = dir.join(format!("{name}.pem"));
    let ext = dir.join(format!("{name}.ext"));
    std::fs::write(&ext, extensions)?;
    let request = Command::new("openssl")
        .args([
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ])
        .arg("-subj")
        .arg(format!("/CN={cn}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&csr)
        .output()
        .context("running openssl")?;
    crate::succeeded("openssl req", &request)?;
    let signed = Command::new("openssl")
        .args(["x509", "-req", "-days", "1", "-CAcreateserial"])
        .arg("-in")
        .arg(&csr)
        .arg("-CA")
        .arg(ca)
        .arg("-CAkey")
        .arg(ca_key)
        .arg("-extfile")
        .arg(&ext)
        .arg("-out")
        .arg(&cert)
        .output()
        .context("running openssl")?;
    crate::succeeded("openssl x509 -req", &signed)?;
    Ok(())
}
