//! The overlay rule, row by row: what runs, what a fleet-wide write may not change, and what
//! the node overrides.

use serde_json::{json, Value};

use super::*;

/// Rows of (what, shared, local, running).
fn check_overlay(rows: &[(&str, Value, Value, Value)]) {
    for (what, shared, local, running) in rows {
        assert_eq!(&overlay(shared, local), running, "row: {what}");
    }
}

#[test]
fn the_nodes_file_wins_where_it_sets_something() {
    check_overlay(&[
        ("nothing at all", Value::Null, Value::Null, json!({})),
        (
            "no local file: the fleet's document",
            json!({"cache": {"size-max": "1G"}, "workers": 4}),
            Value::Null,
            json!({"cache": {"size-max": "1G"}}),
        ),
        (
            "no shared document: the local file",
            Value::Null,
            json!({"rundir": "/run/kr", "cache": {"size-max": "1G"}}),
            json!({"rundir": "/run/kr", "cache": {"size-max": "1G"}}),
        ),
        (
            "mappings merge key by key, at any depth",
            json!({"cache": {"size-max": "1G", "prefetch": {"expiring": true}}}),
            json!({"cache": {"ttl-min": "1s", "prefetch": {"prediction": {"enable": true}}}}),
            json!({"cache": {
                "size-max": "1G",
                "prefetch": {"expiring": true, "prediction": {"enable": true}},
                "ttl-min": "1s",
            }}),
        ),
        (
            "a scalar replaces",
            json!({"cache": {"size-max": "1G"}}),
            json!({"cache": {"size-max": "2G"}}),
            json!({"cache": {"size-max": "2G"}}),
        ),
        (
            "a list replaces whole, never merged item by item",
            json!({"forward": [{"subtree": "a.", "servers": ["192.0.2.1"]}, {"subtree": "b.", "servers": ["192.0.2.2"]}]}),
            json!({"forward": [{"subtree": "c.", "servers": ["192.0.2.3"]}]}),
            json!({"forward": [{"subtree": "c.", "servers": ["192.0.2.3"]}]}),
        ),
        (
            "a null the file sets replaces (the default applies)",
            json!({"views": [{"subnets": ["10.0.0.0/8"], "answer": "refused"}]}),
            json!({"views": null}),
            json!({"views": null}),
        ),
        (
            "a mapping over a scalar replaces it",
            json!({"dnssec": false}),
            json!({"dnssec": {"log-bogus": true}}),
            json!({"dnssec": {"log-bogus": true}}),
        ),
        (
            "a scalar over a mapping replaces it",
            json!({"lua": {"script": "-- x"}}),
            json!({"lua": null}),
            json!({"lua": null}),
        ),
        (
            "an empty mapping in the file changes nothing",
            json!({"cache": {"size-max": "1G"}}),
            json!({"cache": {}}),
            json!({"cache": {"size-max": "1G"}}),
        ),
        (
            "a shared document that is no mapping counts as empty",
            json!(["not", "a", "mapping"]),
            json!({"nsid": "a"}),
            json!({"nsid": "a"}),
        ),
    ]);
}

#[test]
fn node_local_keys_are_the_nodes_whatever_the_fleet_says() {
    check_overlay(&[
        (
            "every node-local key of the shared document is dropped",
            json!({
                "rundir": "/run/fleet",
                "management": {"interface": "127.0.0.1@5000"},
                "fleet": {"node": "other"},
                "hostname": "fleet",
                "nsid": "fleet",
                "workers": 8,
                "network": {
                    "listen": [{"interface": "192.0.2.1"}],
                    "out-interface-v4": "192.0.2.1",
                    "out-interface-v6": "2001:db8::1",
                    "tcp-pipeline": 50,
                },
                "cache": {"storage": "/srv/cache", "size-max": "1G"},
                "logging": {"target": "syslog", "level": "info"},
            }),
            Value::Null,
            json!({
                "network": {"tcp-pipeline": 50},
                "cache": {"size-max": "1G"},
                "logging": {"level": "info"},
            }),
        ),
        (
            "the file's own values of them run",
            json!({"network": {"listen": [{"interface": "192.0.2.1"}], "tcp-pipeline": 50}, "workers": 8}),
            json!({"network": {"listen": [{"interface": "127.0.0.1"}]}, "workers": "auto"}),
            json!({"network": {"tcp-pipeline": 50, "listen": [{"interface": "127.0.0.1"}]}, "workers": "auto"}),
        ),
        (
            "a node-local key below a shared scalar: nothing to drop",
            json!({"network": 5}),
            Value::Null,
            json!({"network": 5}),
        ),
    ]);
}

#[test]
fn the_running_configuration_of_a_node_validates_like_its_own_file() {
    let shared = json!({
        "rundir": "/nonexistent/fleet",
        "workers": 1000,
        "cache": {"size-max": "200M"},
        "local-data": {"addresses": {"a.example": "192.0.2.1"}},
    });
    let local = json!({
        "rundir": "/run/knot-resolver",
        "fleet": {"node": "ns1", "etcd": {"endpoints": ["http://127.0.0.1:2379"], "prefix": "/kr/f"}},
    });
    let ctx = crate::ValidationContext {
        resolve_root: "/etc/knot-resolver".into(),
        checks: crate::PathChecks::Lenient,
        logtarget_arg: crate::LogTargetArg::default(),
    };
    let cfg = crate::validate(&overlay(&shared, &local), &ctx).expect("valid");
    assert_eq!(
        cfg.workers, 1,
        "the fleet's 1000 workers are not this node's"
    );
    assert_eq!(cfg.rundir, std::path::PathBuf::from("/run/knot-resolver"));
    assert_eq!(cfg.cache.size_max.mbytes(), 200);
    assert_eq!(cfg.fleet.map(|f| f.node).as_deref(), Some("ns1"));
}

