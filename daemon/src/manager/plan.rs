//! The change planner: what a new configuration asks of the running processes, decided from
//! the two configurations and the registered workers alone. It is pure (no I/O, no clock), so
//! every rule is table-tested here; `Manager::apply` only carries a plan out.
//!
//! The rules mirror upstream's manager: a change of a "worker-relevant" section (everything but
//! `views`, `local-data`, `rundir` and `management`) needs new kresd processes, proven first by
//! a canary; a change of policy only (`views`, `local-data`) needs the policy-loader and a rules
//! reset in the running workers; `rundir` and `management` cannot change at run time, nor can
//! `fleet` (ours: where the node's shared configuration lives and who it is in the fleet).
//!
//! Unlike upstream, a change of `logging` alone (level, target, groups) reaches the running
//! workers through their control sockets (`log_level`, `log_target` and `log_groups` take effect
//! at once in kresd): no worker restarts. `logging.dnstap` (a module loaded at start), and
//! any logging change while custom Lua runs (it may set the level itself, so a restarted
//! worker could end on another level than a live one) or with `lua.script-only` (no logging
//! in the workers' Lua at all), still restart the workers.

use std::fmt;
use std::path::PathBuf;

use crate::service::WorkerId;
use kres_config::KresConfig;
use kres_wire::change::{ChangeSummary, GcAction, WorkersAction};

/// What a change of a section requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// New worker processes (the canary first, then a rolling restart).
    Workers,
    /// Running workers take it through their control sockets; [`Section::effect_of`] says
    /// when a change of such a section needs new workers after all.
    Live,
    /// Only a new rules database, which running workers reopen.
    Rules,
    /// Nothing can do it at run time: the change is refused.
    Immutable,
}

macro_rules! sections {
    ($($variant:ident => $field:ident, $key:literal, $effect:ident;)*) => {
        /// A top-level section of the configuration.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Section {
            $($variant,)*
        }

        impl Section {
            /// Every section of the typed configuration, in the schema's order.
            pub const ALL: &'static [Section] = &[$(Section::$variant,)*];

            /// Its key in the configuration document.
            pub fn key(self) -> &'static str {
                match self {
                    $(Section::$variant => $key,)*
                }
            }

            /// What a change of it requires.
            pub fn effect(self) -> Effect {
                match self {
                    $(Section::$variant => Effect::$effect,)*
                }
            }

            /// Whether it differs between `old` and `new`.
            pub fn changed(self, old: &KresConfig, new: &KresConfig) -> bool {
                match self {
                    $(Section::$variant => old.$field != new.$field,)*
                }
            }
        }
    };
}

sections! {
    Nsid => nsid, "nsid", Workers;
    Hostname => hostname, "hostname", Workers;
    Rundir => rundir, "rundir", Immutable;
    Workers => workers, "workers", Workers;
    Management => management, "management", Immutable;
    Options => options, "options", Workers;
    Network => network, "network", Workers;
    Views => views, "views", Rules;
    LocalData => local_data, "local-data", Rules;
    Forward => forward, "forward", Workers;
    Fallback => fallback, "fallback", Workers;
    Cache => cache, "cache", Workers;
    Dnssec => dnssec, "dnssec", Workers;
    Dns64 => dns64, "dns64", Workers;
    Logging => logging, "logging", Live;
    Monitoring => monitoring, "monitoring", Workers;
    RateLimiting => rate_limiting, "rate-limiting", Workers;
    Defer => defer, "defer", Workers;
    Lua => lua, "lua", Workers;
    Fleet => fleet, "fleet", Immutable;
}

impl Section {
    /// Its JSON pointer, as error messages name it (`/local-data`).
    pub fn pointer(self) -> String {
        format!("/{}", self.key())
    }

    /// What changing it from `old` to `new` requires: its [`Section::effect`], except for a
    /// `logging` change that running workers cannot take live.
    pub fn effect_of(self, old: &KresConfig, new: &KresConfig) -> Effect {
        match self {
            Section::Logging if !logging_is_live(old, new) => Effect::Workers,
            s => s.effect(),
        }
    }
}

