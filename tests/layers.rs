//! The layer rule of ARCHITECTURE.md, kept: the top-level modules of the daemon's crate form
//! layers, and an import (`crate::module`, outside tests and comments) only ever points down
//! the list; ARCHITECTURE.md's module table lists them in that order, the sibling crates the
//! daemon imports (`kres_wire::…`) below them, and names exactly what each imports; the supervisor crate's modules import each other without a cycle; no two
//! files of any crate import each other in a circle (the paths from `crate::`, `super::` and
//! `self::` resolved to the file they name); the workspace's library crates depend on
//! each other only downwards; no task of the resolver's processes is spawned detached
//! (each one's owner stops it and waits for it); and none of their errors is a bare string.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The root crate's modules, top first, as ARCHITECTURE.md's module table lists them.
const LAYERS: &[&str] = &[
    "daemon",
    "api",
    "trace",
    "rpz",
    "watchdog",
    "fleet",
    "manager",
    "metrics",
    "events",
    "query_log",
    "control",
    "service",
    "etag",
];

/// The sibling crates the daemon's code imports by their own names, at the bottom of the
/// module table: each row's name and the path it stands for (`kres_wire::environment` has a
/// row apart from the rest of `kres_wire`).
const SIBLINGS: &[(&str, &str)] = &[
    ("lua", "kres_lua"),
    ("wire", "kres_wire"),
    ("environment", "kres_wire::environment"),
    ("config", "kres_config"),
];

/// The module table's rows, top first.
fn rows() -> Vec<&'static str> {
    LAYERS
        .iter()
        .copied()
        .chain(SIBLINGS.iter().map(|(row, _)| *row))
        .collect()
}

/// Every `.rs` file below `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("a readable source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out
}

/// The code of a file before its tests, without comment lines.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("a readable source file");
    let before_tests = text.split("#[cfg(test)]").next().unwrap_or_default();
    before_tests
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names following each `crate::` in `code`, each of a group (`crate::{a, b::c}`)
/// included.
fn imported(code: &str) -> BTreeSet<String> {
    names_after(code, "crate::").into_iter().collect()
}

/// The sibling crates `code` imports, by their rows in the module table: `kres_wire::X` is
/// `environment` if X is `environment`, else `wire`.
fn imported_siblings(code: &str) -> BTreeSet<String> {
    let row = |path: &str| SIBLINGS.iter().find(|(_, p)| *p == path).map(|(r, _)| *r);
    let crates: BTreeSet<&str> = SIBLINGS
        .iter()
        .filter_map(|(_, p)| p.split("::").next())
        .collect();
    crates
        .into_iter()
        .flat_map(|krate| {
            names_after(code, &format!("{krate}::"))
                .into_iter()
                .filter_map(move |name| row(&format!("{krate}::{name}")).or(row(krate)))
        })
        .map(str::to_owned)
        .collect()
}

