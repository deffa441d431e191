//! The command lines a directing child may have the supervisor run, described exactly: the
//! program, then its arguments as a sequence of parts (fixed flags, a file inside a
//! directory, a path, a number, a descriptor), some optional, one group repeated. A child taken over
//! by hostile input must not slip an argument past a rule by spelling it another way
//! (`-cFILE`, `--config=FILE`, one more positional argument): whatever is not one of the
//! shapes it is allowed is refused, so a rule on an argument holds however the program
//! itself would parse its command line.

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

/// The most digits of a [`Arg::Number`]: a `u64`.
const MAX_NUMBER_DIGITS: usize = 20;

/// The most digits of a [`Arg::Descriptor`]'s number: an `i32`.
const MAX_DESCRIPTOR_DIGITS: usize = 10;

/// One argument of a command line's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    /// This argument, byte for byte.
    Exactly(OsString),
    /// A file directly inside this directory: the directory's path and one plain name.
    FileIn(PathBuf),
    /// A path that never climbs (`..`), absolute or relative to the service's directory.
    Path,
    /// A decimal number (a `u64`): digits only, no sign.
    Number,
    /// A descriptor's number, bare or followed by one of these suffixes (`":tls"`).
    Descriptor(Vec<OsString>),
}

impl Arg {
    /// The argument `text`, byte for byte.
    pub fn exactly(text: impl Into<OsString>) -> Arg {
        Arg::Exactly(text.into())
    }

    /// Whether `given` is of this shape.
    fn accepts(&self, given: &OsStr) -> bool {
        match self {
            Arg::Exactly(expected) => given == expected,
            Arg::FileIn(dir) => {
                let path = Path::new(given);
                matches!(path.components().next_back(), Some(Component::Normal(_)))
                    && path.parent() == Some(dir.as_path())
            }
            Arg::Path => {
                !given.is_empty()
                    && !Path::new(given)
                        .components()
                        .any(|c| c == Component::ParentDir)
            }
            Arg::Number => digits(given.as_encoded_bytes(), MAX_NUMBER_DIGITS),
            Arg::Descriptor(suffixes) => {
                let bytes = given.as_encoded_bytes();
                let end = bytes
                    .iter()
                    .position(|b| !b.is_ascii_digit())
                    .unwrap_or(bytes.len());
                let (number, rest) = bytes.split_at(end);
                digits(number, MAX_DESCRIPTOR_DIGITS)
                    && (rest.is_empty() || suffixes.iter().any(|s| s.as_encoded_bytes() == rest))
            }
        }
    }
}

/// Whether `bytes` are 1 to `most` ASCII digits.
fn digits(bytes: &[u8], most: usize) -> bool {
    (1..=most).contains(&bytes.len()) && bytes.iter().all(u8::is_ascii_digit)
}

/// A part of a command line's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// An argument that must be there.
    One(Arg),
    /// An argument that may be there, once.
    Optional(Arg),
    /// A group of arguments that may come any number of times, whole groups one after another.
    Repeated(Vec<Arg>),
}

/// The shape of a whole command line, `argv[0]` included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    /// The parts, from `argv[0]` on.
    parts: Vec<Part>,
}

/// Where matching a command line stands: before part `part`, or inside it (a repeated
/// group) before its argument `inside`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    part: usize,
    inside: usize,
}

impl CommandLine {
    /// A command line running `program` with no arguments (yet).
    pub fn program(program: impl Into<PathBuf>) -> CommandLine {
        CommandLine {
            parts: vec![Part::One(Arg::Exactly(program.into().into_os_string()))],
        }
    }

    /// The same, followed by `arg`.
    pub fn then(mut self, arg: Arg) -> CommandLine {
        self.parts.push(Part::One(arg));
        self
    }

    /// The same, followed by the argument `flag`.
    pub fn flag(self, flag: &str) -> CommandLine {
        self.then(Arg::exactly(flag))
    }

    /// The same, followed by an argument of `arg`'s shape or none.
    pub fn maybe(mut self, arg: Arg) -> CommandLine {
        self.parts.push(Part::Optional(arg));
        self
    }