/// Whether a change of `logging` from `old` to `new` can be made in the running workers alone:
/// `dnstap` unchanged (the module is loaded at start), and nothing else in the workers' Lua
/// that could set logging (no custom Lua; not `lua.script-only`, which renders no logging).
fn logging_is_live(old: &KresConfig, new: &KresConfig) -> bool {
    let plain = |c: &KresConfig| {
        !c.lua.script_only && c.lua.script.is_none() && c.lua.script_file.is_none()
    };
    old.logging.dnstap == new.logging.dnstap && plain(old) && plain(new)
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// Whether workers are restarted although no section that needs it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// Only when a worker-relevant section changed.
    WhenNeeded,
    /// Always (`/reload/force`, `/renew/force`).
    Always,
}

/// A file kresd workers share memory through; stale once the setting that sized it changes,
/// so removed before new workers start. kresd refuses to start beside a running worker that
/// holds such a file sized otherwise ("Another instance of kresd uses file … with different
/// configuration"); once removed, the new workers make a new one, and the running ones keep
/// the old one until they are replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedMemory {
    /// `ratelimiting` in the rundir, sized by `rate-limiting`.
    RateLimiting,
    /// `defer` in the rundir, sized by `defer` and the number of workers.
    Defer,
    /// `top` in the cache storage (the statistics the cache GC evicts by), sized by
    /// `cache.size-max`.
    CacheTop,
}

impl SharedMemory {
    /// How summaries name it.
    pub fn name(self) -> &'static str {
        match self {
            SharedMemory::RateLimiting => "ratelimiting",
            SharedMemory::Defer => "defer",
            SharedMemory::CacheTop => "cache/top",
        }
    }

    /// Where the workers of `cfg` find it.
    pub fn path(self, cfg: &KresConfig) -> PathBuf {
        match self {
            SharedMemory::RateLimiting => cfg.rundir.join("ratelimiting"),
            SharedMemory::Defer => cfg.rundir.join("defer"),
            SharedMemory::CacheTop => cfg.cache.storage.join("top"),
        }
    }
}

/// A rolling restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roll {
    /// The instance number the canary runs as: above every worker of both configurations, so
    /// its control socket collides with none.
    pub canary: WorkerId,
    /// Shared-memory files to remove before any new worker starts.
    pub unlink: Vec<SharedMemory>,
    /// Workers removed (scale down), highest first, before the others restart.
    pub stop: Vec<WorkerId>,
    /// Workers replaced one at a time, in order.
    pub restart: Vec<WorkerId>,
    /// Workers added (scale up), started in parallel at the end.
    pub start: Vec<WorkerId>,
}

/// A change the running workers take through their control sockets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    /// The workers told, in order (every registered one).
    pub workers: Vec<WorkerId>,
    /// Whether the policy-loader runs and the workers reset their rules too (a `views` or
    /// `local-data` change in the same configuration).
    pub rules: RulesChange,
    /// Workers that did not take it (their control socket failed or did not answer) and were
    /// restarted instead, on the configuration already written for them. Filled in when the
    /// change is carried out; a plan has none.
    pub restarted: Vec<WorkerId>,
}

/// Whether the rules database is rebuilt and reopened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RulesChange {
    /// Untouched: the policy-loader does not run.
    Keep,
    /// The policy-loader rebuilds it and every running worker reopens it.
    Reset,
}

/// What the workers do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerChange {
    /// They keep running and reopen the rules database; TLS certificate files are reloaded.
    ResetRules,
    /// They keep running and take the change through their control sockets.
    Live(Live),
    /// They are replaced.
    Roll(Roll),
}

/// What the cache garbage collector does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcChange {
    /// It keeps running (or keeps not running).
    Keep,
    /// Any running one is stopped and, if enabled, one with the new arguments started.
    Replace,
}

