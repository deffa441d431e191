//! How a flag with no value (`--json`, `--dry-run`) becomes the enum that says what it means,
//! so no command receives a `bool`, and how a number of seconds becomes a bounded `Duration`:
//! shared by the command line (`cli`) and the commands that define their own arguments
//! (`commands::query_log`, `commands::trace`).

use std::time::Duration;

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

/// Why a number of seconds was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SecondsError {
    #[error("'{0}' is not a number of seconds")]
    NotANumber(String),
    #[error("seconds, more than 0 and at most {}", .0.as_secs_f64())]
    OutOfRange(Duration),
}

/// A parser of seconds (`1`, `0.5`), more than 0 and at most `max`.
pub(crate) fn seconds_up_to(
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, SecondsError> + Clone + Send + Sync + 'static {
    move |text| {
        let seconds: f64 = text
            .trim()
            .parse()
            .map_err(|_| SecondsError::NotANumber(text.to_owned()))?;
        Duration::try_from_secs_f64(seconds)
            .ok()
            .filter(|d| !d.is_zero() && *d <= max)
            .ok_or(SecondsError::OutOfRange(max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_bounded_and_named_when_refused() {
        let parse = seconds_up_to(Duration::from_secs(60));
        assert_eq!(parse("1"), Ok(Duration::from_secs(1)));
        assert_eq!(parse("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("60"), Ok(Duration::from_secs(60)));
        for bad in ["0", "-1", "60.5", "inf", "NaN"] {
            assert_eq!(
                parse(bad),
                Err(SecondsError::OutOfRange(Duration::from_secs(60))),
                "{bad}"
            );
        }
        assert_eq!(
            parse("1m").map_err(|e| e.to_string()),
            Err("'1m' is not a number of seconds".into())
        );
    }
}
