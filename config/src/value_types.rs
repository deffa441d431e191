//! The custom value types as engine nodes: input rules (which JSON kinds each type accepts, with
//! upstream's messages), normalization, strict-mode path checks and JSON-schema fragments.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::PathChecks;

use serde_json::{json, Value};

use super::engine::{
    big_int_as_float, py_float, py_special_float, py_str, py_type, str_base, Container, Ctx,
    ValueType,
};
use super::types::{
    check_ipv6_network96, is_plain_ascii_name, parse_ip, parse_ipv6, DomainName, EtcdEndpoint,
    IdPattern, InterfaceOptionalPort, IpAddressEm, IpAddressOptionalPort, IpAddressPort, IpNetwork,
    PinSha256, SizeUnit, TimeUnit, DOMAIN_NAME_PATTERN, ID_PATTERN, PIN_SHA256_PATTERN,
};
use super::value_error::{PathError, ValueError};

fn string_schema() -> Value {
    json!({"type": "string"})
}

/// A string type of upstream's (a `StrBase` subclass, `types.<class>`) that keeps the text as
/// written once the type's `parse` accepts it: `str_type!(STATIC, "class", Type, schema)`.
macro_rules! str_type {
    ($static:ident, $class:literal, $ty:ty, $schema:expr) => {
        pub(crate) static $static: ValueType = ValueType {
            class: concat!("types.", $class),
            check: |v, container, _| {
                let s = str_base(v, container, $class)?;
                <$ty>::parse(&s)?;
                Ok(Value::String(s))
            },
            schema: $schema,
        };
    };
}

str_type!(
    SIZE_UNIT,
    "SizeUnit",
    SizeUnit,
    || json!({"type": "string", "pattern": SizeUnit::PATTERN})
);

str_type!(
    TIME_UNIT,
    "TimeUnit",
    TimeUnit,
    || json!({"type": "string", "pattern": TimeUnit::PATTERN})
);

fn check_escaped(v: &Value, container: Container, _: &Ctx) -> Result<Value, ValueError> {
    str_base(v, container, "EscapedStr").map(Value::String)
}
pub(crate) static ESCAPED_STR: ValueType = ValueType {
    class: "types.EscapedStr",
    check: check_escaped,
    schema: string_schema,
};

fn check_escaped32(v: &Value, container: Container, _: &Ctx) -> Result<Value, ValueError> {
    let s = str_base(v, container, "EscapedStr32B")?;
    if s.len() < 32 {
        return Err(ValueError::ShorterThan32(s));
    }
    Ok(Value::String(s))
}
pub(crate) static ESCAPED_STR_32B: ValueType = ValueType {
    class: "types.EscapedStr32B",
    check: check_escaped32,
    schema: || json!({"type": "string", "minLength": 32}),
};

/// `types.DomainName`, as [`str_type!`] makes it, but a plain ASCII name (nearly every
/// name of a large `local-data.addresses`) is taken without making a [`DomainName`].
fn check_domain_name(v: &Value, container: Container, _: &Ctx) -> Result<Value, ValueError> {
    let s = str_base(v, container, "DomainName")?;
    if !is_plain_ascii_name(&s) {
        DomainName::parse(&s)?;
    }
    Ok(Value::String(s))
}
pub(crate) static DOMAIN_NAME: ValueType = ValueType {
    class: "types.DomainName",
    check: check_domain_name,
    schema: || json!({"type": "string", "pattern": DOMAIN_NAME_PATTERN}),
};

str_type!(
    ID_PATTERN_TYPE,
    "IDPattern",
    IdPattern,
    || json!({"type": "string", "pattern": ID_PATTERN})
);

str_type!(
    PIN_SHA256,
    "PinSha256",
    PinSha256,
    || json!({"type": "string", "pattern": PIN_SHA256_PATTERN})
);

str_type!(
    INTERFACE_OPTIONAL_PORT,
    "InterfaceOptionalPort",
    InterfaceOptionalPort,
    string_schema
);

str_type!(
    IP_ADDRESS_PORT,
    "IPAddressPort",
    IpAddressPort,
    string_schema
);

str_type!(ETCD_ENDPOINT, "EtcdEndpoint", EtcdEndpoint, string_schema);

str_type!(
    IP_ADDRESS_OPTIONAL_PORT,
    "IPAddressOptionalPort",
    IpAddressOptionalPort,
    string_schema
);

fn wrong_kind(what: &'static str, v: &Value, container: Container) -> ValueError {
    ValueError::NotString {
        what,
        got: py_str(v),
        ty: py_type(v, container),
    }
}