/// Everything one configuration change does, in the order it is done: the policy-loader runs
/// (after the canary when there is a roll; not for a live change that leaves the rules alone),
/// then the workers change, then the GC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangePlan {
    /// The sections that differ.
    pub changed: Vec<Section>,
    pub workers: WorkerChange,
    pub gc: GcChange,
}

impl Default for ChangePlan {
    /// The plan of applying the running configuration again: the workers reset their rules.
    fn default() -> ChangePlan {
        ChangePlan {
            changed: Vec::new(),
            workers: WorkerChange::ResetRules,
            gc: GcChange::Keep,
        }
    }
}

/// How far a plan went, which its summary tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Proven by a dry run, nothing changed: no outcome yet, and a canary only when the
    /// roll unlinks no shared memory ([`Roll::dry_run_tries_canary`]).
    DryRun,
    /// Carried out by `Manager::apply`: a roll was proven by a canary, and a live
    /// change says which workers were restarted instead.
    Applied,
}

impl Roll {
    /// Whether a dry run of this roll starts the canary: not when shared memory is to be
    /// unlinked (the canary could not open the files the running workers hold; the change
    /// itself removes them first).
    pub fn dry_run_tries_canary(&self) -> bool {
        self.unlink.is_empty()
    }
}

impl ChangePlan {
    /// What the plan does, as clients read it: the answer of a dry run, the event of an
    /// applied change.
    pub fn summary(&self, stage: Stage) -> ChangeSummary {
        let names = |ids: &[WorkerId]| -> Vec<String> { ids.iter().map(|id| id.name()).collect() };
        let workers = match &self.workers {
            WorkerChange::ResetRules => WorkersAction::RulesReset,
            WorkerChange::Live(live) => WorkersAction::Live {
                workers: names(&live.workers),
                restarted: (stage == Stage::Applied).then(|| names(&live.restarted)),
                rules_reset: live.rules == RulesChange::Reset,
            },
            WorkerChange::Roll(roll) => WorkersAction::Restart {
                canary: stage == Stage::Applied || roll.dry_run_tries_canary(),
                stop: names(&roll.stop),
                restart: names(&roll.restart),
                start: names(&roll.start),
                unlink: roll.unlink.iter().map(|s| s.name().to_owned()).collect(),
            },
        };
        ChangeSummary {
            changed: self.changed.iter().map(|s| s.key().to_owned()).collect(),
            workers,
            cache_gc: match self.gc {
                GcChange::Keep => GcAction::Keep,
                GcChange::Replace => GcAction::Replace,
            },
        }
    }
}

/// A change that cannot be made at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("[{}] cannot be changed at runtime; restart the resolver to change it", .0.pointer())]
pub struct Immutable(pub Section);

/// The plan for going from `old` to `new`, when `registered` are the workers the supervisor
/// has.
pub fn plan(
    old: &KresConfig,
    new: &KresConfig,
    registered: &[WorkerId],
    restart: Restart,
) -> Result<ChangePlan, Immutable> {
    let changed: Vec<Section> = Section::ALL
        .iter()
        .copied()
        .filter(|s| s.changed(old, new))
        .collect();
    if let Some(s) = changed.iter().find(|s| s.effect() == Effect::Immutable) {
        return Err(Immutable(*s));
    }
    let needs = |effect: Effect| changed.iter().any(|s| s.effect_of(old, new) == effect);
    let workers = if needs(Effect::Workers) || restart == Restart::Always {
        WorkerChange::Roll(roll(old, new, registered, &changed))
    } else if needs(Effect::Live) {
        let mut workers = registered.to_vec();
        workers.sort_unstable();
        workers.dedup();
        WorkerChange::Live(Live {
            workers,
            rules: if needs(Effect::Rules) {
                RulesChange::Reset
            } else {
                RulesChange::Keep
            },
            restarted: Vec::new(),
        })
    } else {
        WorkerChange::ResetRules
    };
    // The GC reads logging only as its `-v` flag; it holds the cache's `top` too, which a
    // change of size replaces (`SharedMemory::CacheTop`).
    let gc_changed = old.cache.garbage_collector != new.cache.garbage_collector
        || old.cache.storage != new.cache.storage
        || old.cache.size_max != new.cache.size_max
        || super::specs::cache_gc_verbose(old) != super::specs::cache_gc_verbose(new);
    Ok(ChangePlan {
        changed,
        workers,
        gc: if gc_changed {
            GcChange::Replace
        } else {
            GcChange::Keep
        },
    })
}

