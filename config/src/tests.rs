//! Unit tests of the public validation API against behaviour checked with upstream's validator.

use serde_json::json;

use super::{validate, LogTarget, LogTargetArg, PathChecks, ValidationContext};

/// `logging.target` as validated with `logtarget_arg`, or the errors as printed.
fn target(doc: serde_json::Value, logtarget_arg: LogTargetArg) -> Result<LogTarget, String> {
    let ctx = ValidationContext {
        resolve_root: "/etc/knot-resolver".into(),
        checks: PathChecks::Lenient,
        logtarget_arg,
    };
    validate(&doc, &ctx)
        .map(|cfg| cfg.logging.target)
        .map_err(|e| e.to_string())
}

#[test]
fn from_arg_is_what_the_context_gives() {
    use LogTargetArg::{Environment, Given};
    let text = |t: &str| Environment(Some(t.into()));
    let invalid = "Configuration validation error detected:\n\t[/logging] logging target 'file' from '--logtarget' argument is invalid";
    let rows = [
        (json!({}), Given(LogTarget::Syslog), Ok(LogTarget::Syslog)),
        (json!({}), LogTargetArg::default(), Ok(LogTarget::Stdout)),
        (json!({}), Environment(None), Ok(LogTarget::Stdout)),
        (json!({}), text(""), Ok(LogTarget::Stdout)),
        (json!({}), text("stderr"), Ok(LogTarget::Stderr)),
        (json!({}), text("file"), Err(invalid.to_owned())),
        (
            json!({"logging": {"target": "from-arg"}}),
            Given(LogTarget::Stderr),
            Ok(LogTarget::Stderr),
        ),
        (
            json!({"logging": {"target": "stderr"}}),
            Given(LogTarget::Syslog),
            Ok(LogTarget::Stderr),
        ),
        (
            json!({"logging": {"target": "stdout"}}),
            text("file"),
            Ok(LogTarget::Stdout),
        ),
    ];
    for (doc, arg, expected) in rows {
        let row = format!("{doc} with {arg:?}");
        assert_eq!(target(doc, arg), expected, "{row}");
    }
}

#[test]
fn a_container_is_named_as_upstream_hands_it_to_its_type() {
    use super::engine::{map_value, Container, Ty};
    let ctx = ValidationContext {
        resolve_root: "/".into(),
        checks: PathChecks::Lenient,
        logtarget_arg: LogTargetArg::default(),
    };
    let renamed = "<class 'knot_resolver.utils.modeling.renaming.RenamedList'>";
    let rows = [
        (Ty::Str, Container::Renamed, renamed),
        (Ty::Str, Container::Plain, "<class 'list'>"),
        // a list's items are plain, whatever the list was
        (
            Ty::List(Box::new(Ty::Str)),
            Container::Renamed,
            "<class 'list'>",
        ),
        // so are a union's variants when the value is
        (
            Ty::Union(vec![Ty::Bool, Ty::Str]),
            Container::Plain,
            "<class 'list'>",
        ),
    ];
    for (ty, container, named) in rows {
        let value = match &ty {
            Ty::List(_) => json!([[1]]),
            _ => json!([1]),
        };
        let failures = map_value(&ty, &value, container, "/x", &ctx).expect_err("refused");
        let text = format!("{failures:?}");
        assert!(text.contains(named), "{container:?}: {text}");
        let other = if named == renamed {
            "<class 'list'>"
        } else {
            renamed
        };
        assert!(!text.contains(other), "{container:?}: {text}");
    }
}
