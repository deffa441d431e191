//! Both halves of every section agree: the description and the typed form name the same fields,
//! every object the description can produce has a typed form, and a section's defaults (after its
//! transforms) deserialise into that form.

use std::collections::BTreeSet;
use std::fmt;

use serde::de::{DeserializeOwned, Visitor};
use serde::Deserializer;

use super::*;
use crate::engine::{map_object, Ctx, ObjectDef, Ty};

/// A deserializer that only records which fields a struct asks for.
struct Probe<'a>(&'a mut Option<&'static [&'static str]>);

#[derive(Debug)]
struct Probed;

impl fmt::Display for Probed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("probed")
    }
}

impl std::error::Error for Probed {}

impl serde::de::Error for Probed {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Probed
    }
}

impl<'de> Deserializer<'de> for Probe<'_> {
    type Error = Probed;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Probed> {
        Err(Probed)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Probed> {
        *self.0 = Some(fields);
        Err(Probed)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The wire names of a typed form's fields.
fn fields_of<T: DeserializeOwned>() -> BTreeSet<&'static str> {
    let mut fields = None;
    assert!(T::deserialize(Probe(&mut fields)).is_err());
    fields
        .expect("a typed form of a section is a struct")
        .iter()
        .copied()
        .collect()
}

/// One section's typed form: its fields, and a check that a normalized value deserialises into it.
struct Typed {
    fields: BTreeSet<&'static str>,
    accepts: fn(Value) -> Result<(), String>,
    /// Fields the description has and its transform consumes before the typed form sees them.
    consumed: &'static [&'static str],
    /// The smallest valid input: the required fields and the choices the section's rules demand.
    minimal: Value,
}

fn typed<T: DeserializeOwned>() -> Typed {
    Typed {
        fields: fields_of::<T>(),
        accepts: |v| {
            serde_json::from_value::<T>(v)
                .map(drop)
                .map_err(|e| e.to_string())
        },
        consumed: &[],
        minimal: json!({}),
    }
}

impl Typed {
    fn minimal(self, minimal: Value) -> Typed {
        Typed { minimal, ..self }
    }
}

/// Every description class and its typed form.
fn typed_forms() -> Vec<(&'static str, Typed)> {
    vec![
        (
            "KresConfig",
            Typed {
                consumed: &["version"],
                ..typed::<KresConfig>()
            },
        ),
        (
            "ManagementSchema",
            typed::<ManagementSchema>().minimal(json!({"unix-socket": "/run/kres-api.sock"})),
        ),
        ("OptionsSchema", typed::<OptionsSchema>()),
        ("NetworkSchema", typed::<NetworkSchema>()),
        ("EdnsBufferSizeSchema", typed::<EdnsBufferSizeSchema>()),
        (
            "AddressRenumberingSchema",
            typed::<AddressRenumberingSchema>()
                .minimal(json!({"source": "10.0.0.0/24", "destination": "192.0.2.0"})),
        ),
        ("TLSSchema", typed::<TlsSchema>()),
        ("ProxyProtocolSchema", typed::<ProxyProtocolSchema>()),
        ("QUICSchema", typed::<QuicSchema>()),
        (
            "ListenSchema",
            typed::<ListenSchema>().minimal(json!({"interface": "127.0.0.1"})),
        ),
        (
            "ViewSchema",
            typed::<ViewSchema>()
                .minimal(json!({"subnets": ["192.0.2.0/24"], "answer": "refused"})),
        ),
        ("ViewOptionsSchema", typed::<ViewOptionsSchema>()),
        ("LocalDataSchema", typed::<LocalDataSchema>()),
        (
            "RuleSchema",
            typed::<RuleSchema>().minimal(json!({"name": "example.org", "address": "192.0.2.1"})),
        ),
        (
            "RPZSchema",
            typed::<RpzSchema>().minimal(json!({"file": "/rpz.zone"})),
        ),
        (
            "RPZTransferSchema",
            typed::<RpzTransferSchema>()
                .minimal(json!({"zone": "rpz.example.", "primaries": ["192.0.2.53"]})),
        ),
        (
            "ForwardSchema",
            typed::<ForwardSchema>().minimal(json!({"subtree": ".", "servers": ["127.0.0.1"]})),
        ),
        ("ForwardOptionsSchema", typed::<ForwardOptionsSchema>()),
        (
            "ForwardServerSchema",
            typed::<ForwardServerSchema>().minimal(json!({"address": "127.0.0.1"})),
        ),
        ("FallbackSchema", typed::<FallbackSchema>()),
        ("CacheSchema", typed::<CacheSchema>()),
        ("GarbageCollectorSchema", typed::<GarbageCollectorSchema>()),
        (
            "PrefillSchema",
            typed::<PrefillSchema>()
                .minimal(json!({"origin": ".", "url": "https://example.org/root.zone"})),
        ),
        ("PredictionSchema", typed::<PredictionSchema>()),
        ("PrefetchSchema", typed::<PrefetchSchema>()),
        ("DnssecSchema", typed::<DnssecSchema>()),
        (
            "TrustAnchorFileSchema",
            typed::<TrustAnchorFileSchema>().minimal(json!({"file": "/root.key"})),
        ),
        ("Dns64Schema", typed::<Dns64Schema>()),
        ("LoggingSchema", typed::<LoggingSchema>()),
        ("DnstapSchema", typed::<DnstapSchema>()),
        ("MonitoringSchema", typed::<MonitoringSchema>()),
        ("QueryLogSchema", typed::<QueryLogSchema>()),
        ("GraphiteSchema", typed::<GraphiteSchema>()),
        ("RateLimitingSchema", typed::<RateLimitingSchema>()),
        ("DeferSchema", typed::<DeferSchema>()),
        ("LuaSchema", typed::<LuaSchema>()),
        (
            "FleetSchema",
            typed::<FleetSchema>().minimal(json!({
                "node": "ns1",
                "etcd": {"endpoints": ["http://127.0.0.1:2379"], "prefix": "/knot-resolver/f"},
            })),
        ),
        ("RolloutSchema", typed::<RolloutSchema>()),
        (
            "EtcdSchema",
            typed::<EtcdSchema>().minimal(
                json!({"endpoints": ["http://127.0.0.1:2379"], "prefix": "/knot-resolver/f"}),
            ),
        ),
    ]
}

