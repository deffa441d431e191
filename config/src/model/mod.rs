//! The configuration model of Knot Resolver 6.5: the description of every section for the engine
//! (types, defaults, documentation, `auto` resolution, cross-field rules, mirroring upstream's
//! `datamodel/*_schema.py`), and the typed, validated structs other code reads.
//!
//! One file per section holds both halves; this one the root (`KresConfig`) and its cross-section
//! rules, `blocks` the building blocks all share, and `tests` checks that the halves agree field by
//! field.

use std::sync::OnceLock;

use blocks::*;

mod blocks;
mod cache;
mod defer;
mod dns64;
mod dnssec;
mod fallback;
mod fleet;
mod forward;
mod local_data;
mod logging;
mod lua;
mod management;
mod monitoring;
mod network;
mod options;
mod rate_limiting;
mod views;

pub use cache::*;
pub use defer::*;
pub use dns64::*;
pub use dnssec::*;
pub use fallback::*;
pub use fleet::*;
pub use forward::*;
pub use local_data::*;
pub use logging::*;
pub use lua::*;
pub use management::*;
pub use monitoring::*;
pub use network::*;
pub use options::*;
pub use rate_limiting::*;
pub use views::*;

/// Upstream resolves `watchdog: auto` to whether the optional Python `watchdog` library is present;
/// this implementation always has file watching.
pub const WATCHDOG_AVAILABLE: bool = true;

/// Upstream's hard-coded maximum of workers when the CPU count is unknown.
pub const WORKERS_MAX: u32 = 256;

/// Environment variable through which the manager passes its `--logtarget` (upstream's name).
pub const LOGTARGET_ENV_VAR: &str = "KRES_LOGTARGET";

/// Number of CPUs this process may run on (upstream: `len(os.sched_getaffinity(0))`).
pub fn usable_cpus() -> Option<u32> {
    if let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        let n = (0..nix::sched::CpuSet::count())
            .filter(|i| set.is_set(*i).unwrap_or(false))
            .count();
        if n > 0 {
            return u32::try_from(n).ok();
        }
    }
    std::thread::available_parallelism()
        .ok()
        .and_then(|n| u32::try_from(n.get()).ok())
}

/// The largest accepted `workers` value (upstream's `workers_max_count`).
pub fn workers_max_count() -> u32 {
    usable_cpus().map_or(WORKERS_MAX, |c| c.saturating_mul(10))
}

/// Tags used by `rules` or `rpz` entries, and a failure for each entry using tags no view defines.
/// The path names `rules` and counts only entries with tags, like upstream (even for `rpz`).
fn check_local_data_tags(
    views_tags: &[String],
    entries: Option<&Value>,
) -> (Vec<String>, Vec<Failure>) {
    let mut tags = Vec::new();
    let mut errs = Vec::new();
    let mut i = 0;
    for entry in entries
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let Some(Value::Array(entry_tags)) = entry.get("tags") else {
            continue;
        };
        let mut missing = Vec::new();
        for t in entry_tags.iter().filter_map(Value::as_str) {
            if !tags.iter().any(|x| x == t) {
                tags.push(t.to_owned());
            }
            if !views_tags.iter().any(|x| x == t) && !missing.iter().any(|x| x == t) {
                missing.push(t.to_owned());
            }
        }
        if !missing.is_empty() {
            let path = child_path(&child_path("/local-data/rules", &i.to_string()), "tags");
            errs.push(Failure::new(
                &path,
                format!(
                    "some tags {} not found in '/views' tags",
                    py_str_list(&missing)
                ),
            ));
        }
        i += 1;
    }
    (tags, errs)
}