    /// The same, followed by any number of `group`s.
    pub fn repeated(mut self, group: Vec<Arg>) -> CommandLine {
        self.parts.push(Part::Repeated(group));
        self
    }

    /// Whether `argv` is of this shape, every argument of it. The positions a prefix can
    /// reach are followed all at once: time linear in the arguments, whatever their count.
    pub fn matches(&self, argv: &[OsString]) -> bool {
        let mut now = Vec::new();
        self.reach(&mut now, Position { part: 0, inside: 0 });
        for given in argv {
            let mut next = Vec::new();
            for at in &now {
                if let Some(after) = self.step(*at, given) {
                    self.reach(&mut next, after);
                }
            }
            if next.is_empty() {
                return false;
            }
            now = next;
        }
        now.contains(&Position {
            part: self.parts.len(),
            inside: 0,
        })
    }

    /// Add `at` to `positions`, and every position reached from it without an argument
    /// (past an optional argument or a repeated group not taken).
    fn reach(&self, positions: &mut Vec<Position>, at: Position) {
        if positions.contains(&at) {
            return;
        }
        positions.push(at);
        if at.inside == 0 {
            if let Some(Part::Optional(_) | Part::Repeated(_)) = self.parts.get(at.part) {
                self.reach(
                    positions,
                    Position {
                        part: at.part + 1,
                        inside: 0,
                    },
                );
            }
        }
    }