#[test]
fn pinned_paths_name_what_pins_them() {
    let local = json!({
        "cache": {"size-max": "2G", "prefetch": {}},
        "forward": [{"subtree": "a.", "servers": ["192.0.2.1"]}],
        "views": null,
        "lua": {"a/b": {"c~d": 1}},
    });
    let rows: &[(&str, Option<&str>)] = &[
        ("", None),
        ("/cache", None),
        ("/cache/size-max", Some("/cache/size-max")),
        ("/cache/ttl-min", None),
        ("/cache/prefetch", None),
        ("/cache/prefetch/expiring", None),
        ("/forward", Some("/forward")),
        ("/forward/0/subtree", Some("/forward")),
        ("/views", Some("/views")),
        ("/views/0", Some("/views")),
        ("/lua/a~1b/c~0d", Some("/lua/a~1b/c~0d")),
        ("/lua/a~1b", None),
        ("/local-data/addresses", None),
        // node-local, whether the file sets them or not
        ("/rundir", Some("/rundir")),
        ("/management/interface", Some("/management")),
        ("/fleet/etcd/endpoints/0", Some("/fleet")),
        ("/network", None),
        ("/network/tcp-pipeline", None),
        ("/network/listen", Some("/network/listen")),
        ("/network/listen/0/interface", Some("/network/listen")),
        ("/network/listening", None),
        ("/cache/storage", Some("/cache/storage")),
        ("/workers", Some("/workers")),
        // not a JSON pointer
        ("cache/size-max", None),
    ];
    for (pointer, pinned) in rows {
        assert_eq!(
            pinned_by(&local, pointer).as_deref(),
            *pinned,
            "pointer {pointer:?}"
        );
    }
    assert_eq!(pinned_by(&Value::Null, "/cache/size-max"), None);
    assert_eq!(pinned_by(&Value::Null, "/nsid"), Some("/nsid".into()));
}

#[test]
fn shadowed_lists_where_the_fleets_value_does_not_run() {
    let rows: &[(&str, Value, Value, &[&str])] = &[
        ("nothing shared", Value::Null, json!({"nsid": "a"}), &[]),
        (
            "nothing local but node-local keys",
            json!({"nsid": "f", "network": {"listen": [], "tcp-pipeline": 1}, "cache": {"size-max": "1G"}}),
            Value::Null,
            &["/nsid", "/network/listen"],
        ),
        (
            "local values over shared ones, equal or not, in the shared document's order",
            json!({
                "forward": [{"subtree": "a."}],
                "cache": {"size-max": "1G", "ttl-min": "1s", "prefetch": {"expiring": true}},
                "dnssec": {"log-bogus": true},
            }),
            json!({
                "cache": {"ttl-min": "1s", "size-max": "2G", "prefetch": {}},
                "forward": null,
                "dnssec": false,
            }),
            &["/forward", "/cache/size-max", "/cache/ttl-min", "/dnssec"],
        ),
        (
            "a local mapping over a shared scalar",
            json!({"lua": 1}),
            json!({"lua": {"script": "-- x"}}),
            &["/lua"],
        ),
        (
            "keys only the local file has shadow nothing",
            json!({"cache": {"size-max": "1G"}}),
            json!({"cache": {"ttl-max": "1d"}, "views": null}),
            &[],
        ),
        (
            "escaped keys",
            json!({"lua": {"a/b": {"c~d": 1}}}),
            json!({"lua": {"a/b": {"c~d": 2}}}),
            &["/lua/a~1b/c~0d"],
        ),
    ];
    for (what, shared, local, expected) in rows {
        assert_eq!(shadowed(shared, local), *expected, "row: {what}");
    }
}

#[test]
fn the_schema_names_every_node_local_key() {
    let schema = crate::json_schema();
    let description = schema["properties"]["fleet"]["description"]
        .as_str()
        .expect("described");
    for pointer in NODE_LOCAL {
        let key = &pointer[1..];
        assert!(
            description.contains(&format!(" {key},")) || description.contains(&format!(" {key} ")),
            "{key} is not named in: {description}"
        );
    }
}

#[test]
fn every_node_local_key_is_a_key_of_the_schema() {
    let schema = crate::json_schema();
    for pointer in NODE_LOCAL {
        let schema_pointer: String = segments(pointer)
            .iter()
            .map(|s| format!("/properties/{s}"))
            .collect();
        assert!(
            schema.pointer(&schema_pointer).is_some(),
            "{pointer} is not in the schema"
        );
    }
}

#[test]
fn what_the_nodes_file_sets_is_listed_leaf_by_leaf() {
    let local = json!({
        "workers": 4,
        "cache": {"storage": "/var/cache/a", "size-max": "1G"},
        "network": {"listen": [{"interface": "127.0.0.1"}]},
        "management": {"unix-socket": "/run/a"},
        "a/b": {"c~d": null},
    });
    assert_eq!(
        set_by(&local, 100),
        [
            "/workers",
            "/cache/storage",
            "/cache/size-max",
            "/network/listen",
            "/management",
            "/a~1b/c~0d"
        ]
    );
    assert_eq!(set_by(&local, 2), ["/workers", "/cache/storage"], "bounded");
    assert!(set_by(&json!(null), 10).is_empty());
}
