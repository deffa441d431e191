//! Handing the supervisor from one process image to the next, for an in-place upgrade: the
//! process re-executes itself (possibly a newer binary) and keeps its pid, so every child
//! stays its child. What the old image knew of them (specs, states, histories) goes into a
//! [`SupervisorImage`], which names the descriptors the children need by number (the
//! handed descriptors, the read ends of their output pipes, the notify socket); the caller
//! keeps those open across `execve` and passes the image on (the resolver writes it into a
//! sealed memfd). The next image claims the numbers back ([`Handover::claim`]) and adopts
//! the children with [`crate::Supervisor::adopt`], restarting none.
//!
//! Only a settled table can be handed over: a process that is starting or stopping, a caller
//! waiting on one, or a process group still emptying makes [`crate::SupervisorHandle::hand_over`]
//! answer `Busy`, and the caller tries again a moment later.

use std::collections::BTreeSet;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::machine::MachineImage;
use crate::spec::ServiceSpec;

/// Everything the next process image needs to adopt the children, descriptors by number.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SupervisorImage {
    /// Where children send `READY=1`, and the socket bound there.
    pub notify_socket: PathBuf,
    pub notify_fd: RawFd,
    /// The drain announced before the handover, if any (it ends in the stop).
    pub draining: bool,
    pub services: Vec<ServiceImage>,
}

/// One registered service.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServiceImage {
    pub spec: ServiceSpec,
    pub machine: MachineImage,
    /// Descriptors handed to every process of the service: (ours, the number in the child).
    /// Each of ours is owned by the service.
    pub fds: Vec<(RawFd, RawFd)>,
    /// The read ends of the current process's stdout and stderr pipes, when captured.
    pub output: Option<(RawFd, RawFd)>,
    /// Wall-clock times of the current state and of the last readiness, since the epoch.
    pub since_wall: Option<Duration>,
    pub ready_wall: Option<Duration>,
    pub status_text: Option<String>,
    /// Which process was last killed on request, and why.
    pub kill_reason: Option<(i32, String)>,
}

/// A supervisor's image with the descriptors it names, held open.
#[derive(Debug)]
pub struct Handover {
    pub(crate) image: SupervisorImage,
    /// Every descriptor the image names, each once.
    pub(crate) fds: Vec<OwnedFd>,
}

impl Handover {
    /// What to pass to the next image.
    pub fn image(&self) -> &SupervisorImage {
        &self.image
    }

    /// Give up ownership of the descriptors, leaving them open (not close-on-exec) for the
    /// next image, which takes them back with [`Handover::claim`]; so does this one if its
    /// `execve` fails.
    /// (Clearing close-on-exec on a descriptor we hold cannot fail; if it did, the next image
    /// would not find it and refuse the image.)
    pub fn release(self) -> SupervisorImage {
        use std::os::fd::{AsFd, IntoRawFd};
        for fd in self.fds {
            if let Err(e) = crate::os::clear_cloexec(fd.as_fd()) {
                tracing::error!(
                    "cannot keep descriptor {} open across execve: {e}",
                    fd.as_raw_fd()
                );
            }
            let _ = fd.into_raw_fd();
        }
        self.image
    }

    /// In the next image: take the descriptors `image` names, inherited at those numbers.
    /// Fails when one is not open or is named twice; nothing is taken then.
    pub fn claim(image: SupervisorImage) -> io::Result<Handover> {
        let numbers = named_fds(&image)?;
        for &fd in &numbers {
            crate::os::check_open(fd)?;
        }
        let mut fds = Vec::with_capacity(numbers.len());
        for fd in numbers {
            let fd = crate::os::take_inherited_fd(fd)?;
            // Ours again: no child may inherit it by accident.
            crate::os::set_cloexec(&fd)?;
            fds.push(fd);
        }
        Ok(Handover { image, fds })
    }

    /// Split into the image and its descriptors keyed by number.
    pub(crate) fn into_parts(
        self,
    ) -> (SupervisorImage, std::collections::BTreeMap<RawFd, OwnedFd>) {
        let fds = self
            .fds
            .into_iter()
            .map(|fd| (fd.as_raw_fd(), fd))
            .collect();
        (self.image, fds)
    }
}

/// Every descriptor number `image` names, each once; a number named twice is an error.
fn named_fds(image: &SupervisorImage) -> io::Result<BTreeSet<RawFd>> {
    let mut seen = BTreeSet::new();
    let mut add = |fd: RawFd| {
        if fd <= 2 || !seen.insert(fd) {
            return Err(io::Error::other(format!(
                "the supervisor image names descriptor {fd} twice or a standard one"
            )));
        }
        Ok(())
    };
    add(image.notify_fd)?;
    for service in &image.services {
        for &(ours, _) in &service.fds {
            add(ours)?;
        }
        if let Some((out, err)) = service.output {
            add(out)?;
            add(err)?;
        }
    }
    Ok(seen)
}

/// A wall-clock time as its distance from the epoch (`None` before it).
pub(crate) fn wall_to_image(t: Option<SystemTime>) -> Option<Duration> {
    t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
}

pub(crate) fn wall_from_image(d: Option<Duration>) -> Option<SystemTime> {
    d.and_then(|d| SystemTime::UNIX_EPOCH.checked_add(d))
}