    /// Where `given` at `at` leads, if it is of the shape expected there.
    fn step(&self, at: Position, given: &OsStr) -> Option<Position> {
        let past = Position {
            part: at.part + 1,
            inside: 0,
        };
        match self.parts.get(at.part)? {
            Part::One(arg) | Part::Optional(arg) => arg.accepts(given).then_some(past),
            Part::Repeated(group) => {
                let arg = group.get(at.inside)?;
                if !arg.accepts(given) {
                    return None;
                }
                let inside = (at.inside + 1) % group.len();
                Some(Position {
                    part: at.part,
                    inside,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_command_line_matches_its_shape_and_nothing_else() {
        let worker = CommandLine::program("/usr/sbin/kresd")
            .flag("-c")
            .then(Arg::FileIn(PathBuf::from("/run/kr")))
            .flag("-n")
            .repeated(vec![
                Arg::exactly("-S"),
                Arg::Descriptor(vec![":tls".into()]),
            ]);
        let gc = CommandLine::program("/usr/sbin/kres-cache-gc")
            .flag("-c")
            .then(Arg::Path)
            .flag("-d")
            .then(Arg::Number)
            .maybe(Arg::exactly("-v"))
            .maybe(Arg::exactly("-n"));
        let rows: &[(&CommandLine, &[&str], bool)] = &[
            (
                &worker,
                &["/usr/sbin/kresd", "-c", "/run/kr/kresd0.conf", "-n"],
                true,
            ),
            (
                &worker,
                &[
                    "/usr/sbin/kresd",
                    "-c",
                    "/run/kr/kresd0.conf",
                    "-n",
                    "-S",
                    "3",
                    "-S",
                    "4:tls",
                ],
                true,
            ),
            (
                &worker,
                &["/usr/sbin/kresd", "-c", "/run/kr/kresd0.conf", "-n", "-S"],
                false,
            ),
            (
                &worker,
                &[
                    "/usr/sbin/kresd",
                    "-c",
                    "/run/kr/kresd0.conf",
                    "-n",
                    "-S",
                    "3:udp",
                ],
                false,
            ),
            (
                &worker,
                &[
                    "/usr/sbin/kresd",
                    "-c",
                    "/run/kr/kresd0.conf",
                    "-n",
                    "-S",
                    "-3",
                ],
                false,
            ),
            (
                &worker,
                &[
                    "/usr/sbin/kresd",
                    "-c",
                    "/run/kr/kresd0.conf",
                    "-n",
                    "-S",
                    "12345678901",
                ],
                false,
            ),
            (
                &worker,
                &["/usr/sbin/kresd", "-c", "/run/kr/kresd0.conf"],
                false,
            ),
            (
                &worker,
                &["/usr/sbin/kresd", "-c/tmp/evil.lua", "-n"],
                false,
            ),
            (
                &worker,
                &["/usr/sbin/kresd", "-c", "/run/kr/sub/kresd0.conf", "-n"],
                false,
            ),
            (
                &worker,
                &["/usr/sbin/kresd", "-c", "/run/kr/../kresd0.conf", "-n"],
                false,
            ),
            (&worker, &["/usr/sbin/kresd", "-c", "/run/kr", "-n"], false),
            (
                &worker,
                &["/usr/sbin/kresd", "-c", "/run/kr/..", "-n"],
                false,
            ),
            (
                &worker,
                &["/usr/sbin/kresd", "-c", "kresd0.conf", "-n"],
                false,
            ),
            (
                &worker,
                &["/usr/sbin/kresd", "-c", "/run/kr/kresd0.conf", "-n", "/tmp"],
                false,
            ),
            (
                &worker,
                &["/bin/sh", "-c", "/run/kr/kresd0.conf", "-n"],
                false,
            ),
            (&worker, &[], false),
            (
                &gc,
                &[
                    "/usr/sbin/kres-cache-gc",
                    "-c",
                    "/var/cache/kr",
                    "-d",
                    "1000",
                ],
                true,
            ),
            (
                &gc,
                &[
                    "/usr/sbin/kres-cache-gc",
                    "-c",
                    "/var/cache/kr",
                    "-d",
                    "1000",
                    "-v",
                    "-n",
                ],
                true,
            ),
            (
                &gc,
                &[
                    "/usr/sbin/kres-cache-gc",
                    "-c",
                    "/var/cache/kr",
                    "-d",
                    "1000",
                    "-n",
                ],
                true,
            ),
            (
                &gc,
                &[
                    "/usr/sbin/kres-cache-gc",
                    "-c",
                    "/var/cache/kr",
                    "-d",
                    "1000",
                    "-n",
                    "-v",
                ],
                false,
            ),
            (
                &gc,
                &[
                    "/usr/sbin/kres-cache-gc",
                    "-c",
                    "/var/cache/kr",
                    "-d",
                    "1000",
                    "-v",
                    "-v",
                ],
                false,
            ),
            (
                &gc,
                &["/usr/sbin/kres-cache-gc", "-c", "/var/cache/kr", "-d", "-1"],
                false,
            ),
            (
                &gc,
                &["/usr/sbin/kres-cache-gc", "-c", "/var/cache/kr", "-d", ""],
                false,
            ),
            (
                &gc,
                &[
                    "/usr/sbin/kres-cache-gc",
                    "-c",
                    "/var/cache/kr",
                    "-d",
                    "123456789012345678901",
                ],
                false,
            ),
            (
                &gc,
                &["/usr/sbin/kres-cache-gc", "-c", "./cache", "-d", "1"],
                true,
            ),
            (
                &gc,
                &["/usr/sbin/kres-cache-gc", "-c", "", "-d", "1"],
                false,
            ),
            (
                &gc,
                &["/usr/sbin/kres-cache-gc", "-c", "/var/../etc", "-d", "1"],
                false,
            ),
        ];
        for (shape, words, expected) in rows {
            assert_eq!(shape.matches(&argv(words)), *expected, "{words:?}");
        }
    }

    #[test]
    fn a_long_command_line_is_matched_in_one_pass() {
        let shape = CommandLine::program("/p").repeated(vec![Arg::exactly("-S"), Arg::Number]);
        let mut words = vec!["/p".to_owned()];
        for i in 0..100_000 {
            words.extend(["-S".to_owned(), i.to_string()]);
        }
        let long: Vec<OsString> = words.iter().map(OsString::from).collect();
        assert!(shape.matches(&long));
        let mut extra = long.clone();
        extra.push("-S".into());
        assert!(!shape.matches(&extra));
    }
}
