//! The files a distribution installs beside the binaries, generated from the clap definitions
//! the binaries themselves parse (`kres_daemon::daemon::cli::Args`,
//! `kresctl::Cli`), so a manual page or a completion cannot drift from the real
//! options:
//! - `knot-resolver.8` and `kresctl.8` (section 8), rendered by `clap_mangen`; kresctl's page
//!   describes every command, nested ones included, under COMMANDS (one page, as upstream's);
//! - kresctl's bash, zsh and fish completions: exactly what `kresctl completion SHELL` prints.
//!
//! The prose around the generated parts (what the daemon is, its signals and files) is
//! written here once; options and commands are never described here.

#![forbid(unsafe_code)]

use std::io::{self, Write};

use clap::{Command, CommandFactory};
use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Inline, Roff};
use clap_mangen::Man;

/// The manual section both programs belong to (system administration).
const SECTION: &str = "8";

/// The manual named in every page's title line.
const MANUAL: &str = "Knot Resolver";

/// A generated file: where it goes below the output directory, and its contents.
pub struct Asset {
    /// The path below the output directory; `dist/debian/build-deb.sh` installs it from there.
    pub path: &'static str,
    pub contents: Vec<u8>,
}

/// Every generated file; `date` (`YYYY-MM-DD`) goes on the pages' title lines.
pub fn assets(date: &str) -> io::Result<Vec<Asset>> {
    Ok(vec![
        Asset {
            path: "man/knot-resolver.8",
            contents: daemon_page(date)?,
        },
        Asset {
            path: "man/kresctl.8",
            contents: kresctl_page(date)?,
        },
        Asset {
            path: "completions/kresctl.bash",
            contents: kresctl::completion_script(Shell::Bash),
        },
        Asset {
            path: "completions/_kresctl",
            contents: kresctl::completion_script(Shell::Zsh),
        },
        Asset {
            path: "completions/kresctl.fish",
            contents: kresctl::completion_script(Shell::Fish),
        },
    ])
}

/// The daemon's command line, as the pages see it.
pub fn daemon_command() -> Command {
    let mut cmd = kres_daemon::daemon::cli::Args::command();
    cmd.build();
    cmd
}