fn root() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.config_schema.KresConfig",
        Some("Version Knot Resolver 6.5.0"),
        vec![
            f("version", Ty::PlainInt, json!(1), "Version of the configuration schema. By default it is the latest supported by the resolver, but couple of versions back are be supported as well."),
            f("nsid", opt(v(&vt::ESCAPED_STR)), Value::Null, "Name Server Identifier (RFC 5001) which allows DNS clients to request resolver to send back its NSID along with the reply to a DNS request."),
            f("hostname", opt(v(&vt::ESCAPED_STR)), Value::Null, "Internal DNS resolver hostname. Default is machine hostname."),
            f("rundir", v(&vt::WRITABLE_DIR), json!("/run/knot-resolver"), "Directory where the resolver can create files and which will be it's cwd."),
            f("workers", Ty::Union(vec![Ty::Literal(&["auto"]), int_positive()]), json!(1), "The number of running kresd (Knot Resolver daemon) workers. If set to 'auto', it is equal to number of CPUs available."),
            f("management", obj(management()), json!({"unix-socket": "/run/knot-resolver/kres-api.sock"}), "Configuration of management HTTP API."),
            f("options", obj(options()), json!({}), "Fine-tuning global parameters of DNS resolver operation."),
            f("network", obj(network()), json!({}), "Network connections and protocols configuration."),
            f("views", opt(list(obj(views()))), Value::Null, "List of views and its configuration."),
            f("local-data", obj(local_data()), json!({}), "Local data for forward records (A/AAAA) and reverse records (PTR)."),
            f("forward", opt(list(obj(forward()))), Value::Null, "List of Forward Zones and its configuration."),
            f("fallback", obj(fallback()), json!({}), "Config for fallback on resolution failure."),
            f("cache", obj(cache()), json!({}), "DNS resolver cache configuration."),
            f("dnssec", obj(dnssec()), json!({}), "DNSSEC configuration."),
            f("dns64", obj(dns64()), json!({}), "DNS64 (RFC 6147) configuration."),
            f("logging", obj(logging()), json!({}), "Logging and debugging configuration."),
            f("monitoring", obj(monitoring()), json!({}), "Metrics exposition configuration (Prometheus, Graphite)"),
            f("rate-limiting", obj(rate_limiting()), json!({}), "Configuration of rate limiting."),
            f("defer", obj(defer()), json!({}), "Configuration of request prioritization (defer)."),
            f("lua", obj(lua()), json!({}), "Custom Lua configuration."),
            f("fleet", opt(obj(fleet::fleet())), Value::Null, "Join a fleet of resolvers sharing one configuration on etcd: the running configuration is the fleet's document with this file laid over it (the keys this file sets win; rundir, management, fleet, hostname, nsid, workers, network/listen, network/out-interface-v4, network/out-interface-v6, cache/storage and logging/target are this node's own). Not in upstream's schema."),
        ],
    );
    d.transform = Some(resolve_host_values);
    d.validate = Some(check_root);
    d
}

/// The root's transformation: `version` dropped, `hostname` and `workers: auto` resolved from
/// the machine, `fleet.node` from `hostname`.
fn resolve_host_values(
    m: &mut Map<String, Value>,
    _: &Ctx,
    path: &str,
) -> Result<(), Vec<Failure>> {
    m.remove("version");
    if !is_set(m, "hostname") {
        let host = nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default();
        m.insert("hostname".into(), Value::String(host));
    }
    resolve_fleet_node(m)?;
    if m.get("workers").and_then(Value::as_str) == Some("auto") {
        match usable_cpus() {
            Some(n) => {
                m.insert("workers".into(), json!(n));
            }
            None => {
                return fail(
                    path,
                    "The number of available CPUs to automatically set the number of running 'kresd' workers could not be determined.\
                     The number of workers can be configured manually in 'workers' option.",
                )
            }
        }
    }
    Ok(())
}

/// `fleet.node` when not given: the `hostname` (given or the machine's), which must then be a
/// node name.
fn resolve_fleet_node(m: &mut Map<String, Value>) -> Result<(), Vec<Failure>> {
    let hostname = m
        .get("hostname")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let Some(Value::Object(fleet)) = m.get_mut("fleet") else {
        return Ok(());
    };
    if is_set(fleet, "node") {
        return Ok(());
    }
    if let Err(why) = fleet::check_node_name(&hostname) {
        return fail(
            "/fleet/node",
            format!("{why}: the hostname does not name a node; set 'node'"),
        );
    }
    fleet.insert("node".into(), Value::String(hostname));
    Ok(())
}

/// The root's rules: at most [`workers_max_count`] workers; every tag local data uses is a
/// view's, and at most one view tag is left unused.
fn check_root(m: &mut Map<String, Value>, _: &Ctx, path: &str) -> Result<(), Vec<Failure>> {
    let max = workers_max_count();
    if m.get("workers").and_then(Value::as_u64).unwrap_or(0) > u64::from(max) {
        return fail(path, format!("can't run with more workers than the recommended maximum {max} or hardcoded {WORKERS_MAX}"));
    }
    let views_tags = views_tags(m);
    let local = m.get("local-data");
    let (rule_tags, mut errs) =
        check_local_data_tags(&views_tags, local.and_then(|l| l.get("rules")));
    let (rpz_tags, mut rpz_errs) =
        check_local_data_tags(&views_tags, local.and_then(|l| l.get("rpz")));
    errs.append(&mut rpz_errs);
    let mut unused = views_tags.clone();
    for t in rule_tags.iter().chain(rpz_tags.iter()) {
        if let Some(pos) = unused.iter().position(|x| x == t) {
            unused.remove(pos);
        }
    }
    if unused.len() > 1 {
        errs.push(Failure::new(
            "/views",
            format!("unused tags {} found", py_str_list(&unused)),
        ));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// Every tag of every view, once each, in the order first seen.
fn views_tags(m: &Map<String, Value>) -> Vec<String> {
    let mut views_tags: Vec<String> = Vec::new();
    for view in m
        .get("views")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        for t in view
            .get("tags")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            if let Some(t) = t.as_str() {
                if !views_tags.iter().any(|x| x == t) {
                    views_tags.push(t.to_owned());
                }
            }
        }
    }
    views_tags
}