fn check_ipv4(v: &Value, container: Container, _: &Ctx) -> Result<Value, ValueError> {
    let Value::String(s) = v else {
        return Err(wrong_kind("IPv4 address", v, container));
    };
    match parse_ip(s) {
        Some(std::net::IpAddr::V4(a)) if !s.contains('%') => {
            let mut text = String::with_capacity(15);
            super::types::push_ipv4(&mut text, a);
            Ok(Value::String(text))
        }
        _ => Err(ValueError::Ipv4),
    }
}
pub(crate) static IPV4_ADDRESS: ValueType = ValueType {
    class: "types.IPv4Address",
    check: check_ipv4,
    schema: string_schema,
};

fn check_ipv6(v: &Value, container: Container, _: &Ctx) -> Result<Value, ValueError> {
    let Value::String(s) = v else {
        return Err(wrong_kind("IPv6 address", v, container));
    };
    parse_ipv6(s)
        .map(|a| Value::String(a.to_string()))
        .ok_or(ValueError::Ipv6)
}
pub(crate) static IPV6_ADDRESS: ValueType = ValueType {
    class: "types.IPv6Address",
    check: check_ipv6,
    schema: string_schema,
};

fn check_ip_em(v: &Value, container: Container, _: &Ctx) -> Result<Value, ValueError> {
    let Value::String(s) = v else {
        return Err(wrong_kind("IPv6 address", v, container));
    };
    IpAddressEm::parse(s)?;
    Ok(Value::String(s.clone()))
}
pub(crate) static IP_ADDRESS_EM: ValueType = ValueType {
    class: "types.IPAddressEM",
    check: check_ip_em,
    schema: string_schema,
};

fn check_network(v: &Value, container: Container, _: &Ctx) -> Result<Value, ValueError> {
    let Value::String(s) = v else {
        return Err(wrong_kind("network subnet", v, container));
    };
    Ok(Value::String(IpNetwork::parse(s)?.to_string()))
}
pub(crate) static IP_NETWORK: ValueType = ValueType {
    class: "types.IPNetwork",
    check: check_network,
    schema: string_schema,
};

fn ipv6_net_input(v: &Value, container: Container) -> Result<&str, ValueError> {
    match v {
        Value::String(s) => Ok(s),
        _ => Err(wrong_kind("IPv6 network subnet", v, container)),
    }
}

fn check_ipv6_network(v: &Value, container: Container, _: &Ctx) -> Result<Value, ValueError> {
    let network = IpNetwork::parse_ipv6(ipv6_net_input(v, container)?)?;
    Ok(Value::String(network.to_string()))
}
pub(crate) static IPV6_NETWORK: ValueType = ValueType {
    class: "types.IPv6Network",
    check: check_ipv6_network,
    schema: string_schema,
};

fn check_ipv6_network96_value(
    v: &Value,
    container: Container,
    _: &Ctx,
) -> Result<Value, ValueError> {
    let network = check_ipv6_network96(ipv6_net_input(v, container)?)?;
    Ok(Value::String(network.to_string()))
}
pub(crate) static IPV6_NETWORK_96: ValueType = ValueType {
    class: "types.IPv6Network96",
    check: check_ipv6_network96_value,
    schema: string_schema,
};

fn check_float_0_65535(v: &Value, container: Container, _: &Ctx) -> Result<Value, ValueError> {
    let special = py_special_float(v).map(|t| match t {
        "inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        _ => f64::NAN,
    });
    let f = match v {
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        _ if special.is_some() => special.unwrap_or(f64::NAN),
        _ if big_int_as_float(v).is_some() => big_int_as_float(v).unwrap_or(f64::NAN),
        other => {
            return Err(ValueError::NotFloat {
                got: py_str(other),
                ty: py_type(other, container),
            })
        }
    };
    // upstream lets NaN through (it fails neither comparison); it is no price factor
    if f.is_nan() {
        return Err(ValueError::Nan);
    }
    let shown = py_float(f);
    if f < 0.0 {
        return Err(ValueError::BelowZero(shown));
    }
    if f > 65535.0 {
        return Err(ValueError::Above65535(shown));
    }
    Ok(json!(f))
}
pub(crate) static FLOAT_0_65535: ValueType = ValueType {
    class: "types.Float0_65535",
    check: check_float_0_65535,
    schema: || json!({"type": "number", "minimum": 0.0, "maximum": 65535.0}),
};

// ---------------------------------------------------------------------------------------------
// paths

/// The checks a path type performs in strict mode.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PathKind {
    ReadableFile,
    WritableDir,
    WritableFilePath,
    /// The management API's unix socket: checked as a writable file path, except in the
    /// manager process ([`PathChecks::Manager`]).
    ApiSocket,
}