fn roll(old: &KresConfig, new: &KresConfig, registered: &[WorkerId], changed: &[Section]) -> Roll {
    let mut unlink = Vec::new();
    if changed.contains(&Section::RateLimiting) {
        unlink.push(SharedMemory::RateLimiting);
    }
    if changed.contains(&Section::Workers) || changed.contains(&Section::Defer) {
        unlink.push(SharedMemory::Defer);
    }
    // In another storage the new workers open another file, which no running worker holds.
    if old.cache.size_max != new.cache.size_max && old.cache.storage == new.cache.storage {
        unlink.push(SharedMemory::CacheTop);
    }
    let mut registered = registered.to_vec();
    registered.sort_unstable();
    registered.dedup();
    let keep = |w: &WorkerId| w.0 < new.workers;
    Roll {
        canary: WorkerId(old.workers.max(new.workers)),
        unlink,
        stop: registered
            .iter()
            .rev()
            .filter(|w| !keep(w))
            .copied()
            .collect(),
        restart: registered.iter().filter(|w| keep(w)).copied().collect(),
        start: missing(new, &registered),
    }
}

/// Workers `new` wants that are not registered, in order (after an adoption, or scale up).
pub fn missing(new: &KresConfig, registered: &[WorkerId]) -> Vec<WorkerId> {
    WorkerId::all(new.workers)
        .filter(|w| !registered.contains(w))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::{json, Value};

    use super::*;
    use kres_config::{validate, ValidationContext};

    /// The configuration every row starts from: two workers, GC on, nothing else set.
    fn base() -> Value {
        json!({
            "rundir": "/run/knot-resolver",
            "workers": 2,
            "cache": {"storage": "/var/cache/knot-resolver"},
            "management": {"unix-socket": "/run/knot-resolver/kres-api.sock"},
        })
    }

    fn typed(raw: &Value) -> KresConfig {
        let ctx = ValidationContext {
            resolve_root: Path::new("/etc/knot-resolver").into(),
            checks: kres_config::PathChecks::Lenient,
            logtarget_arg: Default::default(),
        };
        validate(raw, &ctx).unwrap_or_else(|e| panic!("invalid row config {raw}: {e}"))
    }

    /// `base()` with `changes` (pointer, value) made.
    fn changed(changes: &[(&str, Value)]) -> KresConfig {
        let mut raw = base();
        for (pointer, value) in changes {
            let (parent, key) = pointer.rsplit_once('/').expect("pointer");
            let mut at = &mut raw;
            for part in parent.split('/').skip(1) {
                at = at
                    .as_object_mut()
                    .expect("object")
                    .entry(part)
                    .or_insert_with(|| json!({}));
            }
            at.as_object_mut()
                .expect("object")
                .insert(key.to_owned(), value.clone());
        }
        typed(&raw)
    }

    fn ids(ids: &[u32]) -> Vec<WorkerId> {
        ids.iter().copied().map(WorkerId).collect()
    }

    /// A rolling restart of workers 0 and 1 of the base, unlinking `unlink`.
    fn roll_of_base(unlink: &[SharedMemory]) -> WorkerChange {
        WorkerChange::Roll(Roll {
            canary: WorkerId(2),
            unlink: unlink.to_vec(),
            stop: vec![],
            restart: ids(&[0, 1]),
            start: vec![],
        })
    }

    /// A live change of `workers`.
    fn live(workers: &[u32], rules: RulesChange) -> WorkerChange {
        WorkerChange::Live(Live {
            workers: ids(workers),
            rules,
            restarted: vec![],
        })
    }

    /// One row: a change of the base, the registered workers, the restart mode, and the
    /// expected plan (or the section refused).
    struct Row {
        what: &'static str,
        changes: Vec<(&'static str, Value)>,
        registered: Vec<WorkerId>,
        restart: Restart,
        expect: Result<ChangePlan, Immutable>,
    }

    fn row(what: &'static str, changes: Vec<(&'static str, Value)>) -> Row {
        Row {
            what,
            changes,
            registered: ids(&[0, 1]),
            restart: Restart::WhenNeeded,
            expect: Err(Immutable(Section::Rundir)),
        }
    }

    impl Row {
        fn registered(mut self, w: &[u32]) -> Row {
            self.registered = ids(w);
            self
        }
        fn forced(mut self) -> Row {
            self.restart = Restart::Always;
            self
        }
        fn expect(mut self, changed: &[Section], workers: WorkerChange, gc: GcChange) -> Row {
            self.expect = Ok(ChangePlan {
                changed: changed.to_vec(),
                workers,
                gc,
            });
            self
        }
        fn refused(mut self, section: Section) -> Row {
            self.expect = Err(Immutable(section));
            self
        }
    }

    /// Run the rows; the sections they saw change.
    fn check(rows: Vec<Row>) -> Vec<Section> {
        let old = typed(&base());
        let mut seen = Vec::new();
        for r in rows {
            let new = changed(&r.changes);
            let got = plan(&old, &new, &r.registered, r.restart);
            assert_eq!(got, r.expect, "row: {}", r.what);
            match got {
                Ok(p) => seen.extend(p.changed),
                Err(Immutable(s)) => seen.push(s),
            }
        }
        seen
    }

    use GcChange::{Keep, Replace};
    use SharedMemory::{CacheTop, Defer, RateLimiting};

    #[test]
    fn every_section_has_its_effect() {
        let roll = roll_of_base(&[]);
        let seen = check(vec![
            row("nothing", vec![]).expect(&[], WorkerChange::ResetRules, Keep),
            row("nsid", vec![("/nsid", json!("ns1"))]).expect(&[Section::Nsid], roll.clone(), Keep),
            row("hostname", vec![("/hostname", json!("elsewhere"))]).expect(
                &[Section::Hostname],
                roll.clone(),
                Keep,
            ),
            row("rundir", vec![("/rundir", json!("/run/other"))]).refused(Section::Rundir),
            row(
                "management",
                vec![("/management", json!({"interface": "127.0.0.1@5000"}))],
            )
            .refused(Section::Management),
            row("options", vec![("/options/minimize", json!(false))]).expect(
                &[Section::Options],
                roll.clone(),
                Keep,
            ),
            row("network", vec![("/network/tcp-pipeline", json!(50))]).expect(
                &[Section::Network],
                roll.clone(),
                Keep,
            ),
            row(
                "views",
                vec![(
                    "/views",
                    json!([{"subnets": ["10.0.0.0/8"], "answer": "refused"}]),
                )],
            )
            .expect(&[Section::Views], WorkerChange::ResetRules, Keep),
            row(
                "local-data",
                vec![("/local-data/addresses", json!({"a.example": "192.0.2.1"}))],
            )
            .expect(&[Section::LocalData], WorkerChange::ResetRules, Keep),
            row(
                "forward",
                vec![(
                    "/forward",
                    json!([{"subtree": "example.com", "servers": ["192.0.2.1"]}]),
                )],
            )
            .expect(&[Section::Forward], roll.clone(), Keep),
            row(
                "fallback",
                vec![(
                    "/fallback",
                    json!({"enable": true, "servers": ["192.0.2.1"]}),
                )],
            )
            .expect(&[Section::Fallback], roll.clone(), Keep),
            row("cache size", vec![("/cache/size-max", json!("200M"))]).expect(
                &[Section::Cache],
                roll_of_base(&[CacheTop]),
                Replace,
            ),
            row("dnssec", vec![("/dnssec/log-bogus", json!(true))]).expect(
                &[Section::Dnssec],
                roll.clone(),
                Keep,
            ),
            row("dns64", vec![("/dns64/enable", json!(true))]).expect(
                &[Section::Dns64],
                roll.clone(),
                Keep,
            ),
            row("logging", vec![("/logging/level", json!("info"))]).expect(
                &[Section::Logging],
                live(&[0, 1], RulesChange::Keep),
                Keep,
            ),
            row("monitoring", vec![("/monitoring/metrics", json!("always"))]).expect(
                &[Section::Monitoring],
                roll.clone(),
                Keep,
            ),
            row(
                "rate-limiting",
                vec![("/rate-limiting", json!({"enable": true, "rate-limit": 100}))],
            )
            .expect(
                &[Section::RateLimiting],
                roll_of_base(&[RateLimiting]),
                Keep,
            ),
            row("defer", vec![("/defer/log-period", json!("10s"))]).expect(
                &[Section::Defer],
                roll_of_base(&[Defer]),
                Keep,
            ),
            row("lua", vec![("/lua/script", json!("-- nothing"))]).expect(
                &[Section::Lua],
                roll.clone(),
                Keep,
            ),
            row(
                "fleet",
                vec![(
                    "/fleet",
                    json!({"etcd": {"endpoints": ["http://127.0.0.1:2379"], "prefix": "/kr/f"}}),
                )],
            )
            .refused(Section::Fleet),
            row("workers", vec![("/workers", json!(3))]).expect(
                &[Section::Workers],
                WorkerChange::Roll(Roll {
                    canary: WorkerId(3),
                    unlink: vec![Defer],
                    stop: vec![],
                    restart: ids(&[0, 1]),
                    start: ids(&[2]),
                }),
                Keep,
            ),
        ]);
        // A section added to the configuration without a row here (and so without a decision
        // about its effect) fails this test.
        for section in Section::ALL {
            assert!(seen.contains(section), "no row changes {section}");
        }
    }

    #[test]
    fn every_top_level_key_of_the_schema_is_a_section() {
        let schema = kres_config::json_schema();
        let properties = schema["properties"].as_object().expect("schema properties");
        let keys: Vec<&str> = Section::ALL.iter().map(|s| s.key()).collect();
        for key in properties.keys().filter(|k| *k != "version") {
            assert!(keys.contains(&key.as_str()), "{key} has no Section");
        }
        assert_eq!(
            keys.len() + 1,
            properties.len(),
            "sections beside the schema's"
        );
    }

    #[test]
    fn forced_restarts_roll_without_unlinking_anything() {
        check(vec![
            row("forced, unchanged", vec![])
                .forced()
                .expect(&[], roll_of_base(&[]), Keep),
            row(
                "forced, policy only",
                vec![("/local-data/addresses", json!({"a.example": "192.0.2.1"}))],
            )
            .forced()
            .expect(&[Section::LocalData], roll_of_base(&[]), Keep),
            row(
                "forced, refused anyway",
                vec![("/rundir", json!("/run/other"))],
            )
            .forced()
            .refused(Section::Rundir),
        ]);
    }

    #[test]
    fn scaling_stops_from_the_top_and_starts_what_is_missing() {
        let scaled = |canary, stop: &[u32], restart: &[u32], start: &[u32]| {
            WorkerChange::Roll(Roll {
                canary: WorkerId(canary),
                unlink: vec![Defer],
                stop: ids(stop),
                restart: ids(restart),
                start: ids(start),
            })
        };
        check(vec![
            row("up 2 → 4", vec![("/workers", json!(4))]).expect(
                &[Section::Workers],
                scaled(4, &[], &[0, 1], &[2, 3]),
                Keep,
            ),
            row("down 2 → 1", vec![("/workers", json!(1))]).expect(
                &[Section::Workers],
                scaled(2, &[1], &[0], &[]),
                Keep,
            ),
            row("down 4 → 1, highest first", vec![("/workers", json!(1))])
                .registered(&[0, 1, 2, 3])
                .expect(&[Section::Workers], scaled(2, &[3, 2, 1], &[0], &[]), Keep),
            row(
                "a worker missing after an adoption is started",
                vec![("/workers", json!(3))],
            )
            .registered(&[0, 2])
            .expect(&[Section::Workers], scaled(3, &[], &[0, 2], &[1]), Keep),
            row(
                "several sections at once, in schema order",
                vec![("/workers", json!(3)), ("/defer/log-period", json!("1s"))],
            )
            .expect(
                &[Section::Workers, Section::Defer],
                scaled(3, &[], &[0, 1], &[2]),
                Keep,
            ),
        ]);
    }

    #[test]
    fn the_cache_gc_is_replaced_when_its_arguments_or_the_cache_size_change() {
        check(vec![
            row(
                "gc interval",
                vec![("/cache/garbage-collector/interval", json!("5s"))],
            )
            .expect(&[Section::Cache], roll_of_base(&[]), Replace),
            row(
                "gc off",
                vec![("/cache/garbage-collector/enable", json!(false))],
            )
            .expect(&[Section::Cache], roll_of_base(&[]), Replace),
            row(
                "storage",
                vec![("/cache/storage", json!("/var/cache/other"))],
            )
            .expect(&[Section::Cache], roll_of_base(&[]), Replace),
            row(
                "size: the GC holds the cache's top, which is made anew",
                vec![("/cache/size-max", json!("50M"))],
            )
            .expect(&[Section::Cache], roll_of_base(&[CacheTop]), Replace),
            row(
                "size and storage: the new storage's top is not held",
                vec![
                    ("/cache/size-max", json!("50M")),
                    ("/cache/storage", json!("/var/cache/other")),
                ],
            )
            .expect(&[Section::Cache], roll_of_base(&[]), Replace),
            row("ttl: nothing shared", vec![("/cache/ttl-max", json!("2d"))]).expect(
                &[Section::Cache],
                roll_of_base(&[]),
                Keep,
            ),
        ]);
    }

    #[test]
    fn shared_memory_is_where_the_new_workers_open_it() {
        let cfg = changed(&[("/cache/storage", json!("/var/cache/other"))]);
        let rows = [
            (
                RateLimiting,
                "ratelimiting",
                "/run/knot-resolver/ratelimiting",
            ),
            (Defer, "defer", "/run/knot-resolver/defer"),
            (CacheTop, "cache/top", "/var/cache/other/top"),
        ];
        for (shared, name, path) in rows {
            assert_eq!(shared.name(), name);
            assert_eq!(shared.path(&cfg), Path::new(path));
        }
    }

    #[test]
    fn logging_is_live_unless_something_else_needs_new_workers() {
        let logging = Section::Logging;
        let roll = roll_of_base(&[]);
        check(vec![
            row("level", vec![("/logging/level", json!("warning"))]).expect(
                &[logging],
                live(&[0, 1], RulesChange::Keep),
                Keep,
            ),
            row(
                "groups and target",
                vec![
                    ("/logging/groups", json!(["io", "cache"])),
                    ("/logging/target", json!("stderr")),
                ],
            )
            .expect(&[logging], live(&[0, 1], RulesChange::Keep), Keep),
            row(
                "the workers registered, in order",
                vec![("/logging/level", json!("info"))],
            )
            .registered(&[1, 0, 2])
            .expect(&[logging], live(&[0, 1, 2], RulesChange::Keep), Keep),
            row(
                "debug: the GC runs verbose, so it is replaced",
                vec![("/logging/level", json!("debug"))],
            )
            .expect(&[logging], live(&[0, 1], RulesChange::Keep), Replace),
            row(
                "the cache-gc group: the same",
                vec![("/logging/groups", json!(["cache-gc"]))],
            )
            .expect(&[logging], live(&[0, 1], RulesChange::Keep), Replace),
            row(
                "with local-data: the rules are reset too",
                vec![
                    ("/logging/level", json!("info")),
                    ("/local-data/addresses", json!({"a.example": "192.0.2.1"})),
                ],
            )
            .expect(
                &[Section::LocalData, logging],
                live(&[0, 1], RulesChange::Reset),
                Keep,
            ),
            row(
                "with a section that needs new workers: a roll",
                vec![
                    ("/logging/level", json!("info")),
                    ("/options/minimize", json!(false)),
                ],
            )
            .expect(&[Section::Options, logging], roll.clone(), Keep),
            row(
                "dnstap: a module loaded at start",
                vec![(
                    "/logging/dnstap",
                    json!({"enable": true, "unix-socket": "/tmp/dnstap.sock"}),
                )],
            )
            .expect(&[logging], roll.clone(), Keep),
            row("forced", vec![("/logging/level", json!("info"))])
                .forced()
                .expect(&[logging], roll.clone(), Keep),
        ]);
    }

    #[test]
    fn custom_lua_keeps_logging_changes_rolling() {
        // Custom Lua may set the level itself: a worker restarted later would run it again and
        // end on another level than one changed live.
        for lua in [
            json!({"script": "-- nothing"}),
            json!({"script-only": true, "script": "-- nothing"}),
        ] {
            let mut raw = base();
            raw["lua"] = lua.clone();
            let old = typed(&raw);
            raw["logging"] = json!({"level": "info"});
            let new = typed(&raw);
            let got = plan(&old, &new, &ids(&[0, 1]), Restart::WhenNeeded);
            assert_eq!(
                got.map(|p| p.workers),
                Ok(roll_of_base(&[])),
                "with lua {lua}"
            );
        }
    }

    #[test]
    fn a_summary_tells_the_plan_and_what_its_stage_knows() {
        let names = |n: &[&str]| -> Vec<String> { n.iter().map(|s| (*s).to_owned()).collect() };
        let rolling = |unlink: &[SharedMemory]| ChangePlan {
            changed: vec![Section::Workers, Section::Defer],
            workers: WorkerChange::Roll(Roll {
                canary: WorkerId(3),
                unlink: unlink.to_vec(),
                stop: ids(&[2]),
                restart: ids(&[0, 1]),
                start: vec![],
            }),
            gc: Replace,
        };
        let restart = |canary: bool, unlink: &[&str]| WorkersAction::Restart {
            canary,
            stop: names(&["kresd2"]),
            restart: names(&["kresd0", "kresd1"]),
            start: vec![],
            unlink: names(unlink),
        };
        let live = ChangePlan {
            changed: vec![Section::Logging],
            workers: WorkerChange::Live(Live {
                workers: ids(&[0, 1]),
                rules: RulesChange::Reset,
                restarted: ids(&[1]),
            }),
            gc: Keep,
        };
        let live_action = |restarted: Option<Vec<String>>| WorkersAction::Live {
            workers: names(&["kresd0", "kresd1"]),
            restarted,
            rules_reset: true,
        };
        let rows = [
            (rolling(&[]), Stage::DryRun, restart(true, &[])),
            (rolling(&[Defer]), Stage::DryRun, restart(false, &["defer"])),
            (rolling(&[Defer]), Stage::Applied, restart(true, &["defer"])),
            (live.clone(), Stage::DryRun, live_action(None)),
            (live, Stage::Applied, live_action(Some(names(&["kresd1"])))),
            (
                ChangePlan::default(),
                Stage::Applied,
                WorkersAction::RulesReset,
            ),
        ];
        for (plan, stage, workers) in rows {
            let summary = plan.summary(stage);
            assert_eq!(summary.workers, workers, "{plan:?} at {stage:?}");
            let changed: Vec<&str> = plan.changed.iter().map(|s| s.key()).collect();
            assert_eq!(summary.changed, changed);
            let gc = if plan.gc == Replace {
                GcAction::Replace
            } else {
                GcAction::Keep
            };
            assert_eq!(summary.cache_gc, gc);
        }
    }
    #[test]
    fn missing_workers_are_the_gaps_below_the_count() {
        let new = changed(&[("/workers", json!(4))]);
        assert_eq!(missing(&new, &ids(&[1, 3])), ids(&[0, 2]));
        assert_eq!(missing(&new, &ids(&[0, 1, 2, 3, 4])), ids(&[]));
    }
}