/// The model description, built once.
pub(crate) fn root_def() -> &'static ObjectDef {
    static ROOT: OnceLock<ObjectDef> = OnceLock::new();
    ROOT.get_or_init(root)
}

/// The sections the root process reads: what it needs before anything starts (where to run,
/// the API's endpoint, how to log). Their values do not depend on any other section.
pub(crate) const ROOT_VIEW: [&str; 3] = ["rundir", "management", "logging"];

/// The root's definition cut to [`ROOT_VIEW`], without its cross-section rules.
fn root_view_def() -> &'static ObjectDef {
    static VIEW: OnceLock<ObjectDef> = OnceLock::new();
    VIEW.get_or_init(|| {
        let mut d = root();
        d.fields.retain(|f| ROOT_VIEW.contains(&f.name));
        d.transform = None;
        d.validate = None;
        d
    })
}

/// Validate the [`ROOT_VIEW`] sections of a raw document (a mapping holding no others) into
/// their normalized form.
pub(crate) fn normalize_root_view(
    raw: &Map<String, Value>,
    ctx: &Ctx,
) -> Result<Value, Vec<Failure>> {
    crate::engine::map_object(root_view_def(), raw, "", ctx)
}

/// The [`ROOT_VIEW`] sections, validated.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RootView {
    /// The manager's working directory for runtime files.
    pub rundir: PathBuf,
    /// Configuration of management HTTP API.
    pub management: ManagementSchema,
    /// Logging and debugging configuration.
    pub logging: LoggingSchema,
}

/// Validate a raw document (a mapping; `null` counts as empty) into its normalized form.
pub(crate) fn normalize(raw: &Value, ctx: &Ctx) -> Result<Value, Vec<Failure>> {
    match raw {
        Value::Null => crate::engine::map_object(root_def(), &Map::new(), "", ctx),
        Value::Object(m) => crate::engine::map_object(root_def(), m, "", ctx),
        other => Err(vec![Failure::new(
            "",
            format!(
                "expected dict-like object, found '{}'",
                crate::engine::py_type(other, crate::engine::Container::Renamed)
            ),
        )]),
    }
}

/// The validated configuration: defaults applied, `auto` resolved, relative paths resolved.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KresConfig {
    /// NSID prefix; each worker appends its id.
    pub nsid: Option<String>,
    /// Hostname (the machine's when not configured).
    pub hostname: String,
    /// The manager's working directory for runtime files.
    pub rundir: PathBuf,
    /// Number of kresd workers (`auto` resolved to the usable CPUs).
    pub workers: u32,
    /// Configuration of management HTTP API.
    pub management: ManagementSchema,
    /// Fine-tuning global parameters of DNS resolver operation.
    pub options: OptionsSchema,
    /// Network connections and protocols configuration.
    pub network: NetworkSchema,
    /// List of views and its configuration.
    pub views: Option<Vec<ViewSchema>>,
    /// Local data for forward records (A/AAAA) and reverse records (PTR).
    pub local_data: LocalDataSchema,
    /// List of Forward Zones and its configuration.
    pub forward: Option<Vec<ForwardSchema>>,
    /// Config for fallback on resolution failure.
    pub fallback: FallbackSchema,
    /// DNS resolver cache configuration.
    pub cache: CacheSchema,
    /// DNSSEC configuration.
    pub dnssec: DnssecSchema,
    /// DNS64 (RFC 6147) configuration.
    pub dns64: Dns64Schema,
    /// Logging and debugging configuration.
    pub logging: LoggingSchema,
    /// Metrics exposition configuration (Prometheus, Graphite)
    pub monitoring: MonitoringSchema,
    /// Configuration of rate limiting.
    pub rate_limiting: RateLimitingSchema,
    /// Configuration of request prioritization (defer).
    pub defer: DeferSchema,
    /// Custom Lua configuration.
    pub lua: LuaSchema,
    /// This node's membership of a fleet (ours; `None`: a resolver on its own).
    pub fleet: Option<FleetSchema>,
}

#[cfg(test)]
mod tests;
