//! The answers that several routes share, described once. Every route that has the manager
//! apply a change (`PUT`/`DELETE`/`PATCH` of `/v1/config`, `/reload`, `/renew`) and every
//! conditional read of `/v1/config` names one family here in its
//! `#[utoipa::path(responses(...))]`. A family is a `utoipa::IntoResponses` type built from
//! tables of [`Answer`]s, so each answer (its status, its words, its body and headers) is
//! written once, however many routes give it.

use std::collections::BTreeMap;

use utoipa::openapi::{
    ContentBuilder, HeaderBuilder, ObjectBuilder, Ref, RefOr, Response, ResponseBuilder, Type,
};

use kres_wire::change::{ChangeSummary, DryRun, ReloadSummary};
use kres_wire::fleet::Staged;

/// One documented answer.
pub struct Answer {
    /// Its status code.
    status: u16,
    /// What it means, as the document says it.
    description: &'static str,
    /// What its body is.
    body: Body,
    /// The description of the `ETag` header it carries, when it carries one.
    etag: Option<&'static str>,
}

/// What the body of an [`Answer`] is.
enum Body {
    /// None.
    Empty,
    /// Plain text.
    Text,
    /// An applied change's: empty text, or, when `Accept` names JSON, what the change did (a
    /// [`ChangeSummary`]); with `dry-run`, a [`DryRun`] in JSON.
    Applied,
    /// A reload's or a renewal's: upstream's text (the example), or, when `Accept` names
    /// JSON, a [`ReloadSummary`].
    Reapplied(&'static str),
    /// A staged change's: a [`Staged`] in JSON.
    Staged,
}

impl Answer {
    /// An answer whose body is plain text.
    const fn text(status: u16, description: &'static str) -> Answer {
        Answer {
            status,
            description,
            body: Body::Text,
            etag: None,
        }
    }

    /// The answer as the document has it.
    fn response(&self) -> Response {
        let string = || ObjectBuilder::new().schema_type(Type::String);
        let mut response = ResponseBuilder::new().description(self.description);
        if let Some(etag) = self.etag {
            let header = HeaderBuilder::new()
                .schema(string())
                .description(Some(etag))
                .build();
            response = response.header("ETag", header);
        }
        response = match self.body {
            Body::Empty => response,
            Body::Text => response.content(
                "text/plain",
                ContentBuilder::new().schema(Some(string())).build(),
            ),
            Body::Applied => response.content("text/plain", empty_text()).content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(
                        utoipa::openapi::schema::AnyOfBuilder::new()
                            .item(schema_ref::<ChangeSummary>())
                            .item(schema_ref::<DryRun>()),
                    ))
                    .build(),
            ),
            Body::Staged => response.content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(schema_ref::<Staged>()))
                    .build(),
            ),
            Body::Reapplied(example) => response
                .content(
                    "text/plain",
                    ContentBuilder::new()
                        .schema(Some(string()))
                        .example(Some(example.into()))
                        .build(),
                )
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(schema_ref::<ReloadSummary>()))
                        .build(),
                ),
        };
        response.build()
    }
}

/// A reference to the component schema of `T`.
fn schema_ref<T: utoipa::ToSchema>() -> Ref {
    Ref::from_schema_name(T::name())
}

/// An empty `text/plain` body.
fn empty_text() -> utoipa::openapi::Content {
    ContentBuilder::new()
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .max_length(Some(0)),
        ))
        .build()
}

/// The responses of a family: its tables, in order (a later answer of a status replaces an
/// earlier one).
fn responses(tables: &[&[Answer]]) -> BTreeMap<String, RefOr<Response>> {
    tables
        .iter()
        .flat_map(|table| table.iter())
        .map(|answer| (answer.status.to_string(), RefOr::T(answer.response())))
        .collect()
}

/// A family of answers: a type for `responses(...)`, made of tables of [`Answer`]s.
macro_rules! family {
    ($(#[$doc:meta])* $name:ident = [$($table:expr),+ $(,)?]) => {
        $(#[$doc])*
        pub struct $name;

        impl utoipa::IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                responses(&[$($table),+])
            }
        }
    };
}

