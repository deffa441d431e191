//! The direct reader against the full one: whatever it reads, the full reader reads the same.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::super::cut::{wanted_sections_text, CutDeclined};
use super::super::parse_yaml;
use super::{read, BlockDeclined};

/// The full reader's value, `None` for its errors.
fn full(text: &str) -> Option<Value> {
    parse_yaml(text).ok()
}

/// Assert the direct reader agrees with the full one on `text`; returns whether it read it.
#[track_caller]
fn agrees(text: &str) -> bool {
    match read(text) {
        Ok(value) => {
            assert_eq!(Some(&value), full(text).as_ref(), "on {text:?}");
            true
        }
        Err(_) => false,
    }
}

#[test]
fn reads_the_usual_form_exactly() {
    let text = "\
# a comment
rundir: /run/knot-resolver
workers: 4   # trailing comment
network:
  listen:
    - interface: 127.0.0.1@5353
      kind: dns
    - interface: '::1@53'
  tls:
    padding: yes
local-data:
  addresses:
    a.example: 192.0.2.1
    b.example: ::1
  records: |
    x.example. 300 A 192.0.2.2
      deeper # kept

    y.example. 300 TXT \"t # u\"
  rules:
  - name: [skipped]
views: []
";
    assert!(
        !agrees(text),
        "flow collections are left to the full reader"
    );
    let text = text
        .replace("  - name: [skipped]\n", "  - name: n\n")
        .replace("views: []\n", "");
    assert!(agrees(&text));
    let value = read(&text).expect("read");
    assert_eq!(value["workers"], json!(4));
    assert_eq!(value["network"]["tls"]["padding"], json!(true));
    assert_eq!(value["network"]["listen"][1]["interface"], json!("::1@53"));
    assert_eq!(value["local-data"]["addresses"]["b.example"], json!("::1"));
    assert_eq!(
        value["local-data"]["records"],
        json!("x.example. 300 A 192.0.2.2\n  deeper # kept\n\ny.example. 300 TXT \"t # u\"\n")
    );
    assert_eq!(value["local-data"]["rules"], json!([{"name": "n"}]));
}

#[test]
fn gives_up_on_what_it_does_not_read_and_says_why() {
    use BlockDeclined::*;
    for (text, why) in [
        ("a: &x 1\nb: *x\n", Construct),
        ("a: !!str 1\n", Construct),
        ("a: {b: 1}\n", Construct),
        ("a: \"x\\ty\"\n", Construct),
        ("a: b\n  c\n", Construct),
        ("a: 'x\n  y'\n", Construct),
        ("a: >\n  folded\n", Construct),
        ("a: |2\n   x\n", Construct),
        ("a: |+\n  x\n\n", Construct),
        ("a: |\n\n  x\n", Construct),
        ("a: 1\na: 2\n", DuplicateKey),
        ("b:\n  - c: 1\n    c: 2\n", DuplicateKey),
        ("1: a\n", NonTextKey),
        ("yes: a\n", NonTextKey),
        ("---\na: 1\n", Construct),
        ("a:\tb\n", NotPrintableAscii),
        ("a: b\r\n", NotPrintableAscii),
        ("a: é\n", NotPrintableAscii),
        ("- a\n", Construct),
        (" a: 1\n", IndentedStart),
        ("a: b: c\n", Construct),
        ("a: b:\n", Construct),
        ("? a\n: b\n", Construct),
        ("a: |\n  x\n y\n", Construct),
        ("", Empty),
        ("# only a comment\n", Empty),
    ] {
        assert_eq!(read(text), Err(why), "on {text:?}");
    }
}

#[test]
fn a_deep_document_is_left_to_the_full_reader_without_deep_recursion() {
    // 1,000 levels of block mappings: the direct reader stops at its depth bound, the full
    // reader refuses the document at its own; neither recurses a level at a time (a small
    // stack is proof).
    let mut text = String::new();
    for level in 0..1000 {
        text.push_str(&" ".repeat(level));
        text.push_str("k:\n");
    }
    let outcome = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || (read(&text), full(&text)))
        .expect("thread")
        .join()
        .expect("no overflow");
    assert_eq!(outcome, (Err(BlockDeclined::TooDeep), None));
}

#[test]
fn the_projects_own_configurations_agree() {
    // the workspace's: this crate's folder is one of its own
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = crate_dir.parent().expect("the workspace");
    let mut files = Vec::new();
    let mut dirs = vec![root.join("tests/data"), root.join("dist")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)
            .expect("a test data folder")
            .flatten()
        {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                files.push(path);
            }
        }
    }
    let mut read_directly = 0;
    for file in &files {
        let bytes = std::fs::read(file).expect("a configuration");
        // (some test files are deliberately not text)
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        if agrees(&text) {
            read_directly += 1;
        }
    }
    // Most are in the plain block form; the rest exercise what it leaves alone.
    assert!(
        read_directly * 2 > files.len(),
        "{read_directly} of {} read directly",
        files.len()
    );
}

