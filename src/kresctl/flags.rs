//! How a flag with no value (`--json`, `--dry-run`) becomes the enum that says what it means,
//! so no command receives a `bool`: shared by the command line (`cli`) and the commands that
//! define their own arguments (`commands::query_log`, `commands::trace`).

use clap::builder::{BoolValueParser, TypedValueParser};

/// A flag parsed into `present` when given and `absent` otherwise.
pub(crate) fn flag<T: Clone + Send + Sync + 'static>(
    present: T,
    absent: T,
) -> impl TypedValueParser<Value = T> {
    BoolValueParser::new().map(move |given| {
        if given {
            present.clone()
        } else {
            absent.clone()
        }
    })
}