fn resolve(raw: &str, ctx: &Ctx) -> PathBuf {
    let joined = if raw.starts_with('/') {
        PathBuf::from(raw)
    } else {
        ctx.resolve_root.join(raw)
    };
    joined.components().collect()
}

#[derive(Clone, Copy)]
struct Access {
    read: bool,
    write: bool,
    execute: bool,
}

/// Who asks: the credentials a path's mode is checked against.
#[derive(Clone, Copy)]
struct Asker<'a> {
    uid: u32,
    gid: u32,
    groups: &'a [u32],
}

/// Whether `path`'s mode bits alone grant `want` to `asker` (upstream's `_check_permission`):
/// the owner's bits for its owner, the group's for a member, the others' for anyone else.
/// A world-writable sticky directory (mode 1777, `/tmp`, podman's `--tmpfs` over a directory
/// the image lacks) is writable this way by any user: the sticky bit keeps the others from
/// removing or renaming what we make there, and the daemon refuses files of another user in
/// such a rundir (`daemon::root::rundir`).
fn granted_by_mode(mode: u32, owner: u32, group: u32, asker: Asker<'_>, want: Access) -> bool {
    let shift = if owner == asker.uid {
        6
    } else if group == asker.gid || asker.groups.contains(&group) {
        3
    } else {
        0
    };
    let bit = |b: u32| mode & (b << shift) != 0;
    (!want.read || bit(4)) && (!want.write || bit(2)) && (!want.execute || bit(1))
}

/// Upstream's `_check_permission` followed by its `os.access` fallback (which covers ACLs).
fn permitted(path: &Path, want: Access) -> bool {
    let euid = nix::unistd::geteuid();
    if euid.is_root() {
        return true;
    }
    let Ok(md) = fs::metadata(path) else {
        return false;
    };
    let groups: Vec<u32> = nix::unistd::getgroups()
        .map(|g| g.iter().map(|g| g.as_raw()).collect())
        .unwrap_or_default();
    let asker = Asker {
        uid: euid.as_raw(),
        gid: nix::unistd::getegid().as_raw(),
        groups: &groups,
    };
    if granted_by_mode(md.mode(), md.uid(), md.gid(), asker, want) {
        return true;
    }
    let mut flags = nix::unistd::AccessFlags::empty();
    if want.read {
        flags |= nix::unistd::AccessFlags::R_OK;
    }
    if want.write {
        flags |= nix::unistd::AccessFlags::W_OK;
    }
    if want.execute {
        flags |= nix::unistd::AccessFlags::X_OK;
    }
    nix::unistd::access(path, flags).is_ok()
}

fn strict_checks(p: &Path, kind: PathKind) -> Result<(), PathError> {
    match kind {
        PathKind::WritableDir => {
            if !p.is_dir() {
                return Err(PathError::NoDirectory(p.to_owned()));
            }
            if !permitted(
                p,
                Access {
                    read: false,
                    write: true,
                    execute: true,
                },
            ) {
                return Err(PathError::CannotWrite(p.to_owned()));
            }
        }
        PathKind::ReadableFile => {
            if !p.exists() {
                return Err(PathError::NoFile(p.to_owned()));
            }
            if !p.is_file() {
                return Err(PathError::NotAFile(p.to_owned()));
            }
            if !permitted(
                p,
                Access {
                    read: true,
                    write: false,
                    execute: false,
                },
            ) {
                return Err(PathError::CannotRead(p.to_owned()));
            }
        }
        PathKind::WritableFilePath | PathKind::ApiSocket => {
            let parent = p.parent().unwrap_or(Path::new("/"));
            if !parent.is_dir() {
                return Err(PathError::NotInADirectory(p.to_owned()));
            }
            if p.is_dir() {
                return Err(PathError::IsADirectory(p.to_owned()));
            }
            if !permitted(
                parent,
                Access {
                    read: false,
                    write: true,
                    execute: true,
                },
            ) {
                return Err(PathError::CannotWrite(parent.to_owned()));
            }
            if p.exists()
                && !permitted(
                    p,
                    Access {
                        read: false,
                        write: true,
                        execute: false,
                    },
                )
            {
                return Err(PathError::CannotWrite(p.to_owned()));
            }
        }
    }
    Ok(())
}

fn check_path(
    v: &Value,
    container: Container,
    ctx: &Ctx,
    kind: PathKind,
) -> Result<Value, ValueError> {
    let Value::String(raw) = v else {
        return Err(ValueError::PathNotString {
            got: py_str(v),
            ty: py_type(v, container),
        });
    };
    let resolved = resolve(raw, ctx);
    let checked = match (ctx.checks, kind) {
        (PathChecks::Lenient, _) | (PathChecks::Manager, PathKind::ApiSocket) => false,
        (PathChecks::Strict | PathChecks::Manager, _) => true,
    };
    if checked {
        strict_checks(&resolved, kind)?;
    }
    Ok(Value::String(resolved.to_string_lossy().into_owned()))
}

