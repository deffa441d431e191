//! etcd's v3 JSON gateway, as it writes and reads: the request bodies this client sends and
//! the answers it takes, checked on the way in. The gateway is grpc-gateway over etcd's
//! protobuf messages: 64-bit integers are JSON strings (`"revision":"5"`), bytes are
//! standard base64, and fields at their zero value are left out (no `kvs` when nothing
//! matched, no `succeeded` when a transaction failed, no `TTL` for an expired lease). Every
//! decode here says what it was reading when it fails.

use base64::Engine;
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Standard base64 with padding, as the gateway writes `bytes` fields.
fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

pub(crate) fn encode(bytes: &[u8]) -> String {
    b64().encode(bytes)
}

pub(crate) fn decode(what: &str, text: &str) -> Result<Vec<u8>, Error> {
    b64()
        .decode(text)
        .map_err(|e| Error::malformed(what, format!("not base64: {e}")))
}

/// A 64-bit integer as the gateway writes it: a string of digits (or, leniently, a number).
fn int64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int {
        Text(String),
        Number(i64),
    }
    match Int::deserialize(d)? {
        Int::Number(n) => Ok(n),
        Int::Text(t) => t
            .parse()
            .map_err(|_| de::Error::custom(format!("{t:?} is not a 64-bit integer"))),
    }
}

/// Written as the gateway reads 64-bit integers.
fn int64_text<S: serde::Serializer>(n: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&n.to_string())
}

/// Parse one answer, naming it in the error.
pub(crate) fn parse<T: for<'de> Deserialize<'de>>(what: &str, body: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|e| Error::malformed(what, e))
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Header {
    #[serde(default, deserialize_with = "int64")]
    pub revision: i64,
}

