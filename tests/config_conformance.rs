//! Conformance with upstream's real `kresctl validate` (6.5.0, non-strict) on the labelled corpus
//! in `tests/data/conformance/` (see its README.md).
//!
//! Every case is loaded the way our `kresctl validate` does it ([`load_files`]: parsed by its
//! extension, validated non-strict, relative paths resolved against the case's directory) and
//! compared with upstream's label:
//! * the verdict (valid / invalid) must agree;
//! * for invalid cases, the *set* of error paths must agree (nested union causes included), after
//!   rewriting upstream's path syntax into JSON pointers (see [`upstream_pointer`]).
//!
//! Where we differ on purpose, the case is listed in `divergences.json` with one of four kinds,
//! each checked for what it allows:
//! * `upstream-crash`: upstream dies with a Python traceback; we accept or give a proper error;
//! * `useless-path`: the verdicts agree, and upstream's paths that we do not report are only `/`,
//!   `""` or below a lost `/` like `//0` (we report the real pointer instead);
//! * `message-text`: verdict and paths agree; only the message text differs (a typo upstream, or
//!   Python set order). Documentation only: this test does not compare texts;
//! * `upstream-bug`: upstream accepts a value outside its own type's domain (NaN as a float in
//!   `[0, 65535]`), and we reject it.
//!
//! The table also counts, for information only, the validation reports whose whole text is
//! identical once upstream's paths are rewritten (`KRES_CONFORMANCE_TEXTS=1` prints the others).
//!
//! `KRES_CONFORMANCE_DIR=<dir>` runs the same comparison on another labelled set (a directory
//! with `cases/` and `labels.json`, as `gen_fresh.py` and `label.py --root` write them), using
//! that directory's `divergences.json` if it has one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use kres_config::{load_files, ConfigError, ValidationError};
use serde_json::Value;

/// What our validator said about one case.
#[derive(Debug)]
enum Verdict {
    Valid,
    /// Validation errors: paths flattened in report order (union causes included), and the
    /// report as `kresctl validate` prints it.
    Invalid(Vec<String>, String),
    /// The file could not be read or parsed (upstream: a parse error, no paths).
    Unparsable(String),
}

impl Verdict {
    fn is_valid(&self) -> bool {
        matches!(self, Verdict::Valid)
    }

    fn paths(&self) -> BTreeSet<String> {
        match self {
            Verdict::Invalid(paths, _) => paths.iter().cloned().collect(),
            _ => BTreeSet::new(),
        }
    }
}

fn flatten(e: &ValidationError, out: &mut Vec<String>) {
    out.push(e.path.clone());
    for c in &e.causes {
        flatten(c, out);
    }
}

/// Our `kresctl validate FILE` (non-strict), reduced to what the labels record.
fn ours(file: &Path) -> Verdict {
    match load_files(
        &[file.to_owned()],
        kres_config::PathChecks::Lenient,
        Default::default(),
    ) {
        Ok(_) => Verdict::Valid,
        Err(ConfigError::Invalid(errors)) => {
            let mut paths = Vec::new();
            for e in &errors.0 {
                flatten(e, &mut paths);
            }
            Verdict::Invalid(paths, errors.to_string())
        }
        Err(e) => Verdict::Unparsable(e.to_string()),
    }
}