/// The first name after each `start` (`crate::`) in `code` that begins a path, each entry's
/// of a group (`crate::{a, b::c}`).
fn names_after(code: &str, start: &str) -> Vec<String> {
    let word = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    code.match_indices(start)
        .filter(|(at, _)| {
            // `supervisor::` or `kres_daemon::` would end in `crate::` only as part of a
            // longer identifier (`mykres_wire::` in `kres_wire::`); a real path starts at a
            // boundary.
            !code[..*at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
        .flat_map(|(at, _)| {
            let rest = &code[at + start.len()..];
            match rest.strip_prefix('{') {
                // The first name of each entry at the group's own depth.
                Some(group) => {
                    let mut names = vec![word(group)];
                    let mut depth = 0;
                    for (i, c) in group.char_indices() {
                        match c {
                            '{' => depth += 1,
                            '}' if depth == 0 => break,
                            '}' => depth -= 1,
                            ',' if depth == 0 => names.push(word(&group[i + 1..])),
                            _ => {}
                        }
                    }
                    names
                }
                None => vec![word(rest)],
            }
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// Top-level module → the top-level modules it imports, for the crate whose sources are in
/// `src`.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    imports_counting(src, false)
}

/// [`imports`], with the daemon's [`SIBLINGS`] among what a module imports if `siblings`.
fn imports_counting(src: &Path, siblings: bool) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in sources(src) {
        let rel = file.strip_prefix(src).expect("below the source directory");
        let first = rel.components().next().expect("a path");
        let module = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if matches!(module.as_str(), "lib" | "main" | "bin") {
            continue;
        }
        let is_module = |m: &str| src.join(format!("{m}.rs")).is_file() || src.join(m).is_dir();
        let code = code(&file);
        let mut uses: BTreeSet<String> = imported(&code)
            .into_iter()
            .filter(|m| *m != module && is_module(m))
            .collect();
        if siblings {
            uses.extend(imported_siblings(&code));
        }
        if !uses.is_empty() {
            graph.entry(module.clone()).or_default().extend(uses);
        }
    }
    graph
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_import_of_the_root_crate_points_down_the_layers() {
    let graph = imports(&root().join("daemon/src"));
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
    let mut wrong = Vec::new();
    for (module, uses) in &graph {
        let Some(own) = rank(module) else {
            wrong.push(format!("{module}: not in the list of layers"));
            continue;
        };
        for used in uses {
            match rank(used) {
                Some(r) if r > own => {}
                Some(_) => wrong.push(format!("{module} imports {used}, which is above it")),
                None => wrong.push(format!("{used}: not in the list of layers")),
            }
        }
    }
    assert!(wrong.is_empty(), "the layer rule is broken: {wrong:#?}");
    // The list names every module there is, and nothing else.
    let on_disk: BTreeSet<String> = std::fs::read_dir(root().join("daemon/src"))
        .expect("daemon/src")
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            let name = name.trim_end_matches(".rs").to_owned();
            (!matches!(name.as_str(), "lib" | "main" | "bin")).then_some(name)
        })
        .collect();
    let listed: BTreeSet<String> = LAYERS.iter().map(|s| s.to_string()).collect();
    assert_eq!(on_disk, listed, "src/ and the list of layers differ");
}

/// The rows of ARCHITECTURE.md's module table in order: each row's module, and the modules
/// its last column names (backquoted names that are rows of the table).
fn documented_layers() -> Vec<(String, BTreeSet<String>)> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let table = text
        .split("| module | what it is | uses |")
        .nth(1)
        .expect("the module table");
    let known: BTreeSet<&str> = rows().into_iter().collect();
    let quoted =
        |s: &str| -> Vec<String> { s.split('`').skip(1).step_by(2).map(str::to_owned).collect() };
    table
        .lines()
        .skip(2)
        .take_while(|row| row.starts_with("| `"))
        .map(|row| {
            let module = quoted(row).into_iter().next().unwrap_or_default();
            let last = row
                .trim_end()
                .trim_end_matches('|')
                .rsplit(" | ")
                .next()
                .unwrap_or_default();
            let uses = quoted(last)
                .into_iter()
                .filter(|n| known.contains(n.as_str()))
                .collect();
            (module, uses)
        })
        .collect()
}

#[test]
fn the_module_table_names_what_each_module_imports() {
    let documented = documented_layers();
    let order: Vec<&str> = documented.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        order,
        rows(),
        "ARCHITECTURE.md's module table and the list of layers differ"
    );
    let graph = imports_counting(&root().join("daemon/src"), true);
    let wrong: Vec<String> = documented
        .iter()
        .filter_map(|(module, said)| {
            let real = graph.get(module).cloned().unwrap_or_default();
            (real != *said)
                .then(|| format!("{module}: the table says {said:?}, the code imports {real:?}"))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's module table is wrong: {wrong:#?}"
    );
}

/// The library crates of the workspace by layer, top first, with their directories: a crate
/// depends only on crates of lower layers. The configuration and the supervisor are
/// siblings: neither knows the other; both may make the heap ready.
const CRATE_LAYERS: &[(&str, &str, u32)] = &[
    ("knot-resolver", ".", 0),
    ("kres-daemon", "daemon", 1),
    ("kresctl", "kresctl", 1),
    ("kres-lua", "lua", 2),
    ("kres-wire", "wire", 3),
    ("kres-config", "config", 4),
    ("supervisor", "supervisor", 4),
    ("kres-fleet", "fleet", 4),
    ("heap", "heap", 5),
    ("supervisor-types", "supervisor-types", 5),
];

/// The crates of the workspace that `dir`'s manifest depends on (not for tests), by name.
fn workspace_dependencies(dir: &str) -> BTreeSet<String> {
    let path = root().join(dir).join("Cargo.toml");
    let text = std::fs::read_to_string(&path).expect("a readable manifest");
    let manifest: toml::Table = text.parse().expect("a manifest in TOML");
    manifest
        .get("dependencies")
        .and_then(toml::Value::as_table)
        .into_iter()
        .flatten()
        .filter(|(_, spec)| spec.get("path").is_some())
        .map(|(name, _)| name.clone())
        .collect()
}

#[test]
fn every_crate_depends_only_on_crates_below_it() {
    let layer = |name: &str| CRATE_LAYERS.iter().find(|(n, ..)| *n == name).map(|c| c.2);
    let mut wrong = Vec::new();
    for &(name, dir, own) in CRATE_LAYERS {
        for dependency in workspace_dependencies(dir) {
            match layer(&dependency) {
                Some(l) if l > own => {}
                Some(_) => wrong.push(format!("{name} depends on {dependency}, not below it")),
                None => wrong.push(format!("{name} depends on {dependency}, in no layer")),
            }
        }
    }
    assert!(wrong.is_empty(), "the crate layers are broken: {wrong:#?}");
    // The check reads what it should: the root crate depends on all the others.
    assert_eq!(
        workspace_dependencies("daemon"),
        BTreeSet::from(
            [
                "heap",
                "kres-config",
                "kres-fleet",
                "kres-lua",
                "kres-wire",
                "supervisor"
            ]
            .map(str::to_owned)
        )
    );
}

/// kresctl is a client: it knows the configuration model, the wire types and the Lua of
/// `kresctl convert`, nothing of the daemon, and the daemon nothing of it: the root package
/// (the two binaries' `main`s) is the only crate that depends on both.
#[test]
fn kresctl_and_the_daemon_know_each_other_only_through_the_wire() {
    assert_eq!(
        workspace_dependencies("kresctl"),
        BTreeSet::from(["kres-config", "kres-lua", "kres-wire"].map(str::to_owned))
    );
    assert!(!workspace_dependencies("daemon").contains("kresctl"));
    let bin = root().join("src/bin/kresctl.rs");
    let mut users: Vec<String> = sources(&root().join("daemon/src"))
        .into_iter()
        .filter(|f| code(f).contains("kresctl::"))
        .map(|f| f.display().to_string())
        .collect();
    users.sort();
    assert!(
        users.is_empty(),
        "the daemon's library uses kresctl: {users:?}"
    );
    assert!(
        code(&bin).contains("kresctl::main"),
        "the binary is kresctl's"
    );
}

#[test]
fn the_supervisor_and_config_crates_have_no_import_cycle() {
    for dir in [
        "supervisor/src",
        "config/src",
        "heap/src",
        "fleet/src",
        "wire/src",
        "lua/src",
        "kresctl/src",
    ] {
        assert_eq!(
            import_cycle(&imports(&root().join(dir))),
            None,
            "an import cycle in {dir}"
        );
    }
}

/// An import cycle among the modules of `graph`, if there is one.
fn import_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search for a back edge.
    fn visit<'a>(
        node: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| *n == node) {
            let mut cycle: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if !done.insert(node) {
            return None;
        }
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_import_reader_sees_what_it_should() {
    let code = "use crate::api::x;\nlet y = crate::rpz::Z; kres_daemon::crate_x; mycrate::no;\n\
                use crate::{trace::{a, b}, service};";
    assert_eq!(
        imported(code),
        BTreeSet::from(["api", "rpz", "service", "trace"].map(str::to_owned))
    );
    let siblings = |code: &str| -> Vec<String> { imported_siblings(code).into_iter().collect() };
    assert_eq!(siblings("kres_lua::quote(x); mykres_config::no;"), ["lua"]);
    assert_eq!(siblings("use kres_wire::environment::E;"), ["environment"]);
    assert_eq!(
        siblings("use kres_wire::{environment::E, rpz::Z};\nkres_config::X;"),
        ["config", "environment", "wire"]
    );
    assert!(siblings("use crate::lua; kres_daemon::wire::X;").is_empty());
}

/// Every path of `code` that starts at `crate::`, `super::` or `self::`, as its segments
/// (a group, `super::{a, b::c}`, gives one path an entry, with the entry's first name).
fn paths(code: &str) -> Vec<Vec<String>> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            // A path starts at a boundary (not `mycrate::`), and a `super::` after `super::`
            // is the same path as the first's.
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut segments = vec![start.trim_end_matches("::").to_owned()];
            let mut rest = &code[at + start.len()..];
            loop {
                if let Some(group) = rest.strip_prefix('{') {
                    let mut depth = 0;
                    let mut entries = vec![ident(group)];
                    for (i, c) in group.char_indices() {
                        match c {
                            '{' => depth += 1,
                            '}' if depth == 0 => break,
                            '}' => depth -= 1,
                            ',' if depth == 0 => entries.push(ident(&group[i + 1..])),
                            _ => {}
                        }
                    }
                    for entry in entries.into_iter().filter(|e| !e.is_empty()) {
                        let mut path = segments.clone();
                        path.push(entry);
                        out.push(path);
                    }
                    break;
                }
                let name = ident(rest);
                if name.is_empty() {
                    out.push(segments);
                    break;
                }
                rest = &rest[name.len()..];
                segments.push(name);
                match rest.strip_prefix("::") {
                    Some(more) => rest = more,
                    None => {
                        out.push(segments);
                        break;
                    }
                }
            }
        }
    }
    out
}

