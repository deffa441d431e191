//! The pages against the clap definitions, walked here on their own (not through the
//! generator's walk): every visible command of kresctl has its part of the page, and every
//! visible option and argument of every command is named, with its help, in its own
//! command's part. An option or command added later is checked without touching this test.

use std::collections::BTreeMap;

use clap::{Arg, Command};

use super::*;

const DATE: &str = "2024-05-06";

/// The page's text with roff's escapes undone (those `roff` writes for dashes, backslashes,
/// apostrophes and leading dots), font changes kept.
fn plain(page: &[u8]) -> String {
    String::from_utf8(page.to_vec())
        .expect("a page is UTF-8")
        .replace(r"\*(Aq", "'")
        .replace(r"\-", "-")
        .replace(r"\&", "")
        .replace(r"\\", r"\")
}

/// The page cut at its `.SS` lines: the part before the first one under "" (the global
/// part), then each part under its subsection's title.
fn parts(page: &str) -> BTreeMap<String, String> {
    let mut parts = BTreeMap::new();
    let mut title = String::new();
    let mut part = String::new();
    for line in page.lines() {
        if let Some(rest) = line.strip_prefix(".SS ") {
            parts.insert(std::mem::take(&mut title), std::mem::take(&mut part));
            title = rest.trim_matches('"').to_owned();
        } else {
            part.push_str(line);
            part.push('\n');
        }
    }
    parts.insert(title, part);
    parts
}

/// Every visible command at and below `cmd`, with its full name.
fn walk(cmd: &Command, name: String, out: &mut Vec<(String, Command)>) {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        walk(sub, format!("{name} {}", sub.get_name()), out);
    }
    out.push((name, cmd.clone()));
}

/// What a page must say about `arg`: its flags or its value name, and its help.
fn expected_mentions(arg: &Arg) -> Vec<String> {
    let mut mentions = Vec::new();
    if let Some(long) = arg.get_long() {
        mentions.push(format!("--{long}"));
    }
    if let Some(short) = arg.get_short() {
        mentions.push(format!("-{short}"));
    }
    if arg.is_positional() {
        match arg.get_value_names() {
            Some(names) => mentions.extend(names.iter().map(|n| n.to_string())),
            None => mentions.push(arg.get_id().to_string()),
        }
    }
    if let Some(help) = arg.get_long_help().or_else(|| arg.get_help()) {
        mentions.extend(
            help.to_string()
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned),
        );
    }
    mentions
}

/// `part` (of the command `name`) names every visible argument of `cmd`.
fn check_arguments(name: &str, cmd: &Command, part: &str) {
    let mut checked = 0;
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        for mention in expected_mentions(arg) {
            assert!(
                part.contains(&mention),
                "`{name}`: {mention:?} ({}) is missing from its part of the page:\n{part}",
                arg.get_id()
            );
        }
        checked += 1;
    }
    // Every command has at least --help: an empty walk would prove nothing.
    assert!(checked > 0, "`{name}` has no visible argument");
}

#[test]
fn the_daemon_page_names_every_visible_option() {
    let page = plain(&daemon_page(DATE).expect("render"));
    let cmd = daemon_command();
    assert!(
        page.contains("\n.TH knot-resolver 8 2024-05-06 \"knot-resolver "),
        "{page}"
    );
    check_arguments("knot-resolver", &cmd, &page);
    for hidden in cmd.get_arguments().filter(|a| a.is_hide_set()) {
        let long = hidden.get_long().expect("hidden options are long");
        assert!(
            !page.contains(&format!("--{long}")),
            "hidden --{long} is in the page"
        );
    }
}

#[test]
fn the_kresctl_page_names_every_command_and_its_options_in_its_part() {
    let page = plain(&kresctl_page(DATE).expect("render"));
    assert!(
        page.contains("\n.TH kresctl 8 2024-05-06 \"kresctl "),
        "{page}"
    );
    let parts = parts(&page);
    let mut commands = Vec::new();
    walk(&kresctl_command(), "kresctl".to_owned(), &mut commands);
    assert!(
        commands.len() > 10,
        "{commands:?}",
        commands = commands.len()
    );
    for (name, cmd) in &commands {
        // The global options are on the page before the first command's part.
        let key = if name == "kresctl" { "" } else { name.as_str() };
        let part = parts
            .get(key)
            .unwrap_or_else(|| panic!("no part for `{name}` among {:?}", parts.keys()));
        if let Some(about) = cmd.get_about() {
            assert!(part.contains(&about.to_string()), "`{name}`: no about");
        }
        check_arguments(name, cmd, part);
    }
    // No part for anything that is not a command (such as clap's `help`).
    assert_eq!(parts.len(), commands.len(), "{:?}", parts.keys());
    let section = |title: &str| {
        let head = if title.contains(' ') {
            format!(".SH \"{title}\"")
        } else {
            format!(".SH {title}")
        };
        page.split(&head)
            .nth(1)
            .and_then(|rest| rest.split("\n.SH ").next())
            .unwrap_or_else(|| panic!("a {title} section"))
            .to_owned()
    };
    let help = kresctl_command()
        .get_after_long_help()
        .expect("exit codes")
        .to_string();
    let heading = format!("\n\n{}\n", kresctl::cli::ENVIRONMENT_HEADING);
    let (exit_codes, environment) = help.split_once(&heading).expect("an environment part");
    for (title, part) in [("EXIT STATUS", exit_codes), ("ENVIRONMENT", environment)] {
        let rendered = section(title);
        for line in part.lines() {
            assert!(rendered.contains(line), "{line:?} not under {title}");
        }
        assert!(part.lines().count() > 1, "{title}: {part}");
    }
}

#[test]
fn every_completion_script_knows_every_command() {
    let assets = assets(DATE).expect("render");
    let mut commands = Vec::new();
    walk(&kresctl_command(), "kresctl".to_owned(), &mut commands);
    // bash: the script asks kresctl, whose answer after a command's parent names it.
    let bash = assets
        .iter()
        .find(|a| a.path == "completions/kresctl.bash")
        .expect("the bash script");
    assert!(String::from_utf8_lossy(&bash.contents).contains("kresctl completion --bash --args"));
    let root = kresctl_command();
    for (name, _) in &commands {
        let mut typed: Vec<String> = name.split(' ').skip(1).map(str::to_owned).collect();
        let Some(last) = typed.pop() else {
            continue;
        };
        typed.push(String::new());
        let offered = kresctl::completion::words(&root, &typed);
        assert!(
            offered.contains(&last),
            "bash: `{name}` not offered: {offered:?}"
        );
    }
    for path in ["completions/_kresctl", "completions/kresctl.fish"] {
        let asset = assets.iter().find(|a| a.path == path).expect(path);
        let script = String::from_utf8_lossy(&asset.contents);
        for (name, _) in &commands {
            let last = name.rsplit(' ').next().expect("a name");
            assert!(script.contains(last), "{path} lacks `{name}`");
        }
    }
}

#[test]
fn dates_of_unix_times() {
    for (epoch, date) in [
        (0, "1970-01-01"),
        (951_782_400, "2000-02-29"),
        (951_868_799, "2000-02-29"),
        (1_714_953_600, "2024-05-06"),
        (4_107_542_400, "2100-03-01"),
    ] {
        assert_eq!(date_of(epoch), date, "{epoch}");
    }
}
