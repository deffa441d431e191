//! The formats a subscribed list may have, read one line at a time into [`Entry`]s: what a
//! line blocks (a name, or a name and everything under it), with no memory beyond the line.
//! Each format means its wildcards as its own tools do: an RPZ owner `*.name` covers the
//! names under `name`; `*.name` in a domains list likewise; adblock's `||name^` covers
//! `name` and the names under it; a hosts file names exact names only.
//!
//! A line is an entry, nothing (a comment, a blank, a header kept by the format), or
//! skipped: a rule the format has and kresd cannot carry out here (adblock's exceptions and
//! element rules, an RPZ IP trigger or a redirect), or a name that is no DNS name. Skipped
//! lines are counted, never silently lost.

use kres_config::{ActionOverride, ListFormat};

/// The longest line read; a longer one is skipped whole.
pub const MAX_LINE: usize = 4096;

/// What a list entry does to the names it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The name does not exist (RPZ `CNAME .`).
    Nxdomain,
    /// The name exists with no data (RPZ `CNAME *.`).
    Nodata,
    /// The name is allowed whatever other lists say (RPZ `CNAME rpz-passthru.`).
    Passthru,
}

impl Action {
    /// The action as `action-override` names it.
    pub fn of(given: ActionOverride) -> Action {
        match given {
            ActionOverride::Nxdomain => Action::Nxdomain,
            ActionOverride::Nodata => Action::Nodata,
            ActionOverride::Passthru => Action::Passthru,
        }
    }

    /// The RPZ target that says it.
    pub fn target(self) -> &'static str {
        match self {
            Action::Nxdomain => ".",
            Action::Nodata => "*.",
            Action::Passthru => "rpz-passthru.",
        }
    }

    /// The action an RPZ target says (none: one kresd cannot carry out here).
    fn of_target(target: &str) -> Option<Action> {
        match target.to_ascii_lowercase().as_str() {
            "." => Some(Action::Nxdomain),
            "*." => Some(Action::Nodata),
            "rpz-passthru." => Some(Action::Passthru),
            _ => None,
        }
    }

    /// A short stable label.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Nxdomain => "nxdomain",
            Action::Nodata => "nodata",
            Action::Passthru => "passthru",
        }
    }
}

/// What one entry of a list matches and does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name, lower case, no final dot.
    pub name: String,
    /// Whether the names under `name` match (not `name` itself).
    pub wildcard: bool,
    /// What is done to them (before `action-override`).
    pub action: Action,
}

/// What a line of a list is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// Entries (adblock's `||name^` is two: the name and the names under it).
    Entries(Vec<Entry>),
    /// Nothing to do: a comment, a blank line, a header.
    Nothing,
    /// A rule or a name that cannot be used.
    Skipped,
}

/// A reader of one list's lines (an RPZ list remembers its `$ORIGIN`).
#[derive(Debug)]
pub struct Reader {
    /// The list's format.
    format: ListFormat,
    /// An RPZ list's origin (lower case, no final dot); none before a `$ORIGIN` or the SOA.
    origin: Option<String>,
    /// Inside the parentheses of a multi-line record (an RPZ list's SOA).
    in_parentheses: bool,
}

impl Reader {
    /// A reader of a list of `format`.
    pub fn new(format: ListFormat) -> Reader {
        Reader {
            format,
            origin: None,
            in_parentheses: false,
        }
    }

    /// What `line` (no line end) is.
    pub fn line(&mut self, line: &str) -> Line {
        match self.format {
            ListFormat::Hosts => hosts_line(line),
            ListFormat::Domains => domains_line(line),
            ListFormat::Adblock => adblock_line(line),
            ListFormat::Rpz => self.rpz_line(line),
        }
    }