/// A key and its value (`mvccpb.KeyValue`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct KeyValue {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub value: String,
    #[serde(default, deserialize_with = "int64")]
    pub mod_revision: i64,
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct RangeRequest {
    pub key: String,
    /// Every key from `key` up to this one (exclusive): a prefix's range.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub range_end: String,
    /// At most this many keys (0: no bound).
    #[serde(serialize_with = "int64_text", skip_serializing_if = "is_zero")]
    pub limit: i64,
    /// The keys as they were at this revision (0: now).
    #[serde(serialize_with = "int64_text", skip_serializing_if = "is_zero")]
    pub revision: i64,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RangeResponse {
    #[serde(default)]
    pub header: Header,
    #[serde(default)]
    pub kvs: Vec<KeyValue>,
}

#[derive(Debug, Serialize)]
pub(crate) struct PutRequest {
    pub key: String,
    pub value: String,
    #[serde(serialize_with = "int64_text", skip_serializing_if = "is_zero")]
    pub lease: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

#[derive(Debug, Deserialize)]
pub(crate) struct PutResponse {
    #[serde(default)]
    pub header: Header,
}

/// A transaction's comparison: the key's modification revision, or its creation revision
/// (0: the key is absent).
#[derive(Debug, Serialize)]
pub(crate) struct Compare {
    pub target: &'static str,
    pub key: String,
    pub result: &'static str,
    #[serde(
        serialize_with = "int64_text_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub mod_revision: Option<i64>,
    #[serde(
        serialize_with = "int64_text_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub create_revision: Option<i64>,
}

fn int64_text_opt<S: serde::Serializer>(n: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match n {
        Some(n) => s.serialize_str(&n.to_string()),
        None => s.serialize_none(),
    }
}

#[derive(Debug, Serialize)]
pub(crate) enum RequestOp {
    #[serde(rename = "request_put")]
    Put(PutRequest),
    #[serde(rename = "request_range")]
    Range(RangeRequest),
    #[serde(rename = "request_delete_range")]
    Delete(DeleteRequest),
}

/// A key deleted (one key: no range end).
#[derive(Debug, Serialize)]
pub(crate) struct DeleteRequest {
    pub key: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct TxnRequest {
    pub compare: Vec<Compare>,
    pub success: Vec<RequestOp>,
    pub failure: Vec<RequestOp>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct TxnResponse {
    #[serde(default)]
    pub header: Header,
    #[serde(default)]
    pub succeeded: bool,
    #[serde(default)]
    pub responses: Vec<ResponseOp>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ResponseOp {
    pub response_range: Option<RangeResponse>,
}

#[derive(Debug, Serialize)]
pub(crate) struct LeaseGrantRequest {
    #[serde(rename = "TTL", serialize_with = "int64_text")]
    pub ttl: i64,
}

#[derive(Debug, Deserialize)]
pub(crate) struct LeaseGrantResponse {
    #[serde(rename = "ID", default, deserialize_with = "int64")]
    pub id: i64,
    #[serde(rename = "TTL", default, deserialize_with = "int64")]
    pub ttl: i64,
    #[serde(default)]
    pub error: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct LeaseId {
    #[serde(rename = "ID", serialize_with = "int64_text")]
    pub id: i64,
}

/// One line of a stream: a result, or an error grpc-gateway writes in its place.
#[derive(Debug, Deserialize)]
pub(crate) struct StreamLine<T> {
    pub result: Option<T>,
    pub error: Option<StreamError>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StreamError {
    #[serde(default, deserialize_with = "int64")]
    pub code: i64,
    #[serde(default)]
    pub message: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct LeaseKeepAliveResponse {
    #[serde(rename = "TTL", default, deserialize_with = "int64")]
    pub ttl: i64,
}

#[derive(Debug, Serialize)]
pub(crate) struct WatchCreate {
    pub create_request: WatchCreateRequest,
}

#[derive(Debug, Serialize)]
pub(crate) struct WatchCreateRequest {
    pub key: String,
    pub range_end: String,
    #[serde(serialize_with = "int64_text")]
    pub start_revision: i64,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WatchResponse {
    #[serde(default)]
    pub created: bool,
    #[serde(default)]
    pub canceled: bool,
    #[serde(default, deserialize_with = "int64")]
    pub compact_revision: i64,
    #[serde(default)]
    pub cancel_reason: String,
    #[serde(default)]
    pub events: Vec<WatchEvent>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WatchEvent {
    /// `PUT` is the zero value and so left out.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub kv: KeyValue,
}

#[derive(Debug, Serialize)]
pub(crate) struct AuthenticateRequest<'a> {
    pub name: &'a str,
    pub password: &'a str,
}

#[derive(Debug, Deserialize)]
pub(crate) struct AuthenticateResponse {
    #[serde(default)]
    pub token: String,
}

/// The body of an answer with a status other than 200.
#[derive(Debug, Deserialize)]
pub(crate) struct ErrorBody {
    #[serde(default, deserialize_with = "int64")]
    pub code: i64,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub error: String,
}

/// The end of the range holding every key that starts with `prefix` (etcd's `range_end`):
/// the prefix with its last byte below 0xff raised by one; every key for an empty prefix
/// or one of 0xff bytes only.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_where_etcd_expects() {
        assert_eq!(prefix_end(b"/kr/"), b"/kr0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
        assert_eq!(prefix_end(b""), b"\0");
    }

    #[test]
    fn answers_are_read_as_the_gateway_writes_them() {
        let r: RangeResponse = parse(
            "range",
            br#"{"header":{"revision":"7"},"kvs":[{"key":"Zm9v","mod_revision":"6","value":"YmF6"}],"count":"1"}"#,
        )
        .unwrap();
        assert_eq!(r.header.revision, 7);
        assert_eq!(r.kvs[0].mod_revision, 6);
        let empty: RangeResponse = parse("range", br#"{"header":{"revision":"1"}}"#).unwrap();
        assert!(empty.kvs.is_empty());
        let w: StreamLine<WatchResponse> = parse(
            "watch",
            br#"{"result":{"header":{},"canceled":true,"compact_revision":"5"}}"#,
        )
        .unwrap();
        assert_eq!(w.result.unwrap().compact_revision, 5);
    }

    #[test]
    fn bad_answers_say_what_was_read() {
        let e = parse::<RangeResponse>("range of /kr/doc", br#"{"header":{"revision":"x"}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("range of /kr/doc: ") && e.contains("\"x\""),
            "{e}"
        );
        let e = parse::<RangeResponse>("range", b"[1]")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("range: "), "{e}");
        let e = decode("value of /kr/doc", "!!").unwrap_err().to_string();
        assert!(e.contains("value of /kr/doc: not base64"), "{e}");
    }

    #[test]
    fn requests_are_written_as_the_gateway_reads_them() {
        let txn = TxnRequest {
            compare: vec![Compare {
                target: "CREATE",
                key: encode(b"k"),
                result: "EQUAL",
                mod_revision: None,
                create_revision: Some(0),
            }],
            success: vec![RequestOp::Put(PutRequest {
                key: encode(b"k"),
                value: encode(b"v"),
                lease: 0,
            })],
            failure: vec![RequestOp::Range(RangeRequest {
                key: encode(b"k"),
                ..RangeRequest::default()
            })],
        };
        assert_eq!(
            serde_json::to_string(&txn).unwrap(),
            r#"{"compare":[{"target":"CREATE","key":"aw==","result":"EQUAL","create_revision":"0"}],"success":[{"request_put":{"key":"aw==","value":"dg=="}}],"failure":[{"request_range":{"key":"aw=="}}]}"#
        );
    }
}