/// kresctl's command line, as the pages see it: clap's own `help` subcommand is left out
/// (`--help` stays, on every command).
pub fn kresctl_command() -> Command {
    let mut cmd = kresctl::Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// `knot-resolver(8)`.
pub fn daemon_page(date: &str) -> io::Result<Vec<u8>> {
    let man = man(daemon_command(), date);
    let mut page = Page::default();
    page.add(|w| man.render_title(w))?;
    page.add(|w| man.render_name_section(w))?;
    page.add(|w| man.render_synopsis_section(w))?;
    page.add(|w| man.render_description_section(w))?;
    page.add_roff(&prose(None, DAEMON_DESCRIPTION))?;
    page.add(|w| man.render_options_section(w))?;
    page.add_roff(&prose(Some("SIGNALS"), DAEMON_SIGNALS))?;
    page.add_roff(&prose(Some("FILES"), DAEMON_FILES))?;
    page.add_roff(&prose(Some("SEE ALSO"), DAEMON_SEE_ALSO))?;
    Ok(page.text.into_bytes())
}

/// `kresctl(8)`: the global options, then every command with its own synopsis and options.
pub fn kresctl_page(date: &str) -> io::Result<Vec<u8>> {
    let cmd = kresctl_command();
    let man = man(cmd.clone(), date);
    let mut page = Page::default();
    page.add(|w| man.render_title(w))?;
    page.add(|w| man.render_name_section(w))?;
    page.add(|w| man.render_synopsis_section(w))?;
    page.add(|w| man.render_description_section(w))?;
    page.add_roff(&prose(None, KRESCTL_DESCRIPTION))?;
    page.add(|w| man.render_options_section(w))?;
    let mut commands = Roff::new();
    commands.control("SH", ["COMMANDS"]);
    page.add_roff(&commands)?;
    for (path, sub) in commands_below(&cmd) {
        command_part(&mut page, &path, sub)?;
    }
    if let Some(after) = cmd.get_after_long_help() {
        let after = after.to_string();
        let heading = format!("\n\n{}\n", kresctl::cli::ENVIRONMENT_HEADING);
        let (exit_codes, environment) = after.split_once(&heading).unwrap_or((&after, ""));
        page.add_roff(&preformatted("EXIT STATUS", exit_codes))?;
        if !environment.is_empty() {
            page.add_roff(&preformatted("ENVIRONMENT", environment))?;
        }
    }
    page.add_roff(&prose(Some("SEE ALSO"), KRESCTL_SEE_ALSO))?;
    Ok(page.text.into_bytes())
}

/// The UTC date (`YYYY-MM-DD`) of a Unix time, for the pages' title lines (the proleptic
/// Gregorian calendar from a day count, as in Howard Hinnant's `civil_from_days`).
pub fn date_of(epoch_seconds: u64) -> String {
    let days = epoch_seconds / 86_400 + 719_468;
    let era = days / 146_097;
    let day_of_era = days % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// A page assembled from clap_mangen's sections and ours. Each piece `roff` renders starts
/// with the same preamble (the string apostrophes are written as): the page keeps the first.
#[derive(Default)]
struct Page {
    text: String,
}

impl Page {
    /// A piece rendered by clap_mangen (a section, with its `.SH` line).
    fn add(&mut self, render: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
        let piece = self.rendered(render)?;
        self.text.push_str(&piece);
        Ok(())
    }

    /// A piece of ours.
    fn add_roff(&mut self, roff: &Roff) -> io::Result<()> {
        self.add(|w| roff.to_writer(w))
    }

    /// A section clap_mangen rendered, without its `.SH` line, inside a subsection of ours
    /// (the command `path`'s). Options under help headings would render as further sections:
    /// refused, so a page never loses its structure silently.
    fn add_body(
        &mut self,
        render: impl FnOnce(&mut dyn Write) -> io::Result<()>,
        path: &str,
    ) -> io::Result<()> {
        let piece = self.rendered(render)?;
        let mut lines = piece.lines().peekable();
        if lines.peek().is_some_and(|l| l.starts_with(".SH ")) {
            lines.next();
        }
        for line in lines {
            if line.starts_with(".SH ") {
                return Err(io::Error::other(format!(
                    "`{path}` has options under a help heading ({line}); kresctl's page has \
                     no place for them"
                )));
            }
            self.text.push_str(line);
            self.text.push('\n');
        }
        Ok(())
    }

    /// A piece as text, without the preamble unless it is the page's first.
    fn rendered(
        &self,
        render: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<String> {
        let mut out = Vec::new();
        render(&mut out)?;
        let piece = String::from_utf8(out).map_err(io::Error::other)?;
        if self.text.is_empty() {
            return Ok(piece);
        }
        let preamble = Roff::new().render();
        Ok(piece
            .strip_prefix(preamble.as_str())
            .map(str::to_owned)
            .unwrap_or(piece))
    }
}

/// A page's renderer with the title line every page of ours shares.
fn man(cmd: Command, date: &str) -> Man {
    let source = format!(
        "{} {}",
        cmd.get_name(),
        cmd.get_version().unwrap_or_default()
    );
    Man::new(cmd)
        .section(SECTION)
        .date(date)
        .source(source)
        .manual(MANUAL)
}

/// The visible commands below `cmd`, depth first, each with its full name (`kresctl config
/// get`).
fn commands_below(cmd: &Command) -> Vec<(String, &Command)> {
    let mut out = Vec::new();
    let mut stack: Vec<(String, &Command)> = visible_subcommands(cmd, cmd.get_name());
    stack.reverse();
    while let Some((path, sub)) = stack.pop() {
        let mut children = visible_subcommands(sub, &path);
        children.reverse();
        stack.extend(children);
        out.push((path, sub));
    }
    out
}

fn visible_subcommands<'a>(cmd: &'a Command, path: &str) -> Vec<(String, &'a Command)> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| (format!("{path} {}", s.get_name()), s))
        .collect()
}

/// One command under COMMANDS: a subsection named by its full name, what it does, its
/// synopsis and its options and arguments (clap_mangen's sections without their headings).
fn command_part(page: &mut Page, path: &str, cmd: &Command) -> io::Result<()> {
    let mut roff = Roff::new();
    roff.control("SS", [path]);
    if let Some(about) = cmd.get_long_about().or_else(|| cmd.get_about()) {
        paragraphs(&mut roff, &about.to_string());
    }
    roff.control("PP", []);
    page.add_roff(&roff)?;
    // Rendered under its full name, without the help subcommand clap would add to a command
    // built on its own.
    let man = Man::new(cmd.clone().bin_name(path).disable_help_subcommand(true));
    page.add_body(|w| man.render_synopsis_section(w), path)?;
    page.add_body(|w| man.render_options_section(w), path)?;
    Ok(())
}

/// A part of kresctl's `after_long_help` (the exit codes, the environment), as preformatted
/// lines under a section of its own.
fn preformatted(section: &str, text: &str) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", [section]);
    roff.control("nf", []);
    for line in text.lines() {
        roff.text([roman(line)]);
    }
    roff.control("fi", []);
    roff
}

/// Paragraphs of prose under a new section, or continuing the last one.
fn prose(title: Option<&str>, text: &[Paragraph]) -> Roff {
    let mut roff = Roff::new();
    if let Some(title) = title {
        roff.control("SH", [title]);
    }
    for (i, paragraph) in text.iter().enumerate() {
        if i > 0 || title.is_none() {
            roff.control("PP", []);
        }
        roff.text(paragraph.iter().copied().map(inline).collect::<Vec<_>>());
    }
    roff
}

fn paragraphs(roff: &mut Roff, text: &str) {
    for line in text.lines() {
        if line.trim().is_empty() {
            roff.control("PP", []);
        } else {
            roff.text([roman(line)]);
        }
    }
}

/// The font of a piece of prose.
#[derive(Clone, Copy)]
enum Font {
    /// Roman: running text.
    R,
    /// Bold: what is typed literally (programs, options, signals).
    B,
    /// Italic: files, configuration sections, addresses.
    I,
}
use Font::{B, I, R};

/// A paragraph of prose: pieces in their fonts.
type Paragraph = &'static [(Font, &'static str)];