/// Upstream's path syntax as a JSON pointer: a `[x]` group (list index or mapping key) becomes
/// the segment `/x` (escaped per RFC 6901), so `/views[0]/subnets[0]` → `/views/0/subnets/0`
/// and `/local-data/addresses[a.example]` → `/local-data/addresses/a.example`. The top-level
/// spellings `""` and `/` are kept as they are.
fn upstream_pointer(path: &str) -> String {
    if path.is_empty() || path == "/" {
        return path.to_owned();
    }
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find(']').map_or(rest.len(), |c| open + c);
        let segment = &rest[open + 1..close];
        out.push('/');
        out.push_str(&segment.replace('~', "~0").replace('/', "~1"));
        rest = rest.get(close + 1..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

/// One labelled case.
struct Label {
    valid: bool,
    paths: BTreeSet<String>,
    traceback: bool,
    /// The validation report with paths rewritten as JSON pointers (`None` for other output).
    report: Option<String>,
}

/// Upstream's validation report with every `[path]` rewritten by [`upstream_pointer`].
fn upstream_report(stderr: &str) -> Option<String> {
    if !stderr.starts_with("Configuration validation error") {
        return None;
    }
    let lines: Vec<String> = stderr
        .trim_end()
        .lines()
        .map(|line| {
            let body = line.trim_start_matches('\t');
            let tabs = &line[..line.len() - body.len()];
            match body
                .strip_prefix('[')
                .and_then(path_end)
                .map(|end| (&body[1..end], &body[end + 1..]))
            {
                Some((path, rest)) => format!("{tabs}[{}]{rest}", upstream_pointer(path)),
                None => line.to_owned(),
            }
        })
        .collect();
    Some(lines.join("\n"))
}

/// The index in `[path] …` of the `]` closing the path (paths contain `[…]` groups).
fn path_end(after_open: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in after_open.char_indices() {
        match c {
            '[' => depth += 1,
            ']' if depth == 0 => return Some(i + 1),
            ']' => depth -= 1,
            _ => {}
        }
    }
    None
}

fn read_labels(dir: &Path) -> (BTreeMap<String, Label>, Value) {
    let text = std::fs::read_to_string(dir.join("labels.json")).expect("labels.json");
    let json: Value = serde_json::from_str(&text).expect("labels.json is JSON");
    let mut labels = BTreeMap::new();
    for (case, l) in json["cases"].as_object().expect("cases") {
        let paths = l["error_paths"]
            .as_array()
            .expect("error_paths")
            .iter()
            .map(|p| upstream_pointer(p.as_str().expect("path string")))
            .collect();
        let stderr = l["stderr"].as_str().unwrap_or("");
        labels.insert(
            case.clone(),
            Label {
                valid: l["valid"].as_bool().expect("valid"),
                paths,
                traceback: stderr.contains("Traceback (most recent call last)"),
                report: upstream_report(stderr),
            },
        );
    }
    (labels, json["meta"].clone())
}

/// A reviewed, intentional difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Divergence {
    UpstreamCrash,
    UselessPath,
    MessageText,
    UpstreamBug,
}

fn read_divergences(dir: &Path) -> BTreeMap<String, Divergence> {
    let Ok(text) = std::fs::read_to_string(dir.join("divergences.json")) else {
        return BTreeMap::new();
    };
    let json: Value = serde_json::from_str(&text).expect("divergences.json is JSON");
    json["cases"]
        .as_object()
        .expect("divergences.json: cases")
        .iter()
        .map(|(case, d)| {
            assert!(
                d["reason"].as_str().is_some_and(|r| !r.is_empty()),
                "{case}: a divergence needs a reason"
            );
            let kind = match d["kind"].as_str() {
                Some("upstream-crash") => Divergence::UpstreamCrash,
                Some("useless-path") => Divergence::UselessPath,
                Some("message-text") => Divergence::MessageText,
                Some("upstream-bug") => Divergence::UpstreamBug,
                other => panic!("{case}: unknown divergence kind {other:?}"),
            };
            (case.clone(), kind)
        })
        .collect()
}

/// How one case compares.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Agree,
    /// A listed divergence that holds as described.
    Divergent,
    /// A disagreement (or a listed divergence that does not hold as described).
    Disagree(String),
}

fn compare(label: &Label, got: &Verdict, divergence: Option<Divergence>) -> (bool, bool, Outcome) {
    let verdict_ok = label.valid == got.is_valid();
    let ours = got.paths();
    let paths_ok = verdict_ok && label.paths == ours;
    let describe = || {
        format!(
            "upstream {} {:?}, ours {}",
            if label.valid { "valid" } else { "invalid" },
            label.paths,
            match got {
                Verdict::Valid => "valid".to_owned(),
                Verdict::Invalid(p, _) =>
                    format!("invalid {:?}", p.iter().collect::<BTreeSet<_>>()),
                Verdict::Unparsable(e) => format!("unparsable: {e}"),
            }
        )
    };
    let outcome = match divergence {
        None if paths_ok => Outcome::Agree,
        None => Outcome::Disagree(describe()),
        Some(Divergence::UpstreamCrash) if label.traceback && !label.valid => Outcome::Divergent,
        Some(Divergence::UpstreamCrash) => Outcome::Disagree(format!(
            "listed as upstream-crash, but upstream did not crash; {}",
            describe()
        )),
        Some(Divergence::UselessPath) => {
            // `/`, `""`, or a path below a lost `/` (a union cause such as `//0`)
            let useless_only = label
                .paths
                .difference(&ours)
                .all(|p| p.is_empty() || p == "/" || p.starts_with("//"));
            if paths_ok {
                Outcome::Disagree("listed as useless-path, but the paths agree".into())
            } else if verdict_ok && useless_only {
                Outcome::Divergent
            } else {
                Outcome::Disagree(format!("listed as useless-path; {}", describe()))
            }
        }
        Some(Divergence::UpstreamBug) if label.valid && !got.is_valid() => Outcome::Divergent,
        Some(Divergence::UpstreamBug) => Outcome::Disagree(format!(
            "listed as upstream-bug (upstream accepts, we reject), but {}",
            describe()
        )),
        Some(Divergence::MessageText) if paths_ok => Outcome::Divergent,
        Some(Divergence::MessageText) => Outcome::Disagree(format!(
            "listed as message-text, but verdict or paths differ; {}",
            describe()
        )),
    };
    (verdict_ok, paths_ok, outcome)
}