/// File → the files of the same crate it takes names from, for the crate whose library
/// sources are in `src` (its binaries and its test modules left out).
fn file_imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    // Each file's module path: `a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` is the root.
    let mut modules: BTreeMap<Vec<String>, String> = BTreeMap::new();
    for file in sources(src) {
        let rel = file.strip_prefix(src).expect("below the source directory");
        let text = rel.to_string_lossy().into_owned();
        let name = rel.file_stem().map(|s| s.to_string_lossy().into_owned());
        if text.starts_with("bin/")
            || name
                .as_deref()
                .is_some_and(|n| n == "tests" || n.ends_with("_tests"))
        {
            continue;
        }
        let mut path: Vec<String> = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(
            path.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            path.pop();
        }
        modules.insert(path, text);
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &modules {
        let is_dir_module = file.ends_with("mod.rs") || module.is_empty();
        for path in paths(&code(&src.join(file))) {
            // Where the path starts from.
            let mut at: Vec<String> = Vec::new();
            let mut segments = path.iter().peekable();
            match segments.next().map(String::as_str) {
                Some("crate") => {}
                Some("self") => at = module.clone(),
                Some("super") => {
                    // `super` of `a::b` is `a`; each further `super` one more up.
                    at = module.clone();
                    at.pop();
                    while segments.peek().is_some_and(|s| *s == "super") {
                        segments.next();
                        at.pop();
                    }
                }
                _ => continue,
            }
            // The longest module the path names.
            let mut target = None;
            for segment in segments {
                at.push(segment.clone());
                if modules.contains_key(&at) {
                    target = Some(at.clone());
                } else {
                    break;
                }
            }
            let target = match target {
                Some(t) => t,
                // A name of the module the path started from (`super::Membership`).
                None => {
                    at.pop();
                    at
                }
            };
            let Some(to) = modules.get(&target) else {
                continue;
            };
            // The crate root and a file's own module are not imports of another file.
            if target.is_empty() || to == file || (is_dir_module && target == *module) {
                continue;
            }
            graph.entry(file.clone()).or_default().insert(to.clone());
        }
    }
    graph
}