/// The configuration's ETag, on every answer that has one but a change's success.
const CURRENT_ETAG: &str = "The configuration's structural ETag.";

/// What every change the manager applies can answer, beside its own refusals.
const APPLYING: &[Answer] = &[
    Answer::text(500, "Applying failed."),
    Answer::text(
        503,
        "The manager is not running; on a node of a fleet, also: the fleet's store cannot be \
reached, or the node did not apply the fleet's new document in time.",
    ),
];

/// What every change of `/v1/config` answers when it is done or cannot start.
const CONFIG_CHANGE: &[Answer] = &[
    Answer {
        status: 200,
        description: "Applied: an empty body (`text/plain`), or what the change did (`changed`, \
`workers`, `cache-gc`, as in a dry run's answer) when `Accept` names `application/json`; with \
`dry-run=true`, what the change would do (JSON).",
        body: Body::Applied,
        etag: Some(
            "The ETag of the configuration the change made (with `dry-run`: would make, also \
in the body).",
        ),
    },
    Answer {
        status: 202,
        description: "On a node of a fleet, a staged change (`canary-node` or `wave` given, or \
the node's `fleet.rollout` set): written to the fleet as a new revision, which the nodes take \
wave by wave, the canary first (`GET /fleet` follows the rollout).",
        body: Body::Staged,
        etag: None,
    },
    Answer {
        status: 412,
        description: "`If-Match` did not match, `If-None-Match` matched, or, with `If-Match`, \
another change won the race, or, on a node of a fleet, the node does not run the fleet's newest \
document yet (the tag names a stale one); empty body, the current ETag in `ETag`.",
        body: Body::Empty,
        etag: Some(CURRENT_ETAG),
    },
];

/// What a `PUT` or a `DELETE` of `/v1/config` is refused with.
const EDIT_REFUSED: &[Answer] = &[
    Answer::text(
        400,
        "The body does not parse (or is not UTF-8), the pointer is malformed, `dry-run` is not \
a boolean, `canary-node` or `wave` is malformed or given on a node in no fleet, the resulting configuration is invalid (every error is listed: `Configuration \
validation error detected:`), or the manager refused it (an immutable section changed, the canary \
or the policy-loader failed, a socket could not be bound, a rolling restart was rolled back: \
`Configuration validation failed:`).",
    ),
    Answer::text(
        409,
        "The configuration kept changing under the request (another change won the race every \
time); try again. On a node of a fleet (`fleet`), also: the change touches a path the node's own \
file decides, the fleet's new document was written but this node refused it, or a staged change's \
canary node is not in the fleet.",
    ),
];

/// A body of a media type no change reads.
const UNSUPPORTED_TYPE: Answer =
    Answer::text(415, "A `Content-Type` that is none of JSON, YAML, TOML.");

family! {
    /// `PUT /v1/config[/{pointer}]`.
    ConfigPut = [
        CONFIG_CHANGE,
        EDIT_REFUSED,
        &[
            Answer::text(404, "The parent of the pointer does not exist."),
            Answer::text(413, "The body is larger than the limit."),
            UNSUPPORTED_TYPE,
        ],
        APPLYING,
    ]
}

family! {
    /// `DELETE /v1/config`.
    ConfigDeleteAll = [CONFIG_CHANGE, EDIT_REFUSED, APPLYING]
}

family! {
    /// `DELETE /v1/config/{pointer}`.
    ConfigDelete = [
        CONFIG_CHANGE,
        EDIT_REFUSED,
        &[Answer::text(404, "Nothing at the pointer.")],
        APPLYING,
    ]
}

family! {
    /// `PATCH /v1/config[/{pointer}]`.
    ConfigPatch = [
        CONFIG_CHANGE,
        &[
            Answer::text(
                400,
                "The body does not parse, an operation is malformed or names nothing, `dry-run` \
is not a boolean, or the resulting configuration is invalid or refused (as for `PUT`).",
            ),
            Answer::text(
                409,
                "A `test` operation failed, or the configuration kept changing under the request \
(on a node of a fleet, also as for `PUT`).",
            ),
            Answer::text(
                413,
                "The body is larger than the limit, or the document would outgrow the bounds of a \
configuration.",
            ),
            UNSUPPORTED_TYPE,
        ],
        APPLYING,
    ]
}