    /// A line of an RPZ zone file: `owner [ttl] [class] CNAME target` with an owner under
    /// the origin; SOA and NS records, `$TTL`, comments are nothing.
    fn rpz_line(&mut self, line: &str) -> Line {
        let text = line.split(';').next().unwrap_or_default();
        if self.in_parentheses {
            if text.contains(')') {
                self.in_parentheses = false;
            }
            return Line::Nothing;
        }
        let tokens: Vec<&str> = text.split_whitespace().collect();
        let Some(first) = tokens.first() else {
            return Line::Nothing;
        };
        if first.eq_ignore_ascii_case("$ORIGIN") {
            return match tokens.get(1).and_then(|o| absolute_name(o)) {
                Some(origin) => {
                    self.origin = Some(origin);
                    Line::Nothing
                }
                None => Line::Skipped,
            };
        }
        if first.starts_with('$') {
            return Line::Nothing;
        }
        if text.starts_with(char::is_whitespace) {
            // an owner carried over from the previous record: only the SOA's NS use it here
            return self.after_owner(None, &tokens);
        }
        self.after_owner(Some(first), &tokens[1..])
    }

    /// The rest of an RPZ record whose owner is `owner` (none: the previous one's).
    fn after_owner(&mut self, owner: Option<&str>, rest: &[&str]) -> Line {
        let mut rest = rest
            .iter()
            .copied()
            .skip_while(|t| t.bytes().all(|b| b.is_ascii_digit()) || t.eq_ignore_ascii_case("IN"));
        let Some(kind) = rest.next() else {
            return Line::Skipped;
        };
        if kind.eq_ignore_ascii_case("SOA") {
            if let Some(owner) = owner.and_then(|o| self.absolute(o)) {
                self.origin.get_or_insert(owner);
            }
            let after: Vec<&str> = rest.collect();
            let opened = after.iter().any(|t| t.contains('('));
            let closed = after.iter().any(|t| t.contains(')'));
            self.in_parentheses = opened && !closed;
            return Line::Nothing;
        }
        if kind.eq_ignore_ascii_case("NS") {
            return Line::Nothing;
        }
        let (Some(owner), true) = (owner, kind.eq_ignore_ascii_case("CNAME")) else {
            return Line::Skipped;
        };
        let Some(action) = rest.next().and_then(Action::of_target) else {
            return Line::Skipped;
        };
        // A relative owner is the name itself (relative to the apex, whatever the apex);
        // an absolute one must be under the origin.
        let owner = owner.to_ascii_lowercase();
        let name = match owner.strip_suffix('.') {
            None if owner != "@" => owner.as_str(),
            None => return Line::Skipped,
            Some(absolute) => {
                let under = self.origin.as_deref().and_then(|origin| {
                    absolute
                        .strip_suffix(origin)
                        .and_then(|n| n.strip_suffix('.'))
                });
                match under {
                    Some(name) => name,
                    None => return Line::Skipped,
                }
            }
        };
        // IP and name-server triggers are not names
        if name.ends_with(".rpz-ip") || name.contains(".rpz-") {
            return Line::Skipped;
        }
        let (name, wildcard) = match name.strip_prefix("*.") {
            Some(under) => (under, true),
            None => (name, false),
        };
        match checked_name(name) {
            Some(name) => Line::Entries(vec![Entry {
                name,
                wildcard,
                action,
            }]),
            None => Line::Skipped,
        }
    }

    /// `owner` made absolute (lower case, no final dot) against the origin.
    fn absolute(&self, owner: &str) -> Option<String> {
        if owner == "@" {
            return self.origin.clone();
        }
        if owner.ends_with('.') {
            return absolute_name(owner);
        }
        let origin = self.origin.as_deref()?;
        Some(format!("{}.{origin}", owner.to_ascii_lowercase()))
    }
}

/// An absolute name in a zone file (`name.`), lower case without the final dot.
fn absolute_name(text: &str) -> Option<String> {
    let name = text.strip_suffix('.')?.to_ascii_lowercase();
    (!name.is_empty() && !name.contains('\\')).then_some(name)
}

/// The names [`checked_name`] takes, for the API's document (with [`MAX_NAME`]).
pub const NAME_PATTERN: &str = r"^[A-Za-z0-9_-]{1,63}(\.[A-Za-z0-9_-]{1,63})*\.?$";

/// The longest name [`checked_name`] takes, its final dot included.
pub const MAX_NAME: usize = 253;