#[test]
fn no_two_files_of_any_crate_import_each_other_in_a_circle() {
    for dir in crate_sources(None) {
        let graph = file_imports(&root().join(dir));
        assert!(
            !graph.is_empty() || dir != "daemon/src",
            "no imports read in {dir}"
        );
        assert_eq!(
            import_cycle(&graph),
            None,
            "an import circle of files in {dir}"
        );
    }
}

/// Every crate's source folder (the crates' own `src/`, the workspace root's binaries), and
/// whether its code runs in the resolver's processes (the root, the manager): the root
/// crate's `main`, the daemon and every crate it links.
const CRATE_SOURCES: &[(&str, Runs)] = &[
    ("src", Runs::InTheResolver),
    ("daemon/src", Runs::InTheResolver),
    ("supervisor/src", Runs::InTheResolver),
    ("supervisor-types/src", Runs::InTheResolver),
    ("config/src", Runs::InTheResolver),
    ("heap/src", Runs::InTheResolver),
    ("fleet/src", Runs::InTheResolver),
    ("wire/src", Runs::InTheResolver),
    ("lua/src", Runs::InTheResolver),
    ("kresctl/src", Runs::Elsewhere),
    ("bench/src", Runs::Elsewhere),
    ("dist/gen/src", Runs::Elsewhere),
];