/// Every section object reachable from the root description, each once.
fn described_objects() -> Vec<&'static ObjectDef> {
    fn walk<'a>(ty: &'a Ty, out: &mut Vec<&'a ObjectDef>) {
        match ty {
            Ty::Optional(inner) | Ty::List(inner) | Ty::ListOrItem(inner) => walk(inner, out),
            Ty::Dict(key, value) => {
                walk(key, out);
                walk(value, out);
            }
            Ty::Union(variants) => variants.iter().for_each(|t| walk(t, out)),
            Ty::Object(def) => object(def, out),
            Ty::Null
            | Ty::Bool
            | Ty::PlainInt
            | Ty::Int(_)
            | Ty::Str
            | Ty::Value(_)
            | Ty::Literal(_) => {}
        }
    }
    fn object<'a>(def: &'a ObjectDef, out: &mut Vec<&'a ObjectDef>) {
        if out.iter().any(|d| d.class == def.class) {
            return;
        }
        out.push(def);
        def.fields.iter().for_each(|f| walk(&f.ty, out));
    }
    let mut out = Vec::new();
    object(root_def(), &mut out);
    out
}

fn short(class: &str) -> &str {
    class.rsplit('.').next().unwrap_or(class)
}

/// The typed form of a described object, by its class's short name.
fn form_of<'a>(forms: &'a [(&'static str, Typed)], def: &ObjectDef) -> Option<&'a Typed> {
    let name = short(def.class);
    forms.iter().find(|(c, _)| *c == name).map(|(_, form)| form)
}

#[test]
fn every_described_field_has_a_typed_field_and_back() {
    let forms = typed_forms();
    let described = described_objects();
    for def in &described {
        let name = short(def.class);
        let Some(form) = form_of(&forms, def) else {
            panic!("section {name} is described but has no typed form in this table");
        };
        let in_description: BTreeSet<&str> = def
            .fields
            .iter()
            .map(|f| f.name)
            .filter(|n| !form.consumed.contains(n))
            .collect();
        assert_eq!(
            in_description, form.fields,
            "{name}: the description's fields (left) and the typed form's (right) differ"
        );
    }
    for (class, _) in &forms {
        assert!(
            described.iter().any(|d| short(d.class) == *class),
            "{class} has a typed form but the description never produces it"
        );
    }
}

#[test]
fn every_sections_smallest_input_deserialises_into_its_typed_form() {
    let forms = typed_forms();
    let ctx = Ctx {
        resolve_root: "/".into(),
        checks: crate::PathChecks::Lenient,
        logtarget_arg: crate::LogTargetArg::default(),
    };
    for def in described_objects() {
        let name = short(def.class);
        let Some(form) = form_of(&forms, def) else {
            continue; // reported by the test above
        };
        let Value::Object(input) = &form.minimal else {
            panic!("{name}: the smallest input is not an object");
        };
        let normalized = match map_object(def, input, "", &ctx) {
            Ok(normalized) => normalized,
            Err(e) => panic!("{name}: {} is refused: {e:?}", form.minimal),
        };
        if let Err(e) = (form.accepts)(normalized.clone()) {
            panic!("{name}: its normalized form {normalized} does not deserialise: {e}");
        }
    }
}

#[test]
fn addresses_keep_each_names_addresses_in_document_order() {
    let raw = serde_json::json!({"local-data": {"addresses": {
        "b.example": ["192.0.2.1", "2001:db8::1"],
        "a.example": "192.0.2.2",
        "příklad.example": "192.0.2.3",
    }}});
    let ctx = crate::ValidationContext {
        resolve_root: "/".into(),
        checks: crate::PathChecks::Lenient,
        logtarget_arg: crate::LogTargetArg::Given(crate::LogTarget::Stdout),
    };
    let cfg = crate::validate(&raw, &ctx).expect("valid");
    let pairs = cfg.local_data.addresses.expect("addresses");
    let ip = |s: &str| s.parse::<std::net::IpAddr>().expect("an address");
    let read: Vec<(&str, &[std::net::IpAddr])> = pairs.iter().collect();
    assert_eq!(
        read,
        [
            ("b.example", &[ip("192.0.2.1"), ip("2001:db8::1")][..]),
            ("a.example", &[ip("192.0.2.2")][..]),
            ("xn--pklad-zsa96e.example", &[ip("192.0.2.3")][..]),
        ]
    );
    assert_eq!(pairs.address_count(), 4);
}

#[test]
fn a_subscribed_list_is_a_url_beside_no_transfer_and_its_options_need_the_url() {
    let ctx = crate::ValidationContext {
        resolve_root: "/".into(),
        checks: crate::PathChecks::Lenient,
        logtarget_arg: crate::LogTargetArg::Given(crate::LogTarget::Stdout),
    };
    let validate = |entry: serde_json::Value| {
        crate::validate(&serde_json::json!({"local-data": {"rpz": [entry]}}), &ctx)
    };
    let cfg = validate(serde_json::json!({
        "file": "/var/rpz/ads.rpz", "url": "https://lists.example/ads.txt", "format": "adblock",
        "refresh": "1h", "max-size": "10M", "sha256": "ab".repeat(32),
        "action-override": "nodata",
    }))
    .expect("valid");
    let rpz = &cfg.local_data.rpz.expect("rpz")[0];
    assert_eq!(rpz.url.as_deref(), Some("https://lists.example/ads.txt"));
    assert_eq!(rpz.format, Some(super::ListFormat::Adblock));
    assert_eq!(rpz.action_override, Some(super::ActionOverride::Nodata));
    assert_eq!(rpz.max_size.as_ref().map(|s| s.bytes()), Some(10 << 20));
    let refused = |entry: serde_json::Value| {
        let errors = validate(entry).expect_err("refused").0;
        (errors[0].path.clone(), errors[0].message.clone())
    };
    let (path, message) = refused(serde_json::json!({
        "file": "/var/rpz/a.rpz", "url": "http://lists.example/a",
        "transfer": {"zone": "a.rpz.", "primaries": ["192.0.2.53"]},
    }));
    assert_eq!(path, "/local-data/rpz/0/url");
    assert!(
        message.contains("'url' and 'transfer' cannot both be set"),
        "{message}"
    );
    let (path, message) = refused(serde_json::json!({"file": "/var/rpz/a.rpz", "format": "hosts"}));
    assert_eq!(path, "/local-data/rpz/0/format");
    assert!(message.contains("needs 'url'"), "{message}");
    let (path, message) =
        refused(serde_json::json!({"file": "/var/rpz/a.rpz", "url": "ftp://x/a"}));
    assert_eq!(path, "/local-data/rpz/0/url");
    assert!(
        message.contains("not an http:// or https:// URL"),
        "{message}"
    );
    let (path, message) = refused(serde_json::json!({
        "file": "/var/rpz/a.rpz", "url": "https://x/a", "sha256": "abc",
    }));
    assert_eq!(path, "/local-data/rpz/0/sha256");
    assert!(message.contains("64 hex digits"), "{message}");
    let (path, _) = refused(serde_json::json!({
        "file": "/var/rpz/a.rpz", "url": "https://x/a", "action-override": "drop",
    }));
    assert_eq!(path, "/local-data/rpz/0/action-override");
}