family! {
    /// What a conditional `GET` of `/v1/config[/{pointer}]` answers instead of the value.
    ConfigConditions = [&[
        Answer {
            status: 304,
            description: "`If-None-Match` matched; empty body.",
            body: Body::Empty,
            etag: Some(CURRENT_ETAG),
        },
        Answer {
            status: 412,
            description: "`If-Match` did not match; empty body.",
            body: Body::Empty,
            etag: Some(CURRENT_ETAG),
        },
    ]]
}

family! {
    /// `POST /reload[/force]`.
    Reload = [
        &[
            Answer {
                status: 200,
                description: "Applied: upstream's text, or, when `Accept` names \
`application/json`, what the reload did (`changed`, `workers`, `cache-gc`) and `discarded`, the \
JSON pointers of changes made through the API since the files were last applied that it undid.",
                body: Body::Reapplied("Reloading..."),
                etag: None,
            },
            Answer::text(
                400,
                "A file does not parse, the configuration is invalid, or the manager refused it \
(an immutable section changed, the canary or the policy-loader failed, a socket could not be \
bound, a rolling restart was rolled back).",
            ),
        ],
        APPLYING,
    ]
}

family! {
    /// `POST /renew[/force]`.
    Renew = [
        &[
            Answer {
                status: 200,
                description: "Applied: upstream's text, or, when `Accept` names \
`application/json`, what the renewal did (`discarded` is empty).",
                body: Body::Reapplied("Renewing configuration..."),
                etag: None,
            },
            Answer::text(
                400,
                "The manager refused it (the canary or the policy-loader failed, a socket could \
not be bound, a rolling restart was rolled back).",
            ),
        ],
        APPLYING,
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};
    use utoipa::IntoResponses;

    use super::*;

    fn as_json<T: IntoResponses>() -> Value {
        serde_json::to_value(T::responses()).expect("JSON")
    }

    #[test]
    fn families_hold_their_tables_with_the_later_answer_of_a_status_winning() {
        let put = as_json::<ConfigPut>();
        let statuses: Vec<&String> = put.as_object().expect("object").keys().collect();
        assert_eq!(
            statuses,
            ["200", "202", "400", "404", "409", "412", "413", "415", "500", "503"]
        );
        assert_eq!(
            put["202"]["content"]["application/json"]["schema"],
            json!({"$ref": "#/components/schemas/Staged"})
        );
        assert_eq!(
            put["503"],
            json!({"description": "The manager is not running; on a node of a fleet, also: the \
fleet's store cannot be reached, or the node did not apply the fleet's new document in time.",
                   "content": {"text/plain": {"schema": {"type": "string"}}}})
        );
        assert_eq!(
            put["200"]["content"]["application/json"]["schema"],
            json!({"anyOf": [{"$ref": "#/components/schemas/ChangeSummary"},
                             {"$ref": "#/components/schemas/DryRun"}]})
        );
        assert_eq!(
            put["200"]["content"]["text/plain"]["schema"],
            json!({"type": "string", "maxLength": 0})
        );
        assert_eq!(
            put["412"]["headers"]["ETag"],
            json!({"schema": {"type": "string"}, "description": CURRENT_ETAG})
        );
        assert!(put["412"].get("content").is_none(), "{}", put["412"]);
        let reload = as_json::<Reload>();
        assert_eq!(
            reload["200"]["content"]["text/plain"]["example"],
            "Reloading..."
        );
        assert_eq!(
            reload["200"]["content"]["application/json"]["schema"],
            json!({"$ref": "#/components/schemas/ReloadSummary"})
        );
        let deleted = as_json::<ConfigDeleteAll>();
        assert!(deleted.get("404").is_none() && deleted.get("415").is_none());
    }
}