/// Where a crate's code runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Runs {
    InTheResolver,
    Elsewhere,
}

/// The source folders of the crates whose code runs `where_`, or of all of them.
fn crate_sources(where_: Option<Runs>) -> impl Iterator<Item = &'static str> {
    CRATE_SOURCES
        .iter()
        .filter(move |(_, runs)| where_.is_none_or(|w| w == *runs))
        .map(|(dir, _)| *dir)
}

/// Every module says what it owns, first thing: its file opens with a `//!` comment (test
/// files aside, which say it on each test).
#[test]
fn every_module_opens_with_what_it_owns() {
    let mut silent = Vec::new();
    for dir in crate_sources(None) {
        let files = sources(&root().join(dir));
        assert!(!files.is_empty(), "no sources in {dir}");
        for file in files {
            if file.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or_default();
            if !first.starts_with("//!") {
                silent.push(file.display().to_string());
            }
        }
    }
    silent.sort();
    assert!(
        silent.is_empty(),
        "modules without a doc comment saying what they own: {silent:#?}"
    );
}

/// The three documents a newcomer reads first stay the size of one sitting: the map
/// (ARCHITECTURE.md), what each version changed (CHANGELOG.md) and the front door (README).
#[test]
fn the_map_the_changelog_and_the_readme_stay_short() {
    for (file, most) in [
        ("ARCHITECTURE.md", 25_000),
        ("CHANGELOG.md", 30_000),
        ("README.md", 12_000),
    ] {
        let bytes = std::fs::metadata(root().join(file))
            .expect("the document exists")
            .len();
        assert!(
            bytes <= most,
            "{file} is {bytes} bytes, over {most}: the details belong in docs/ or the modules"
        );
    }
}

#[test]
fn the_file_import_reader_resolves_paths_from_where_they_start() {
    let code = "use super::{a, b::{c, d}};\nlet x = crate::kresctl::client::ClientError::Io;\n\
                self::inner::f(); mycrate::no; super::super::top::T;";
    assert_eq!(
        paths(code),
        [
            vec!["crate", "kresctl", "client", "ClientError", "Io"],
            vec!["super", "a"],
            vec!["super", "b"],
            vec!["super", "super", "top", "T"],
            vec!["self", "inner", "f"],
        ]
    );
}

/// ARCHITECTURE.md's list of the workspace's crates and what each depends on, as
/// `(crate, dependencies, dev-dependencies)`.
fn documented_crates() -> BTreeSet<(String, BTreeSet<String>, BTreeSet<String>)> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let section = text
        .split("### Crates and their dependencies")
        .nth(1)
        .expect("the section of the crates' dependencies");
    let names = |list: &str| -> BTreeSet<String> {
        list.split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty() && *n != "(none)")
            .map(str::to_owned)
            .collect()
    };
    section
        .lines()
        .skip_while(|l| !l.starts_with("- "))
        .take_while(|l| l.starts_with("- "))
        .map(|line| {
            let (name, rest) = line[2..].split_once(" -> ").expect("`crate -> deps`");
            let (deps, dev) = match rest.split_once("(dev: ") {
                Some((deps, dev)) => (deps, dev.trim_end_matches(')')),
                None => (rest, ""),
            };
            (name.trim().to_owned(), names(deps), names(dev))
        })
        .collect()
}

