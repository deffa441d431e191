//! Completion as upstream's kresctl answers it: its bash script runs `kresctl completion
//! --bash --args WORD…` (the words typed after `kresctl`, the one being completed last) on
//! every TAB and offers the words printed, space-separated; `#filenames#` and `#dirnames#`
//! ask the shell for files and directories, `#nospace#` for no space after the word. The
//! words come from the clap definition (commands, options, possible values), and a JSON
//! pointer after `config … -p` from the configuration's schema (`/workers /cache …`, then
//! deeper), as upstream's do. Our bash script ([`BASH_SCRIPT`]) speaks the same protocol, so
//! either script works with either kresctl.

use serde_json::Value;

/// Ask the shell for file names.
const FILENAMES: &str = "#filenames#";
/// Ask the shell for directory names.
const DIRNAMES: &str = "#dirnames#";
/// Ask the shell not to add a space after the word (a pointer goes on).
const NOSPACE: &str = "#nospace#";

/// kresctl's bash completion: upstream's protocol, answered by kresctl itself.
pub const BASH_SCRIPT: &str = r##"# bash completion for kresctl: kresctl itself tells the words (`kresctl completion --bash
# --args WORD...`), from its command line and the configuration's schema.

_kresctl_completion()
{
    COMPREPLY=()
    local args=""
    local words=""
    local cur="${COMP_WORDS[COMP_CWORD]}"
    local opts
    opts=$(kresctl completion --bash --args "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)

    for opt in $opts
    do
    if [[ "$opt" == "#dirnames#" ]]; then
        args="$args${args:+ }-d"
    elif [[ "$opt" == "#filenames#" ]]; then
        args="$args${args:+ }-f"
    elif [[ "$opt" == "#nospace#" ]]; then
        compopt -o nospace
    else
        words="$words${words:+ }$opt"
    fi
    done

    COMPREPLY=($(compgen $args -W "${words}" -- "${cur}"))
    return 0
}

complete -o nosort -F _kresctl_completion kresctl
"##;

/// The words to offer after `args` (the words after `kresctl`; the last is the one being
/// completed, maybe empty), in the order upstream's kresctl gives them.
pub fn words(command: &clap::Command, args: &[String]) -> Vec<String> {
    let mut words = level_words(command);
    let mut skip_value = false;
    for (i, arg) in args.iter().enumerate() {
        if skip_value {
            skip_value = false;
            continue;
        }
        let last = i + 1 >= args.len();
        let Some(found) = find(command, arg) else {
            if last {
                return words;
            }
            // A positional argument's value (`trace NAME …`) where the level takes one; any
            // other word unknown here ends the completion.
            let takes_positional = command.get_subcommands().next().is_none()
                && command.get_arguments().any(clap::Arg::is_positional);
            if takes_positional && !arg.starts_with('-') {
                continue;
            }
            return Vec::new();
        };
        if last {
            break;
        }
        match found {
            Found::Subcommand(sub) => {
                let rest = &args[i + 1..];
                if sub.get_name() == "config" {
                    if let Some(pointer) = pointer_words(rest) {
                        return pointer;
                    }
                }
                return self::words(sub, rest);
            }
            Found::Option(option) => {
                words.retain(|w| !option_strings(option).any(|s| s == *w));
                if matches!(
                    option.get_action(),
                    clap::ArgAction::Help
                        | clap::ArgAction::HelpShort
                        | clap::ArgAction::HelpLong
                        | clap::ArgAction::Version
                ) {
                    return Vec::new();
                }
                if option.get_action().takes_values() {
                    if i + 2 >= args.len() {
                        words = value_words(option);
                    }
                    skip_value = true;
                }
            }
        }
    }
    words
}

/// What a word names at one level of the command line.
enum Found<'a> {
    Subcommand(&'a clap::Command),
    Option(&'a clap::Arg),
}

fn find<'a>(command: &'a clap::Command, word: &str) -> Option<Found<'a>> {
    if let Some(sub) = command
        .get_subcommands()
        .find(|s| s.get_name() == word || s.get_all_aliases().any(|a| a == word))
    {
        return Some(Found::Subcommand(sub));
    }
    command
        .get_arguments()
        .find(|a| option_strings(a).any(|s| s == word))
        .map(Found::Option)
}

/// `-x` and `--long` of an option (nothing for a positional argument).
fn option_strings(arg: &clap::Arg) -> impl Iterator<Item = String> + '_ {
    let short = arg.get_short().map(|c| format!("-{c}"));
    let long = arg.get_long().map(|l| format!("--{l}"));
    short.into_iter().chain(long)
}

/// Everything one level offers: its commands, its options, and files for a positional
/// argument without possible values (or those values).
fn level_words(command: &clap::Command) -> Vec<String> {
    let mut words: Vec<String> = command
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name().to_owned())
        .collect();
    for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
        if arg.is_positional() {
            for word in value_words(arg) {
                if !words.contains(&word) {
                    words.push(word);
                }
            }
        } else {
            words.extend(option_strings(arg));
        }
    }
    if !command.is_disable_help_flag_set() {
        words.extend(["-h".to_owned(), "--help".to_owned()]);
    }
    words
}