fn inline((font, text): (Font, &str)) -> Inline {
    match font {
        R => roman(text),
        B => bold(text),
        I => italic(text),
    }
}

const DAEMON_DESCRIPTION: &[Paragraph] = &[
    &[
        (B, "knot-resolver"),
        (
            R,
            " is the main process of Knot Resolver 6 and the root of its process tree: it \
            starts the ",
        ),
        (B, "kresd"),
        (R, " workers, the policy-loader and "),
        (B, "kres-cache-gc"),
        (
            R,
            ", restarts whichever dies, binds the listening sockets and passes them to the \
            workers, and serves the management API that ",
        ),
        (B, "kresctl"),
        (
            R,
            " talks to. The configuration is upstream's YAML (or JSON) format; a change \
            through the API or a reload is validated before any worker is touched.",
        ),
    ],
    &[
        (
            R,
            "Under systemd it notifies readiness, reloads and stopping, with a status line \
            saying how many workers are configured. Logging follows ",
        ),
        (B, "--loglevel"),
        (R, " and "),
        (B, "--logtarget"),
        (R, " until the configuration's "),
        (I, "logging"),
        (R, " section applies."),
    ],
];

const DAEMON_SIGNALS: &[Paragraph] = &[
    &[
        (B, "SIGHUP"),
        (R, " re-reads the configuration files, like "),
        (B, "kresctl reload"),
        (R, "."),
    ],
    &[
        (B, "SIGTERM"),
        (R, ", "),
        (B, "SIGINT"),
        (
            R,
            " stop every process of the resolver, then the daemon; a second one while \
            stopping kills them.",
        ),
    ],
];

const DAEMON_FILES: &[Paragraph] = &[
    &[
        (I, "/etc/knot-resolver/config.yaml"),
        (R, ": the configuration read when no "),
        (B, "--config"),
        (R, " is given."),
    ],
    &[
        (I, "/run/knot-resolver/kres-api.sock"),
        (
            R,
            ": the management API's socket unless the configuration's ",
        ),
        (I, "management"),
        (R, " section says otherwise."),
    ],
];

const DAEMON_SEE_ALSO: &[Paragraph] = &[&[
    (B, "kresctl"),
    (R, "(8), "),
    (B, "kresd"),
    (R, "(8), "),
    (B, "systemctl"),
    (R, "(1), "),
    (I, "https://www.knot-resolver.cz/documentation/latest/"),
]];

const KRESCTL_DESCRIPTION: &[Paragraph] = &[&[
    (B, "kresctl"),
    (
        R,
        " reads and changes the configuration of a running resolver, reloads or stops it and \
        shows its processes, metrics and cache through the management API of ",
    ),
    (B, "knot-resolver"),
    (R, "(8). "),
    (B, "validate"),
    (R, ", "),
    (B, "convert"),
    (R, ", "),
    (B, "migrate"),
    (R, ", "),
    (B, "schema"),
    (R, " (without "),
    (B, "--live"),
    (R, ") and "),
    (B, "completion"),
    (R, " work on files and need no running resolver."),
]];

const KRESCTL_SEE_ALSO: &[Paragraph] = &[&[
    (B, "knot-resolver"),
    (R, "(8), "),
    (B, "kresd"),
    (R, "(8), "),
    (I, "https://www.knot-resolver.cz/documentation/latest/"),
]];

#[cfg(test)]
mod tests;
