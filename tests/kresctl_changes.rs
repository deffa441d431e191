//! `kresctl config set|delete|patch` and `reload` on real kresd: values read whole from the
//! argument, a file or standard input, every kind (JSON, YAML, a zone text) set and read back
//! unchanged; replacing a section says what it removed; `--dry-run` changes nothing; every
//! change prints what the resolver did.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{Resolver, Setup};
use serde_json::{json, Value};

const RECORDS: &str =
    "x.test. 300 A 192.0.2.30\ny.test. 300 A 192.0.2.31\nz.test. 300 A 192.0.2.32\n";

/// What a kresctl run said: exit code, standard output, standard error.
struct Said {
    code: Option<i32>,
    out: String,
    err: String,
}

impl Said {
    fn ok(self) -> Said {
        assert_eq!(
            self.code,
            Some(0),
            "stdout: {}\nstderr: {}",
            self.out,
            self.err
        );
        self
    }
}

/// Run our kresctl against `r`, with `stdin` as its standard input (a pipe, not a terminal).
fn kresctl(r: &Resolver, args: &[&str], stdin: &str) -> Said {
    let mut child = Command::new(common::KRESCTL)
        .arg("-s")
        .arg(&r.api)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kresctl starts");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.as_bytes()).expect("write stdin");
    drop(input);
    let out = child.wait_with_output().expect("kresctl ends");
    Said {
        code: out.status.code(),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The running value at `pointer`, as JSON.
fn value_at(r: &Resolver, pointer: &str) -> Value {
    let said = kresctl(r, &["config", "get", "--json", "-p", pointer], "").ok();
    serde_json::from_str(&said.out).expect("JSON")
}

#[test]
fn standard_input_is_read_whole_and_every_kind_of_value_reads_back_unchanged() {
    let setup = Setup::new("kresctl-values")
        .workers(2)
        .extra("local-data:\n  ttl: 5m\n");
    let r = common::start(&setup).expect("start");

    // Three zone lines on standard input: all set, no prompt (it is not a terminal).
    let said = kresctl(&r, &["config", "set", "-p", "/local-data/records"], RECORDS).ok();
    assert!(!said.err.contains("Type"), "no prompt: {}", said.err);
    assert_eq!(
        said.out.trim(),
        "changed local-data; workers reset their rules",
        "what the resolver did"
    );
    assert_eq!(value_at(&r, "/local-data/records"), json!(RECORDS));
    for (name, ip) in [
        ("x.test.", "192.0.2.30"),
        ("y.test.", "192.0.2.31"),
        ("z.test.", "192.0.2.32"),
    ] {
        assert_eq!(r.a_records(name), vec![ip], "{name}");
    }

    // Each kind of value, set from the argument, a file and standard input, reads back as
    // set; what `config get` prints (YAML, JSON) set again reads back the same.
    let file = r.dir.host("value.txt");
    let listen = format!(r#"[{{"interface": "127.0.0.1@{}"}}]"#, r.port);
    let rows: Vec<(&str, &str, Value)> = vec![
        ("/workers", "3", json!(3)),
        ("/cache/size-max", "20M", json!("20M")),
        ("/logging/level", "\"info\"", json!("info")),
        (
            "/local-data/addresses",
            "a.test: 192.0.2.40\nb.test: 192.0.2.41\n",
            json!({"a.test": "192.0.2.40", "b.test": "192.0.2.41"}),
        ),
        (
            "/network/listen",
            &listen,
            json!([{"interface": format!("127.0.0.1@{}", r.port)}]),
        ),
        ("/local-data/records", RECORDS, json!(RECORDS)),
        (
            "/local-data/records",
            "x.test. 300 A 192.0.2.33\n",
            json!("x.test. 300 A 192.0.2.33"),
        ),
    ];
    for (pointer, text, want) in rows {
        kresctl(&r, &["config", "set", "-p", pointer, text], "").ok();
        assert_eq!(value_at(&r, pointer), want, "{pointer} from the argument");
        std::fs::write(&file, text).expect("write");
        let path = file.to_str().expect("UTF-8");
        kresctl(&r, &["config", "set", "-p", pointer, path], "").ok();
        assert_eq!(value_at(&r, pointer), want, "{pointer} from a file");
        kresctl(&r, &["config", "set", "-p", pointer], text).ok();
        assert_eq!(value_at(&r, pointer), want, "{pointer} from standard input");
        for format in ["--yaml", "--json"] {
            let printed = kresctl(&r, &["config", "get", format, "-p", pointer], "").ok();
            kresctl(&r, &["config", "set", "-p", pointer], &printed.out).ok();
            assert_eq!(
                value_at(&r, pointer),
                want,
                "{pointer} as `get {format}` printed it"
            );
        }
    }
    assert_eq!(r.a_records("x.test."), vec!["192.0.2.33"]);
    assert_eq!(r.a_records("b.test."), vec!["192.0.2.41"]);

    // Nothing to read is an error, and changes nothing.
    let said = kresctl(&r, &["config", "set", "-p", "/local-data/records"], "");
    assert_eq!(said.code, Some(1), "{}", said.err);
    assert!(said.err.contains("no value given"), "{}", said.err);
    assert_eq!(r.a_records("x.test."), vec!["192.0.2.33"]);
    r.stop();
}

#[test]
fn replacing_a_section_says_what_it_removed_and_a_dry_run_changes_nothing() {
    let setup = Setup::new("kresctl-replace").workers(2).extra(
        "local-data:\n  addresses:\n    a.test: 192.0.2.50\n  records: |\n    r.test. 300 A 192.0.2.51\n",
    );
    let r = common::start(&setup).expect("start");
    let pids = r.pids_named("kresd");
    let tag = r.etag();

    // Dry runs: what would be done, and nothing is.
    let said = kresctl(
        &r,
        &["config", "set", "--dry-run", "-p", "/workers", "3"],
        "",
    )
    .ok();
    assert!(
        said.out
            .starts_with("dry run, nothing changed: would have changed workers; workers"),
        "{}",
        said.out
    );
    let said = kresctl(
        &r,
        &["config", "delete", "--dry-run", "-p", "/local-data/records"],
        "",
    )
    .ok();
    assert_eq!(
        said.out.trim(),
        "dry run, nothing changed: would have changed local-data; workers reset their rules"
    );
    let said = kresctl(
        &r,
        &["config", "set", "--dry-run", "-p", "/local-data"],
        "addresses:\n  a.test: 192.0.2.52\n",
    )
    .ok();
    assert!(
        said.err.contains("would remove: /local-data/records"),
        "{}",
        said.err
    );
    let said = kresctl(
        &r,
        &["config", "set", "--dry-run", "-p", "/workers", "many"],
        "",
    );
    assert_eq!(said.code, Some(1));
    assert!(said.err.contains("/workers"), "{}", said.err);
    assert_eq!(
        (r.pids_named("kresd"), r.etag()),
        (pids.clone(), tag),
        "unchanged"
    );
    assert_eq!(r.a_records("r.test."), vec!["192.0.2.51"]);

    // Replacing the whole section for real: done, and what went is named.
    let said = kresctl(
        &r,
        &["config", "set", "-p", "/local-data"],
        "addresses:\n  a.test: 192.0.2.52\n",
    )
    .ok();
    assert_eq!(
        said.err.trim(),
        "replacing /local-data whole removed: /local-data/records"
    );
    assert_eq!(r.a_records("a.test."), vec!["192.0.2.52"]);
    assert!(r.a_records("r.test.").is_empty(), "the records are gone");
    // Adding a section that was not there removes nothing.
    let said = kresctl(
        &r,
        &["config", "set", "-p", "/dns64"],
        "{\"enable\": false}",
    )
    .ok();
    assert!(said.err.is_empty(), "{}", said.err);
    assert_eq!(pids.len(), 2);
    r.stop();
}

#[test]
fn config_patch_applies_operations_as_one_change_and_says_what_it_did() {
    let setup = Setup::new("kresctl-patch")
        .workers(2)
        .extra("local-data:\n  addresses:\n    p.test: 192.0.2.60\n");
    let r = common::start(&setup).expect("start");
    let ops = r#"[{"op": "replace", "path": "/local-data/addresses/p.test", "value": "192.0.2.61"},
                  {"op": "add", "path": "/local-data/addresses/q.test", "value": "192.0.2.62"}]"#;
    let pids = r.pids_named("kresd");
    let said = kresctl(&r, &["config", "patch", "--dry-run", ops], "").ok();
    assert_eq!(
        said.out.trim(),
        "dry run, nothing changed: would have changed local-data; workers reset their rules"
    );
    assert_eq!(r.a_records("p.test."), vec!["192.0.2.60"]);
    // From standard input, as YAML.
    let yaml = "- op: replace\n  path: /local-data/addresses/p.test\n  value: 192.0.2.61\n\
                - op: add\n  path: /local-data/addresses/q.test\n  value: 192.0.2.62\n";
    let said = kresctl(&r, &["config", "patch"], yaml).ok();
    assert_eq!(
        said.out.trim(),
        "changed local-data; workers reset their rules"
    );
    assert_eq!(r.a_records("p.test."), vec!["192.0.2.61"]);
    assert_eq!(r.a_records("q.test."), vec!["192.0.2.62"]);
    assert_eq!(r.pids_named("kresd"), pids, "no worker restarted");
    // A failed `test` refuses the whole patch; so does anything that is no list.
    let failing = r#"[{"op": "replace", "path": "/workers", "value": 3},
                      {"op": "test", "path": "/workers", "value": 2}]"#;
    let said = kresctl(&r, &["config", "patch", failing], "");
    assert_eq!(said.code, Some(1), "{}", said.out);
    let said = kresctl(&r, &["config", "patch", "{\"op\": \"remove\"}"], "");
    assert_eq!(said.code, Some(1));
    assert!(said.err.contains("list of operations"), "{}", said.err);
    assert_eq!(r.pids_named("kresd"), pids, "nothing applied");
    // A worker-affecting patch says which workers restarted.
    let said = kresctl(
        &r,
        &[
            "config",
            "patch",
            r#"[{"op": "replace", "path": "/workers", "value": 3}]"#,
        ],
        "",
    )
    .ok();
    assert_eq!(
        said.out.trim(),
        "changed workers; workers restarted kresd0,kresd1 started kresd2 on new shared memory \
         (defer)"
    );
    r.stop();
}

#[test]
fn a_reload_says_what_it_did_and_warns_of_the_api_changes_it_discards() {
    let setup = Setup::new("kresctl-reload")
        .workers(2)
        .extra("local-data:\n  addresses:\n    d.test: 192.0.2.70\n");
    let r = common::start(&setup).expect("start");
    // Nothing was changed through the API: no warning.
    let said = kresctl(&r, &["reload"], "").ok();
    assert_eq!(
        said.out.trim(),
        "no section changed; workers reset their rules"
    );
    assert!(said.err.is_empty(), "{}", said.err);

    kresctl(&r, &["config", "set", "-p", "/workers", "3"], "").ok();
    kresctl(
        &r,
        &[
            "config",
            "set",
            "-p",
            "/local-data/addresses/d.test",
            "192.0.2.71",
        ],
        "",
    )
    .ok();
    kresctl(&r, &["config", "set", "-p", "/local-data/ttl", "1m"], "").ok();
    // The file takes one of those changes as it is: it is not lost.
    let config = std::fs::read_to_string(&r.config).expect("read");
    std::fs::write(&r.config, config.replace("workers: 2", "workers: 3")).expect("write");
    let said = kresctl(&r, &["reload"], "").ok();
    assert_eq!(
        said.err.trim(),
        "warning: the reload discarded changes made through the API that the configuration \
         files do not have: /local-data/addresses/d.test, /local-data/ttl"
    );
    assert_eq!(
        said.out.trim(),
        "changed local-data; workers reset their rules"
    );
    assert_eq!(r.a_records("d.test."), vec!["192.0.2.70"]);
    assert_eq!(r.pids_named("kresd").len(), 3);
    r.launched
        .output
        .wait_for(
            "the reload discarded changes made through the API: /local-data/addresses/d.test",
            common::START_TIMEOUT,
        )
        .expect("logged for a reload by signal or by systemd too");
    // Reloaded again: nothing more to discard.
    let said = kresctl(&r, &["reload", "--force"], "").ok();
    assert!(said.err.is_empty(), "{}", said.err);
    assert_eq!(
        said.out.trim(),
        "no section changed; workers restarted kresd0,kresd1,kresd2"
    );
    r.stop();
}