/// The values an argument takes: its possible values; nothing for a value that is not a
/// path (`ValueHint::Other`, `ValueHint::Hostname`: a domain name, a type, a number); else
/// file and directory names.
fn value_words(arg: &clap::Arg) -> Vec<String> {
    if matches!(
        arg.get_value_hint(),
        clap::ValueHint::Other | clap::ValueHint::Hostname
    ) {
        return Vec::new();
    }
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_owned())
        .collect();
    if possible.is_empty() {
        vec![DIRNAMES.to_owned(), FILENAMES.to_owned()]
    } else {
        possible
    }
}

/// After `config …`: when the word before the last is `-p`/`--path`, the JSON pointers the
/// last one can grow into, from the configuration's schema (upstream's walk: objects and
/// lists of objects are entered, an index is passed over in a list).
fn pointer_words(args: &[String]) -> Option<Vec<String>> {
    let [.., option, typed] = args else {
        return None;
    };
    if option != "-p" && option != "--path" {
        return None;
    }
    let schema = kres_config::json_schema();
    let mut words = vec![NOSPACE.to_owned()];
    let mut properties = schema.get("properties")?;
    let mut prefix = String::new();
    let mut in_list = false;
    for node in typed.split('/').skip(1) {
        if let Some(property) = properties.get(node) {
            in_list = false;
            if let Some(inner) = property.get("properties") {
                properties = inner;
                prefix = format!("{prefix}/{node}");
                continue;
            }
            if let Some(inner) = property.pointer("/items/properties") {
                properties = inner;
                prefix = format!("{prefix}/{node}");
                in_list = true;
                continue;
            }
            words.retain(|w| w != NOSPACE);
            break;
        }
        if in_list && !node.is_empty() && node.bytes().all(|b| b.is_ascii_digit()) {
            prefix = format!("{prefix}/{node}");
        }
    }
    if let Value::Object(keys) = properties {
        words.extend(keys.keys().map(|key| format!("{prefix}/{key}")));
    }
    Some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(rows: &[(&[&str], &[&str], &[&str])]) {
        let command = <crate::Cli as clap::CommandFactory>::command();
        for &(args, present, absent) in rows {
            let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
            let got = words(&command, &args);
            for word in present {
                assert!(
                    got.iter().any(|w| w == word),
                    "{args:?}: {word} missing in {got:?}"
                );
            }
            for word in absent {
                assert!(
                    !got.iter().any(|w| w == word),
                    "{args:?}: {word} in {got:?}"
                );
            }
        }
    }

    #[test]
    fn words_as_upstreams_kresctl_gives_them() {
        check(&[
            (
                &[""],
                &["config", "reload", "stop", "--socket", "-s"],
                &[FILENAMES],
            ),
            (&["con"], &["config", "convert"], &[]),
            (&["config", ""], &["get", "set", "delete"], &["reload"]),
            (
                &["config", "get", ""],
                &["-p", "--path", "--json", FILENAMES],
                &["get"],
            ),
            // The pointer, from the schema.
            (
                &["config", "get", "-p", ""],
                &[NOSPACE, "/workers", "/cache", "/network"],
                &[FILENAMES],
            ),
            (
                &["config", "get", "-p", "/"],
                &["/workers", "/cache", "/network"],
                &[],
            ),
            (
                &["config", "get", "-p", "/cache/"],
                &["/cache/size-max", "/cache/storage"],
                &["/workers"],
            ),
            (
                &["config", "set", "--path", "/network/listen/0/"],
                &["/network/listen/0/interface"],
                &[],
            ),
            // A leaf: no deeper words, and a space after it.
            (
                &["config", "get", "-p", "/workers"],
                &["/workers"],
                &[NOSPACE],
            ),
            // An option's value: its possible values, or files.
            (
                &["convert", "--type", ""],
                &["worker", "policy-loader"],
                &["--type"],
            ),
            (&["-s", ""], &[FILENAMES], &["config"]),
            // What is not a path is not completed as one.
            (
                &["top", ""],
                &["clients", "servfail", "--window", "--limit"],
                &[FILENAMES],
            ),
            (
                &["top", "names", "--window", ""],
                &[],
                &[FILENAMES, "--limit"],
            ),
            (
                &["querylog", ""],
                &["--follow", "--client", "--name", "--qtype", "--rcode"],
                &[FILENAMES],
            ),
            (&["querylog", "--qtype", ""], &[], &[FILENAMES]),
            (&["querylog", "--name", ""], &[], &[FILENAMES]),
            (&["upstreams", ""], &["--json"], &[FILENAMES]),
            (&["trace", ""], &["--timeout", "--json"], &[FILENAMES]),
            (&["trace", "example.com", ""], &["--json"], &[FILENAMES]),
            (&["trace", "--timeout", ""], &[], &[FILENAMES]),
            // Once given, an option is not offered again.
            (
                &["-s", "/run/x.sock", ""],
                &["config", "-c"],
                &["-s", "--socket"],
            ),
            // A word that is nothing known, before the last: nothing.
            (&["frobnicate", ""], &[], &["config"]),
            (&["--help", ""], &[], &["config"]),
        ]);
    }
}