/// `text` as a DNS name of letters, digits, `-` and `_` (lower case, no final dot), or none:
/// labels of 1-63 octets, at most [`MAX_NAME`] octets in all.
pub fn checked_name(text: &str) -> Option<String> {
    if text.len() > MAX_NAME {
        return None;
    }
    let text = text.strip_suffix('.').unwrap_or(text);
    if text.is_empty() {
        return None;
    }
    let fine = text.split('.').all(|label| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    fine.then(|| text.to_ascii_lowercase())
}

/// The names a hosts file gives for the local machine itself: never blocked.
const LOCAL_NAMES: &[&str] = &[
    "localhost",
    "localhost.localdomain",
    "local",
    "broadcasthost",
    "ip6-localhost",
    "ip6-loopback",
    "ip6-localnet",
    "ip6-mcastprefix",
    "ip6-allnodes",
    "ip6-allrouters",
    "ip6-allhosts",
    "0.0.0.0",
];

/// A line of a hosts file: an address, then names (exact), maybe a `#` comment.
fn hosts_line(line: &str) -> Line {
    let text = line.split('#').next().unwrap_or_default();
    let mut tokens = text.split_whitespace();
    let Some(address) = tokens.next() else {
        return Line::Nothing;
    };
    if address.parse::<std::net::IpAddr>().is_err() {
        return Line::Skipped;
    }
    let mut entries = Vec::new();
    let mut skipped = false;
    for token in tokens {
        if LOCAL_NAMES.contains(&token.to_ascii_lowercase().as_str()) {
            continue;
        }
        match checked_name(token) {
            Some(name) => entries.push(Entry {
                name,
                wildcard: false,
                action: Action::Nxdomain,
            }),
            None => skipped = true,
        }
    }
    match (entries.is_empty(), skipped) {
        (false, _) => Line::Entries(entries),
        (true, true) => Line::Skipped,
        (true, false) => Line::Nothing,
    }
}

/// A line of a domains list: a name (`*.name`: the names under it), maybe a `#` comment.
fn domains_line(line: &str) -> Line {
    let text = line.split('#').next().unwrap_or_default().trim();
    if text.is_empty() {
        return Line::Nothing;
    }
    let (name, wildcard) = match text.strip_prefix("*.") {
        Some(under) => (under, true),
        None => (text, false),
    };
    match checked_name(name) {
        Some(name) => Line::Entries(vec![Entry {
            name,
            wildcard,
            action: Action::Nxdomain,
        }]),
        None => Line::Skipped,
    }
}

/// A line of an adblock list: `||name^` (the name and the names under it); `!` comments and
/// `[...]` headers are nothing; every other rule is skipped.
fn adblock_line(line: &str) -> Line {
    let text = line.trim();
    if text.is_empty() || text.starts_with('!') || text.starts_with('[') {
        return Line::Nothing;
    }
    let Some(name) = text
        .strip_prefix("||")
        .and_then(|rest| rest.strip_suffix('^'))
    else {
        return Line::Skipped;
    };
    match checked_name(name) {
        Some(name) => Line::Entries(vec![
            Entry {
                name: name.clone(),
                wildcard: false,
                action: Action::Nxdomain,
            },
            Entry {
                name,
                wildcard: true,
                action: Action::Nxdomain,
            },
        ]),
        None => Line::Skipped,
    }
}

/// Whether the start of a body (`head`) is an HTML page (an error page served with 200),
/// not a list of any format.
pub fn looks_like_html(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(head);
    let text = text.trim_start_matches('\u{feff}').trim_start();
    let lower = text
        .get(..text.len().min(64))
        .unwrap_or_default()
        .to_ascii_lowercase();
    lower.starts_with("<!doctype html")
        || lower.starts_with("<html")
        || lower.starts_with("<head")
        || lower.starts_with("<?xml")
        || lower.starts_with("<body")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, wildcard: bool, action: Action) -> Entry {
        Entry {
            name: name.to_owned(),
            wildcard,
            action,
        }
    }

    /// Each line of `text` read as `format`, in order.
    fn read(format: ListFormat, text: &str) -> Vec<Line> {
        let mut reader = Reader::new(format);
        text.lines().map(|l| reader.line(l)).collect()
    }

    #[test]
    fn hosts_lines_block_their_exact_names_not_the_local_ones() {
        let lines = read(
            ListFormat::Hosts,
            "# a comment\n127.0.0.1 localhost\n0.0.0.0 Ads.Example tracker.example # two\n\nnot-an-address x.example\n0.0.0.0 bad..name\n",
        );
        assert_eq!(
            lines,
            [
                Line::Nothing,
                Line::Nothing,
                Line::Entries(vec![
                    entry("ads.example", false, Action::Nxdomain),
                    entry("tracker.example", false, Action::Nxdomain)
                ]),
                Line::Nothing,
                Line::Skipped,
                Line::Skipped,
            ]
        );
    }

    #[test]
    fn domains_lines_are_names_and_a_star_covers_what_is_under() {
        let lines = read(
            ListFormat::Domains,
            "ads.example\n*.track.example\n# c\nfoo bar\n",
        );
        assert_eq!(
            lines,
            [
                Line::Entries(vec![entry("ads.example", false, Action::Nxdomain)]),
                Line::Entries(vec![entry("track.example", true, Action::Nxdomain)]),
                Line::Nothing,
                Line::Skipped,
            ]
        );
    }

    #[test]
    fn adblock_takes_the_name_rules_and_skips_the_others() {
        let lines = read(
            ListFormat::Adblock,
            "[Adblock Plus 2.0]\n! title\n||ads.example^\n@@||good.example^\n##.banner\n||x.example^$third-party\n/ads/*\n",
        );
        assert_eq!(
            lines,
            [
                Line::Nothing,
                Line::Nothing,
                Line::Entries(vec![
                    entry("ads.example", false, Action::Nxdomain),
                    entry("ads.example", true, Action::Nxdomain)
                ]),
                Line::Skipped,
                Line::Skipped,
                Line::Skipped,
                Line::Skipped,
            ]
        );
    }

    #[test]
    fn rpz_records_under_the_origin_are_entries_with_their_actions() {
        let text = "$TTL 300\n\
            @ SOA localhost. root.localhost. (1 3600\n 600 86400 300 )\n\
            $ORIGIN feed.rpz.\n\
            \x20 NS localhost.\n\
            bad.example CNAME .\n\
            *.bad.example 300 IN CNAME .\n\
            quiet.example.feed.rpz. CNAME *.\n\
            ok.example CNAME rpz-passthru.\n\
            redirect.example CNAME walled.garden.\n\
            32.1.2.0.192.rpz-ip CNAME .\n\
            other.zone. CNAME .\n\
            a.example A 192.0.2.1\n";
        let lines = read(ListFormat::Rpz, text);
        assert_eq!(
            lines,
            [
                Line::Nothing,
                Line::Nothing,
                Line::Nothing,
                Line::Nothing,
                Line::Nothing,
                Line::Entries(vec![entry("bad.example", false, Action::Nxdomain)]),
                Line::Entries(vec![entry("bad.example", true, Action::Nxdomain)]),
                Line::Entries(vec![entry("quiet.example", false, Action::Nodata)]),
                Line::Entries(vec![entry("ok.example", false, Action::Passthru)]),
                Line::Skipped,
                Line::Skipped,
                Line::Skipped,
                Line::Skipped,
            ]
        );
    }

    #[test]
    fn an_rpz_list_with_no_origin_takes_relative_owners_as_names() {
        let lines = read(
            ListFormat::Rpz,
            "@ SOA localhost. root.localhost. 1 3600 600 86400 300\nbad.example CNAME .\nabs.example. CNAME .\n@ CNAME .\n",
        );
        assert_eq!(
            lines,
            [
                Line::Nothing,
                Line::Entries(vec![entry("bad.example", false, Action::Nxdomain)]),
                Line::Skipped,
                Line::Skipped,
            ],
            "an absolute owner is under no known origin; the apex is no entry"
        );
    }

    #[test]
    fn an_html_page_is_told_from_a_list() {
        assert!(looks_like_html(b"\n  <!DOCTYPE html><html>"));
        assert!(looks_like_html(b"<html><body>503</body></html>"));
        assert!(!looks_like_html(b"0.0.0.0 ads.example\n"));
        assert!(!looks_like_html(b"||ads.example^\n"));
    }
}