/// Per-directory tallies.
#[derive(Default)]
struct Tally {
    cases: usize,
    verdicts: usize,
    paths: usize,
    divergent: usize,
    disagree: usize,
    /// Cases where both sides printed a validation report, and where the texts are identical.
    reports: usize,
    texts: usize,
}

fn run(dir: &Path, divergences: &BTreeMap<String, Divergence>) {
    let (labels, meta) = read_labels(dir);
    assert!(!labels.is_empty(), "no labelled cases in {}", dir.display());
    for case in divergences.keys() {
        assert!(
            labels.contains_key(case),
            "divergences.json lists unknown case {case}"
        );
    }
    // The maximum worker count is 10 × the CPU count, so a few verdicts depend on the machine.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let nproc_dependent: BTreeSet<&str> = if meta["nproc"].as_u64() == Some(cpus as u64) {
        BTreeSet::new()
    } else {
        meta["nproc_dependent_cases"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    };

    // informational: print every report whose text differs
    let show_texts = std::env::var_os("KRES_CONFORMANCE_TEXTS").is_some();
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut skipped = 0;
    for (case, label) in &labels {
        if nproc_dependent.contains(case.as_str()) {
            skipped += 1;
            continue;
        }
        let got = ours(&dir.join(case));
        let (verdict_ok, paths_ok, outcome) = compare(label, &got, divergences.get(case).copied());
        let section = case
            .strip_prefix("cases/")
            .unwrap_or(case)
            .split('/')
            .next()
            .unwrap_or("")
            .to_owned();
        let text = match (&label.report, &got) {
            (Some(theirs), Verdict::Invalid(_, ours)) => Some(theirs == ours.trim_end()),
            _ => None,
        };
        if text == Some(false) && show_texts {
            if let (Some(theirs), Verdict::Invalid(_, ours)) = (&label.report, &got) {
                println!("{case}:\n--- upstream\n{theirs}\n--- ours\n{ours}\n");
            }
        }
        let t = tallies.entry(section).or_default();
        t.reports += usize::from(text.is_some());
        t.texts += usize::from(text == Some(true));
        t.cases += 1;
        t.verdicts += usize::from(verdict_ok);
        t.paths += usize::from(paths_ok);
        match &outcome {
            Outcome::Agree => {}
            Outcome::Divergent => t.divergent += 1,
            Outcome::Disagree(why) => {
                t.disagree += 1;
                failures.push(format!("{case}: {why}"));
            }
        }
    }

    let mut total = Tally::default();
    println!(
        "{:<14} {:>6} {:>9} {:>7} {:>10} {:>9} {:>9}",
        "section", "cases", "verdicts", "paths", "divergent", "DISAGREE", "texts"
    );
    for (section, t) in &tallies {
        println!(
            "{section:<14} {:>6} {:>9} {:>7} {:>10} {:>9} {:>9}",
            t.cases,
            t.verdicts,
            t.paths,
            t.divergent,
            t.disagree,
            format!("{}/{}", t.texts, t.reports)
        );
        total.cases += t.cases;
        total.verdicts += t.verdicts;
        total.paths += t.paths;
        total.divergent += t.divergent;
        total.disagree += t.disagree;
        total.reports += t.reports;
        total.texts += t.texts;
    }
    println!(
        "{:<14} {:>6} {:>9} {:>7} {:>10} {:>9} {:>9}",
        "total",
        total.cases,
        total.verdicts,
        total.paths,
        total.divergent,
        total.disagree,
        format!("{}/{}", total.texts, total.reports)
    );
    println!("(texts: identical validation reports, paths as JSON pointers; informational)");
    if skipped > 0 {
        println!("skipped {skipped} cases whose verdict depends on the CPU count ({cpus} here)");
    }
    assert!(
        failures.is_empty(),
        "{} disagreement(s) with upstream:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn corpus_agrees_with_upstream() {
    let dir = match std::env::var_os("KRES_CONFORMANCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/conformance"),
    };
    let divergences = read_divergences(&dir);
    run(&dir, &divergences);
}

#[test]
fn upstream_paths_become_json_pointers() {
    for (upstream, pointer) in [
        ("", ""),
        ("/", "/"),
        ("/cache/size-max", "/cache/size-max"),
        ("/views[0]/subnets[0]", "/views/0/subnets/0"),
        ("/network/listen[0]", "/network/listen/0"),
        (
            "/local-data/addresses[example.com]",
            "/local-data/addresses/example.com",
        ),
        (
            "/local-data/addresses[a/b~c]",
            "/local-data/addresses/a~1b~0c",
        ),
    ] {
        assert_eq!(upstream_pointer(upstream), pointer, "{upstream}");
    }
}