pub(crate) static READABLE_FILE: ValueType = ValueType {
    class: "files.ReadableFile",
    check: |v, container, ctx| check_path(v, container, ctx, PathKind::ReadableFile),
    schema: string_schema,
};
pub(crate) static WRITABLE_DIR: ValueType = ValueType {
    class: "files.WritableDir",
    check: |v, container, ctx| check_path(v, container, ctx, PathKind::WritableDir),
    schema: string_schema,
};
pub(crate) static WRITABLE_FILE_PATH: ValueType = ValueType {
    class: "files.WritableFilePath",
    check: |v, container, ctx| check_path(v, container, ctx, PathKind::WritableFilePath),
    schema: string_schema,
};
/// `management.unix-socket`: a writable file path, bound by the root process.
pub(crate) static API_SOCKET_PATH: ValueType = ValueType {
    class: "files.WritableFilePath",
    check: |v, container, ctx| check_path(v, container, ctx, PathKind::ApiSocket),
    schema: string_schema,
};

// ---------------------------------------------------------------------------------------------
// TSIG key files

/// A readable file holding a TSIG key: checked for its syntax where paths are checked.
fn check_tsig_key_file(v: &Value, container: Container, ctx: &Ctx) -> Result<Value, ValueError> {
    if let (Value::String(raw), true) = (v, ctx.checks != PathChecks::Lenient) {
        // Said before the generic checks, which would say only "not a file".
        if let Some(not) = crate::regular_file::not_regular(&resolve(raw, ctx)) {
            return Err(ValueError::KeyFileNotRegular(not));
        }
    }
    let resolved = check_path(v, container, ctx, PathKind::ReadableFile)?;
    if ctx.checks == PathChecks::Lenient {
        return Ok(resolved);
    }
    let path = PathBuf::from(resolved.as_str().unwrap_or_default());
    // The reader the zone transfers use: what validates is what runs.
    super::xfr::read_key(&path).map_err(|e| match e {
        super::xfr::KeyFileError::Read { source, .. } => ValueError::KeyFileUnreadable {
            path: path.clone(),
            source,
        },
        super::xfr::KeyFileError::NotRegular(not) => ValueError::KeyFileNotRegular(not),
        error => ValueError::KeyFileMalformed {
            path: path.clone(),
            error,
        },
    })?;
    Ok(resolved)
}
pub(crate) static TSIG_KEY_FILE: ValueType = ValueType {
    class: "files.ReadableFile",
    check: check_tsig_key_file,
    schema: string_schema,
};

#[cfg(test)]
mod tests {
    use super::*;

    /// A writable directory (write and search) for a user of the restricted profile: an
    /// arbitrary UID in group 0, and an unrelated one.
    #[test]
    fn who_may_write_a_directory_by_its_mode() {
        const DIR: Access = Access {
            read: false,
            write: true,
            execute: true,
        };
        let in_root_group = Asker {
            uid: 1_000_650_000,
            gid: 0,
            groups: &[0],
        };
        let stranger = Asker {
            uid: 4242,
            gid: 4242,
            groups: &[100],
        };
        // (mode, owner, group, asker, writable)
        let rows: &[(u32, u32, u32, Asker<'_>, bool)] = &[
            // podman's plain --tmpfs (over a directory the image lacks), /tmp: anyone.
            (0o1777, 0, 0, in_root_group, true),
            (0o1777, 0, 0, stranger, true),
            (0o777, 0, 0, stranger, true),
            // The image's rundir: root's, group 0's; the group has it, the others not.
            (0o1770, 0, 0, in_root_group, true),
            (0o1770, 0, 0, stranger, false),
            // The same copied by a runtime under its umask 022 (podman --read-only): nobody
            // but root.
            (0o1750, 0, 0, in_root_group, false),
            (0o1755, 0, 0, stranger, false),
            // `--tmpfs …:U`: the user's own.
            (0o1750, 1_000_650_000, 0, in_root_group, true),
            (0o700, 4242, 4242, stranger, true),
            // A supplementary group counts; write without search does not.
            (0o770, 0, 100, stranger, true),
            (0o730, 0, 100, stranger, true),
            (0o720, 0, 100, stranger, false),
        ];
        for (i, (mode, owner, group, asker, writable)) in rows.iter().enumerate() {
            assert_eq!(
                granted_by_mode(*mode, *owner, *group, *asker, DIR),
                *writable,
                "row {i}: mode {mode:o}, owner {owner}:{group}, asker {}",
                asker.uid
            );
        }
    }
}