/// Pieces a scalar is made of, YAML 1.1's special spellings among them.
fn scalar_piece() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "a",
        "b.example",
        "yes",
        "No",
        "on",
        "~",
        "null",
        "",
        "1",
        "-1",
        "0x1F",
        "0o17",
        "017",
        "1_000",
        "1e3",
        "1.5",
        ".inf",
        "-.inf",
        ".nan",
        "2001-12-14",
        "12:30:45",
        "::1",
        "127.0.0.1@53",
        "a#b",
        "a #b",
        " # c",
        "x: y",
        "x:",
        ":x",
        "-x",
        "- x",
        "?x",
        "%x",
        "@x",
        "'q'",
        "\"d\"",
        "'it''s'",
        "\"a\\n\"",
        "[1]",
        "{a: 1}",
        "a,b",
        "&a",
        "*a",
        "!t",
        "|",
        ">",
        "<<",
        "=",
        "  ",
        "Y",
        "true",
        "NaN",
        "+1",
        "0b101",
        "1:20",
        "1__0",
    ])
    .prop_map(str::to_owned)
}

fn scalar_text() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => "[a-z0-9][a-z0-9 .@:/-]{0,8}",
        1 => prop::collection::vec(scalar_piece(), 1..3).prop_map(|p| p.concat()),
    ]
}

/// A key: usually a plain one of the common characters.
fn key_text() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => "[a-z_][a-z0-9._/+-]{0,6}",
        1 => scalar_text(),
    ]
}

#[derive(Debug, Clone)]
enum Node {
    Scalar(String),
    Literal { lines: Vec<String>, strip: bool },
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
}

fn node() -> impl Strategy<Value = Node> {
    let leaf = prop_oneof![
        4 => scalar_text().prop_map(Node::Scalar),
        1 => (
            prop::collection::vec(
                prop::sample::select(vec!["x y", "  deeper", "", "# c", "a: b", "- z", "'q"]),
                0..4
            ),
            any::<bool>()
        )
            .prop_map(|(lines, strip)| Node::Literal {
                lines: lines.into_iter().map(str::to_owned).collect(),
                strip
            }),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec((key_text(), inner.clone()), 0..4).prop_map(Node::Map),
            prop::collection::vec(inner, 0..4).prop_map(Node::Seq),
        ]
    })
}

/// How a tree is written out.
#[derive(Debug, Clone, Copy)]
struct Style {
    step: usize,
    indentless: bool,
    comments: bool,
}

fn write(node: &Node, indent: usize, style: Style, out: &mut String) {
    let pad = " ".repeat(indent);
    match node {
        Node::Map(entries) => {
            for (key, value) in entries {
                out.push_str(&format!("{pad}{key}:"));
                write_value(value, indent, style, out);
            }
        }
        Node::Seq(items) => {
            for item in items {
                out.push_str(&format!("{pad}-"));
                match item {
                    Node::Map(entries) if !entries.is_empty() => {
                        out.push(' ');
                        let mut first = String::new();
                        write(item, indent + 2, style, &mut first);
                        out.push_str(first.trim_start_matches(' '));
                    }
                    other => write_value(other, indent, style, out),
                }
            }
        }
        other => {
            out.push_str(&pad);
            write_value(other, indent, style, out);
        }
    }
}

fn write_value(node: &Node, indent: usize, style: Style, out: &mut String) {
    match node {
        Node::Scalar(text) => {
            out.push_str(&format!(" {text}"));
            if style.comments {
                out.push_str(" # note");
            }
            out.push('\n');
        }
        Node::Literal { lines, strip } => {
            out.push_str(if *strip { " |-\n" } else { " |\n" });
            let pad = " ".repeat(indent + style.step);
            for line in lines {
                if line.is_empty() {
                    out.push('\n');
                } else {
                    out.push_str(&format!("{pad}{line}\n"));
                }
            }
        }
        Node::Seq(_) if style.indentless => {
            out.push('\n');
            if style.comments {
                out.push_str("# between\n\n");
            }
            write(node, indent, style, out);
        }
        Node::Map(_) | Node::Seq(_) => {
            out.push('\n');
            write(node, indent + style.step, style, out);
        }
    }
}

