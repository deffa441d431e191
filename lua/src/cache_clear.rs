//! The cache-clear RPC: upstream's request schema (`name`, `exact-name`, `rr-type`,
//! `chunk-size`), validated with its rules and rendered to one `cache.clear(...)` call for a
//! worker (the cache is one LMDB shared by all of them).

use serde_json::Value;

use crate::quote;
use kres_config::types::DomainName;

/// RR types upstream accepts for `rr-type`.
pub const RR_TYPES: &[&str] = &[
    "A",
    "A6",
    "AAAA",
    "AFSDB",
    "ANY",
    "APL",
    "ATMA",
    "AVC",
    "AXFR",
    "CAA",
    "CDNSKEY",
    "CDS",
    "CERT",
    "CNAME",
    "CSYNC",
    "DHCID",
    "DLV",
    "DNAME",
    "DNSKEY",
    "DOA",
    "DS",
    "EID",
    "EUI48",
    "EUI64",
    "GID",
    "GPOS",
    "HINFO",
    "HIP",
    "HTTPS",
    "IPSECKEY",
    "ISDN",
    "IXFR",
    "KEY",
    "KX",
    "L32",
    "L64",
    "LOC",
    "LP",
    "MAILA",
    "MAILB",
    "MB",
    "MD",
    "MF",
    "MG",
    "MINFO",
    "MR",
    "MX",
    "NAPTR",
    "NID",
    "NIMLOC",
    "NINFO",
    "NS",
    "NSAP",
    "NSAP-PTR",
    "NSEC",
    "NSEC3",
    "NSEC3PARAM",
    "NULL",
    "NXT",
    "OPENPGPKEY",
    "OPT",
    "PTR",
    "PX",
    "RKEY",
    "RP",
    "RRSIG",
    "RT",
    "SIG",
    "SINK",
    "SMIMEA",
    "SOA",
    "SPF",
    "SRV",
    "SSHFP",
    "SVCB",
    "TA",
    "TALINK",
    "TKEY",
    "TLSA",
    "TSIG",
    "TXT",
    "UID",
    "UINFO",
    "UNSPEC",
    "URI",
    "WKS",
    "X25",
    "ZONEMD",
];

/// A validated cache-clear request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheClear {
    pub name: Option<String>,
    pub exact_name: bool,
    pub rr_type: Option<&'static str>,
    pub chunk_size: u64,
}

impl CacheClear {
    /// Validate a request body (dash-case keys). Every problem is reported with its path.
    pub fn from_json(body: &Value) -> Result<CacheClear, Vec<String>> {
        let mut errors = Vec::new();
        let Some(obj) = body.as_object() else {
            return Err(vec!["[/] expected an object".to_owned()]);
        };
        for key in obj.keys() {
            if !matches!(
                key.as_str(),
                "name" | "exact-name" | "rr-type" | "chunk-size"
            ) {
                errors.push(format!("[/{key}] unexpected extra key"));
            }
        }
        let name = match obj.get("name") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => match DomainName::parse(s) {
                Ok(d) => Some(d.to_string()),
                Err(e) => {
                    errors.push(format!("[/name] {e}"));
                    None
                }
            },
            Some(_) => {
                errors.push("[/name] expected a domain name string".to_owned());
                None
            }
        };
        let exact_name = match obj.get("exact-name") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                errors.push("[/exact-name] expected bool".to_owned());
                false
            }
        };
        let rr_type = match obj.get("rr-type") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => match RR_TYPES.iter().find(|t| **t == s) {
                Some(t) => Some(*t),
                None => {
                    errors.push(format!("[/rr-type] '{s}' is not a known RR type"));
                    None
                }
            },
            Some(_) => {
                errors.push("[/rr-type] expected a string".to_owned());
                None
            }
        };
        let chunk_size = match obj.get("chunk-size") {
            None => 100,
            Some(v) => match v.as_u64() {
                Some(n) if n >= 1 && !v.is_boolean() => n,
                _ => {
                    errors.push("[/chunk-size] expected a positive integer".to_owned());
                    100
                }
            },
        };
        if rr_type.is_some() && !exact_name {
            errors.push("[/] 'rr-type' is only supported with 'exact-name: true'".to_owned());
        }
        if errors.is_empty() {
            Ok(CacheClear {
                name,
                exact_name,
                rr_type,
                chunk_size,
            })
        } else {
            Err(errors)
        }
    }

    /// The Lua call, as upstream renders it (chunk size only without `exact-name`).
    pub fn render_lua(&self) -> String {
        let name = self
            .name
            .as_deref()
            .map(quote)
            .unwrap_or_else(|| "nil".to_owned());
        let rr_type = self
            .rr_type
            .map(|t| format!("kres.type[{}]", quote(t)))
            .unwrap_or_else(|| "nil".to_owned());
        let chunk = if self.exact_name {
            "nil".to_owned()
        } else {
            self.chunk_size.to_string()
        };
        format!("cache.clear({name},{},{rr_type},{chunk})", self.exact_name)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn renders_like_upstream() {
        let cases = [
            (json!({}), "cache.clear(nil,false,nil,100)"),
            (
                json!({"name": "example.com.", "chunk-size": 5}),
                "cache.clear('example.com.',false,nil,5)",
            ),
            (
                json!({"name": "example.com", "exact-name": true, "rr-type": "AAAA"}),
                "cache.clear('example.com',true,kres.type['AAAA'],nil)",
            ),
        ];
        for (body, lua) in cases {
            assert_eq!(
                CacheClear::from_json(&body).map(|c| c.render_lua()),
                Ok(lua.to_owned()),
                "{body}"
            );
        }
    }

    #[test]
    fn rejects_like_upstream() {
        let cases = [
            (
                json!({"rr-type": "A"}),
                "only supported with 'exact-name: true'",
            ),
            (
                json!({"rr-type": "BOGUS", "exact-name": true}),
                "[/rr-type]",
            ),
            (json!({"chunk-size": 0}), "[/chunk-size]"),
            (json!({"name": "-bad-.com"}), "[/name]"),
            (
                json!({"exact_name": true}),
                "[/exact_name] unexpected extra key",
            ),
            (json!([1]), "[/] expected an object"),
        ];
        for (body, needle) in cases {
            let errors = CacheClear::from_json(&body).expect_err("must be rejected");
            assert!(
                errors.iter().any(|e| e.contains(needle)),
                "{body}: {errors:?}"
            );
        }
    }
}