#[test]
fn the_documented_crate_graph_is_cargos() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let members: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let actual: BTreeSet<(String, BTreeSet<String>, BTreeSet<String>)> = packages
        .iter()
        .map(|p| {
            let of_kind = |dev: bool| -> BTreeSet<String> {
                p["dependencies"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|d| (d["kind"].as_str() == Some("dev")) == dev)
                    .filter_map(|d| d["name"].as_str())
                    .filter(|n| members.contains(n))
                    .map(str::to_owned)
                    .collect()
            };
            let name = p["name"].as_str().unwrap_or_default().to_owned();
            (name, of_kind(false), of_kind(true))
        })
        .collect();
    assert_eq!(
        documented_crates(),
        actual,
        "ARCHITECTURE.md's crate list and cargo's differ"
    );
}

/// How many times `code` spawns a task on the runtime itself (`tokio::spawn`,
/// `tokio::task::spawn`, `spawn_local`; a `use` of them counts too), but for a spawn whose
/// handle aborts the task when dropped (`AbortOnDropHandle::new(tokio::spawn(…))`): whoever
/// holds that handle owns the task.
fn detached_spawns(code: &str) -> usize {
    let spawns: usize = [
        "tokio::spawn",
        "task::spawn(",
        "task::spawn;",
        "task::spawn,",
        "spawn_local",
    ]
    .iter()
    .map(|pattern| code.matches(pattern).count())
    .sum();
    spawns - code.matches("AbortOnDropHandle::new(tokio::spawn(").count()
}

#[test]
fn no_task_of_the_resolver_is_spawned_detached() {
    let mut detached = Vec::new();
    for dir in crate_sources(Some(Runs::InTheResolver)) {
        for file in sources(&root().join(dir)) {
            let n = detached_spawns(&code(&file));
            if n > 0 {
                detached.push(format!("{}: {n}", file.display()));
            }
        }
    }
    detached.sort();
    assert!(
        detached.is_empty(),
        "tasks spawned detached (spawn them on the owner's TaskTracker or JoinSet, stopped \
         by its token and waited for at its stop): {detached:#?}"
    );
}

/// The lines of `code` that return a bare string as an error (`Result<…, String>`).
fn string_errors(code: &str) -> Vec<String> {
    code.lines()
        .filter(|l| l.contains("Result<") && l.contains(", String>"))
        .map(|l| l.trim().to_owned())
        .collect()
}

/// Errors are types that say what failed (and carry its source), not strings made where
/// they happen: in every crate of the resolver's processes and in `kresctl`, test files
/// aside.
#[test]
fn no_error_of_the_resolver_is_a_bare_string() {
    let mut found = Vec::new();
    for dir in crate_sources(Some(Runs::InTheResolver)).chain(["kresctl/src"]) {
        for file in sources(&root().join(dir)) {
            if file.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            for line in string_errors(&code(&file)) {
                found.push(format!("{}: {line}", file.display()));
            }
        }
    }
    found.sort();
    assert!(
        found.is_empty(),
        "errors typed as String (give them an error type): {found:#?}"
    );
    assert_eq!(
        string_errors("fn a() -> Result<(), String> {}\nfn b() -> Result<u8, Error> {}"),
        ["fn a() -> Result<(), String> {}"],
        "the reader sees what it should"
    );
}

#[test]
fn the_spawn_reader_sees_what_it_should() {
    let sample = "tokio::spawn(a);\nlet b = tokio::task::spawn(b);\nuse tokio::task::spawn;\n\
                tokio::task::spawn_local(c);\ntracker.spawn(d); set.spawn(e);\n\
                tokio::task::spawn_blocking(f); std::thread::spawn(g);";
    assert_eq!(detached_spawns(sample), 4);
    let owned = "let a = AbortOnDropHandle::new(tokio::spawn(a));\nlet b = tokio::spawn(b);";
    assert_eq!(
        detached_spawns(owned),
        1,
        "a handle that aborts on drop owns its task"
    );
    let file = std::env::temp_dir().join(format!("kres-layers-{}.rs", std::process::id()));
    let text = "// tokio::spawn(in_a_comment);\nfn f() { tracker.spawn(x); }\n\
                #[cfg(test)]\nmod tests { fn t() { tokio::spawn(y); } }\n";
    std::fs::write(&file, text).expect("a temporary file");
    let found = detached_spawns(&code(&file));
    std::fs::remove_file(&file).ok();
    assert_eq!(found, 0, "comments and tests are not the code");
}