/// A generated document: a tree written out in a style, and a damaged copy of it.
fn documents() -> impl Strategy<Value = (String, String)> {
    (
        prop::collection::vec((key_text(), node()), 1..5),
        1usize..4,
        any::<bool>(),
        any::<bool>(),
        any::<prop::sample::Index>(),
        prop::sample::select(vec!["", " ", "\n", "#", ":", "- ", "  ", "'", "|"]),
    )
        .prop_map(|(entries, step, indentless, comments, cut, insert)| {
            let mut text = String::new();
            let style = Style {
                step,
                indentless,
                comments,
            };
            write(&Node::Map(entries), 0, style, &mut text);
            let mut at = cut.index(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let mut damaged = text.clone();
            damaged.insert_str(at, insert);
            (text, damaged)
        })
}

/// Run `check` on 4,000 generated documents and their damaged copies (one fixed sequence);
/// it says whether it got to compare. The generator must reach what is tested in at least
/// `1/share` of the 8,000 documents, not only what it leaves alone. `what` names the
/// comparison.
fn on_generated_documents(what: &str, share: u32, check: impl Fn(&str) -> bool) {
    use proptest::test_runner::{Config, TestRng, TestRunner};
    let cases = 4000;
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    // One fixed sequence of documents: the test fails on a disagreement, never by chance.
    let rng = TestRng::deterministic_rng(config.rng_algorithm);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let compared = std::cell::Cell::new(0u32);
    runner
        .run(&documents(), |(text, damaged)| {
            let n = u32::from(check(&text)) + u32::from(check(&damaged));
            compared.set(compared.get() + n);
            Ok(())
        })
        .expect(what);
    assert!(
        compared.get() >= 2 * cases / share,
        "{what}: only {} of {} documents compared",
        compared.get(),
        cases * 2
    );
}

#[test]
fn whatever_it_reads_the_full_reader_reads_the_same() {
    on_generated_documents("the readers agree", 8, agrees);
}

#[test]
fn sections_not_wanted_are_read_for_their_form_only() {
    let text = "\
rundir: /run/x
local-data:
  addresses:
    a.example: 192.0.2.1
    a.example: 192.0.2.1
    yes: no
  records: |
    x.example. A 192.0.2.2
logging:
  level: debug
";
    let wanted = ["rundir", "logging", "management"];
    assert_eq!(
        super::read_sections(text, Some(&wanted)),
        Ok(json!({"rundir": "/run/x", "logging": {"level": "debug"}}))
    );
    // a wanted section is read as always: its duplicate leaves the document to the full reader
    let twice = format!("{text}rundir: /run/y\n");
    assert_eq!(
        super::read_sections(&twice, Some(&wanted)),
        Err(BlockDeclined::DuplicateKey)
    );
    // and a section not wanted must still be in the form
    let flow = text.replace("192.0.2.1\n    yes", "[192.0.2.1]\n    yes");
    assert_eq!(
        super::read_sections(&flow, Some(&wanted)),
        Err(BlockDeclined::Construct)
    );
}

/// The wanted sections as cut out and read on their own, when they are (`None`: the document
/// is to be read instead).
fn cut_and_read(text: &str, wanted: &[&str]) -> Option<Value> {
    let part = wanted_sections_text(text, wanted).ok()?;
    match parse_yaml(&part).ok()? {
        Value::Object(mut m) => {
            m.retain(|k, _| wanted.contains(&k.as_str()));
            Some(Value::Object(m))
        }
        Value::Null => Some(json!({})),
        _ => None,
    }
}

/// The full reader's value of `text` with only the `wanted` top-level keys.
fn full_sections(text: &str, wanted: &[&str]) -> Option<Value> {
    match full(text)? {
        Value::Object(mut m) => {
            m.retain(|k, _| wanted.contains(&k.as_str()));
            Some(Value::Object(m))
        }
        _ => None,
    }
}

#[test]
fn wanted_sections_are_cut_out_by_the_margin() {
    let text = "\
# a comment
rundir: /run/x
local-data:
  addresses:
    a.example: 192.0.2.1
    a.example: 192.0.2.1
  records: |
    x.example. A 192.0.2.2
management:
- not: a mapping
logging:
  level: debug
";
    let wanted = ["rundir", "logging", "management"];
    // the duplicate key passed over is the whole document's error, not the cut's
    assert_eq!(full(text), None);
    assert_eq!(
        cut_and_read(text, &wanted),
        Some(
            json!({"rundir": "/run/x", "management": [{"not": "a mapping"}], "logging": {"level": "debug"}})
        )
    );
    assert_eq!(
        wanted_sections_text("# only\n\n", &wanted).as_deref(),
        Ok("")
    );
}

#[test]
fn the_margin_is_not_trusted_where_a_section_passed_over_could_cross_it() {
    let wanted = ["rundir", "logging", "management"];
    use CutDeclined::*;
    let refused = [
        // one quoted scalar over the margin: there is no rundir
        ("a: \"x\nrundir: y\"\n", FlowPassedOver),
        ("a:\n  b: 'x\nrundir: y'\n", FlowPassedOver),
        // a flow collection over the margin
        ("a: [x,\nrundir: y]\n", FlowPassedOver),
        ("a: {x: 1,\nrundir: y}\n", FlowPassedOver),
        // an alias whose anchor may lie in a section passed over
        ("a: &r /run/x\nrundir: *r\n", Alias),
        (
            "logging: &l\n  level: info\na: &l\n  level: debug\nmanagement: *l\n",
            Alias,
        ),
        // a wanted key twice
        ("rundir: /a\nrundir: /b\n", WantedTwice),
        // lines at the margin that start no plain section
        ("---\nrundir: /a\n", MarginLine),
        ("%YAML 1.1\n---\nrundir: /a\n", MarginLine),
        ("\"rundir\": /a\n", MarginLine),
        ("? rundir\n: /a\n", MarginLine),
        ("rundir:/a\n", MarginLine),
        ("<<: {rundir: /a}\n", MarginLine),
        ("  rundir: /a\n", MarginLine),
        ("- rundir: /a\n", MarginLine),
        ("{\"rundir\": \"/a\"}\n", MarginLine),
        ("yes: 1\nrundir: /a\n", KeyNotItself),
        ("rundir: /a\r\nlogging: {}\r\n", CarriageReturn),
        ("rundir: /a\n\tb: 1\n", MarginLine),
        ("rundir: /a\nb: \u{2028}logging: x\n", NotAscii),
        // a quoted scalar or flow collection opened in a wanted section, closed past a
        // section passed over
        ("rundir: \"x\nfoo: 1\nlogging: y\"\n", FlowLeftOpen),
        ("logging: 'x\nfoo: 1\nmanagement: y'\n", FlowLeftOpen),
        ("logging: [x,\nfoo: 1\nrundir: y]\n", FlowLeftOpen),
    ];
    for (text, why) in refused {
        assert_eq!(wanted_sections_text(text, &wanted), Err(why), "on {text:?}");
    }
    // quotes and brackets in a wanted section are read with it
    let text = "rundir: '/run/x'\nlogging:\n  groups: [manager]\nb: 1\n";
    assert_eq!(cut_and_read(text, &wanted), full_sections(text, &wanted));
}

#[test]
fn wanted_sections_cut_out_read_as_the_whole_document_reads_them() {
    // (the cut declines every document with a quote or bracket in a section it passes over:
    // about one in eight is cut)
    on_generated_documents("the cut agrees with the whole", 10, |text| {
        // every other key of the document is wanted
        let keys: Vec<String> = match full(text) {
            Some(Value::Object(m)) => m.keys().step_by(2).cloned().collect(),
            _ => return false,
        };
        let wanted: Vec<&str> = keys.iter().map(String::as_str).collect();
        match cut_and_read(text, &wanted) {
            Some(value) => {
                assert_eq!(Some(value), full_sections(text, &wanted), "on {text:?}");
                true
            }
            None => false,
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(8),
        ..ProptestConfig::default()
    })]

    #[test]
    fn printable_ascii_eight_bytes_a_step_is_the_byte_rule(
        text in prop::collection::vec(
            prop_oneof![4 => 0x20u8..0x7f, 1 => Just(b'\n'), 1 => any::<u8>()],
            0..40,
        )
    ) {
        let rule = text.iter().all(|&b| (0x20..0x7f).contains(&b) || b == b'\n');
        prop_assert_eq!(super::printable_ascii(&text), rule);
    }
}

#[test]
fn printable_ascii_sees_every_byte_at_every_place_of_a_word() {
    for b in 0..=255u8 {
        for at in 0..17 {
            let mut text = vec![b'a'; 17];
            text[at] = b;
            let rule = (0x20..0x7f).contains(&b) || b == b'\n';
            assert_eq!(super::printable_ascii(&text), rule, "byte {b:#x} at {at}");
        }
    }
}

#[test]
fn a_document_of_many_sections_is_cut_in_one_pass() {
    // 200,000 top-level keys, the wanted ones among them: every key is looked at once
    let mut text: String = (0..200_000).map(|i| format!("k{i}: {i}\n")).collect();
    text.push_str("rundir: /run/x\n");
    text.push_str("logging:\n  level: info\n");
    let wanted = ["rundir", "logging", "management"];
    assert_eq!(
        cut_and_read(&text, &wanted),
        Some(json!({"rundir": "/run/x", "logging": {"level": "info"}}))
    );
    // and a wanted key given twice among them still leaves the document to the reader
    text.push_str("rundir: /run/y\n");
    assert_eq!(
        wanted_sections_text(&text, &wanted),
        Err(CutDeclined::WantedTwice)
    );
}
