//! The store client against a real three-member etcd on loopback (the test bed's
//! `etcd` module): compare-and-swap conflicts, watches from a revision and across
//! compaction, member and quorum loss, lease expiry, the value bound, and TLS with client
//! certificates. Steps wait on etcd's answers (a watch's events, health checks), never on
//! sleeps; the outer `hang` bound only catches a call that would never return.

use std::future::Future;
use std::time::Duration;

use kres_fleet::{
    Also, Change, ClientCert, Credentials, Entry, Error, Expect, Store, StoreOptions, TlsOptions,
    WatchEvent,
};
use testbed::etcd::{EtcdCluster, Security, HEALTHY_WITHIN};

/// The client's timeout in these tests: room for a loaded machine (tests run beside each
/// other, each with three members).
const TIMEOUT: Duration = Duration::from_secs(10);
/// The client's timeout where quorum loss is waited out: short, so it shows quickly.
const QUORUM_TIMEOUT: Duration = Duration::from_secs(3);

/// A bound for a call that must return (the client's own timeout is far shorter): past it
/// the call hung.
async fn hang<T>(what: &str, call: impl Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(30), call).await {
        Ok(v) => v,
        Err(_) => panic!("{what} hung"),
    }
}

fn store(cluster: &EtcdCluster) -> Store {
    let mut options = StoreOptions::new(cluster.endpoints());
    options.timeout = TIMEOUT;
    if let Some(tls) = cluster.client_tls() {
        options.tls = Some(TlsOptions {
            ca_file: tls.ca.clone(),
            client_cert: Some(ClientCert {
                cert_file: tls.cert.clone(),
                key_file: tls.key.clone(),
            }),
            server_name: None,
        });
    }
    Store::new(&options).expect("the options are valid")
}

/// Changes from `watch` until `n` have come.
async fn changes(watch: &mut kres_fleet::Watch, n: usize) -> Vec<Change> {
    let mut got = Vec::new();
    while got.len() < n {
        match hang("watch", watch.next()).await.expect("a watch event") {
            WatchEvent::Changed { changes } => got.extend(changes),
            other => panic!("expected changes, got {other:?}"),
        }
    }
    got
}

#[tokio::test]
async fn a_compare_and_swap_loses_to_a_newer_revision() {
    let cluster = EtcdCluster::start(Security::Plain).unwrap();
    let store = store(&cluster);
    let key = b"/fleet/doc";

    let empty = store.get(key).await.unwrap();
    assert_eq!(empty.entry, None);
    let r1 = store.put_if(key, b"one", Expect::Absent).await.unwrap();
    assert!(r1 > empty.revision);
    // Create-only again: the key exists now.
    match store.put_if(key, b"other", Expect::Absent).await {
        Err(Error::Conflict { current }) => assert_eq!(current, Some(r1)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let r2 = store
        .put_if(key, b"two", Expect::ModRevision(r1))
        .await
        .unwrap();
    assert!(r2 > r1);
    // A writer still holding r1 loses, and learns the revision to read again.
    let lost = store.put_if(key, b"stale", Expect::ModRevision(r1)).await;
    match &lost {
        Err(Error::Conflict { current }) => assert_eq!(*current, Some(r2)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(lost.unwrap_err().to_string().contains(&r2.to_string()));
    let read = store.get(key).await.unwrap();
    assert_eq!(
        read.entry,
        Some(Entry {
            value: b"two".to_vec(),
            mod_revision: r2
        })
    );
    assert!(read.revision >= r2);
    // Deleted behind the writer's back: the conflict says the key is absent.
    cluster.etcdctl(&["del", "/fleet/doc"]).unwrap();
    match store.put_if(key, b"three", Expect::ModRevision(r2)).await {
        Err(Error::Conflict { current }) => assert_eq!(current, None),
        other => panic!("expected a conflict, got {other:?}"),
    }

    // Other keys written with it, in its transaction: at its revision, and only when the
    // comparison holds.
    let side = b"/fleet/doc-side";
    let gone = b"/fleet/doc-gone";
    store.put_if(gone, b"x", Expect::Absent).await.unwrap();
    let r3 = store
        .put_if_with(
            key,
            b"four",
            Expect::Absent,
            &[Also::Put(side, b"s"), Also::Delete(gone)],
        )
        .await
        .unwrap();
    let side_entry = store
        .get(side)
        .await
        .unwrap()
        .entry
        .expect("written with it");
    assert_eq!(
        (side_entry.value.as_slice(), side_entry.mod_revision),
        (&b"s"[..], r3)
    );
    assert_eq!(
        store.get(gone).await.unwrap().entry,
        None,
        "deleted with it"
    );
    match store
        .put_if_with(
            key,
            b"five",
            Expect::ModRevision(r2),
            &[Also::Put(side, b"t")],
        )
        .await
    {
        Err(Error::Conflict { current }) => assert_eq!(current, Some(r3)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let side_entry = store.get(side).await.unwrap().entry.expect("still there");
    assert_eq!(
        side_entry.value, b"s",
        "nothing of a lost transaction is written"
    );
}

#[tokio::test]
async fn a_watch_gives_changes_from_a_revision_and_reports_compaction() {
    let cluster = EtcdCluster::start(Security::Plain).unwrap();
    let store = store(&cluster);
    let r1 = store
        .put_if(b"/fleet/a", b"1", Expect::Absent)
        .await
        .unwrap();
    let r2 = store
        .put_if(b"/fleet/a", b"2", Expect::ModRevision(r1))
        .await
        .unwrap();
    store.put_if(b"/other", b"x", Expect::Absent).await.unwrap();
    let r3 = store
        .put_if(b"/fleet/b", b"3", Expect::Absent)
        .await
        .unwrap();

    // From r2: the change at r1 is before it, the one outside the prefix is not ours.
    let mut watch = store.watch(b"/fleet/", r2);
    let got = changes(&mut watch, 2).await;
    assert_eq!(
        got,
        vec![
            Change::Put {
                key: b"/fleet/a".to_vec(),
                value: b"2".to_vec(),
                mod_revision: r2
            },
            Change::Put {
                key: b"/fleet/b".to_vec(),
                value: b"3".to_vec(),
                mod_revision: r3
            },
        ]
    );
    // Changes made after the watch opened come on it, a deletion as such.
    cluster.etcdctl(&["del", "/fleet/a"]).unwrap();
    let deleted = changes(&mut watch, 1).await;
    assert!(
        matches!(&deleted[..], [Change::Deleted { key, mod_revision }]
            if key == b"/fleet/a" && *mod_revision > r3),
        "{deleted:?}"
    );

    // Compacted past r2: a watch from r2 is told so, with the compaction's revision.
    let at = store.get(b"/fleet/b").await.unwrap().revision;
    cluster.etcdctl(&["compact", &at.to_string()]).unwrap();
    let mut old = store.watch(b"/fleet/", r2);
    assert_eq!(
        hang("watch", old.next()).await.unwrap(),
        WatchEvent::Compacted {
            compact_revision: at
        }
    );
    // Read again and watch from there: changes come.
    let fresh = store.get(b"/fleet/b").await.unwrap();
    let mut watch = store.watch(b"/fleet/", fresh.revision + 1);
    let r4 = store
        .put_if(b"/fleet/b", b"4", Expect::ModRevision(r3))
        .await
        .unwrap();
    assert_eq!(changes(&mut watch, 1).await[0].mod_revision(), r4);
}

#[tokio::test]
async fn members_lost_then_quorum_lost_then_back() {
    let mut cluster = EtcdCluster::start(Security::Plain).unwrap();
    // The client prefers a follower (its first endpoint): killed, the call goes on to
    // the others.
    let leader = cluster.leader().unwrap();
    let follower = (leader + 1) % 3;
    let third = (leader + 2) % 3;
    let mut options = StoreOptions::new(
        [follower, leader, third]
            .map(|i| cluster.endpoint(i))
            .to_vec(),
    );
    options.timeout = QUORUM_TIMEOUT;
    let store = Store::new(&options).unwrap();
    let key = b"/fleet/doc";
    let r1 = store.put_if(key, b"one", Expect::Absent).await.unwrap();
    let mut watch = store.watch(b"/fleet/", r1 + 1);
    // The watch's stream is open on the follower.
    let r2 = store
        .put_if(key, b"two", Expect::ModRevision(r1))
        .await
        .unwrap();
    assert_eq!(changes(&mut watch, 1).await[0].mod_revision(), r2);

    cluster.kill(follower).unwrap();
    let r3 = hang(
        "put_if",
        store.put_if(key, b"three", Expect::ModRevision(r2)),
    )
    .await
    .unwrap();
    assert_eq!(
        store.get(key).await.unwrap().entry.map(|e| e.value),
        Some(b"three".to_vec())
    );
    // The watch lost its member: it resumes on another from where it was.
    assert_eq!(changes(&mut watch, 1).await[0].mod_revision(), r3);

    // The leader gone too: no quorum. Writes and reads fail within the client's timeout,
    // saying so.
    cluster.kill(leader).unwrap();
    let refused = hang(
        "put_if",
        store.put_if(key, b"four", Expect::ModRevision(r3)),
    )
    .await;
    match &refused {
        Err(Error::Timeout { call, after, last }) => {
            assert_eq!((*call, *after), ("put_if", QUORUM_TIMEOUT));
            assert!(!last.is_empty());
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(refused
        .unwrap_err()
        .to_string()
        .starts_with("put_if: no etcd endpoint took the call within 3s"));
    assert!(matches!(
        hang("get", store.get(key)).await,
        Err(Error::Timeout { call: "range", .. })
    ));

    // Quorum back: the same client writes again, and the watch resumes from where it was.
    cluster.restart(follower).unwrap();
    cluster.restart(leader).unwrap();
    cluster.wait_healthy(HEALTHY_WITHIN).unwrap();
    let r4 = hang(
        "put_if",
        store.put_if(key, b"four", Expect::ModRevision(r3)),
    )
    .await
    .unwrap();
    assert_eq!(changes(&mut watch, 1).await[0].mod_revision(), r4);
}

#[tokio::test]
async fn a_leased_record_goes_when_keep_alives_stop() {
    let cluster = EtcdCluster::start(Security::Plain).unwrap();
    let store = store(&cluster);
    let lease = store.grant_lease(Duration::from_secs(1)).await.unwrap();
    assert!(lease.ttl >= Duration::from_secs(1));
    let key = b"/fleet/nodes/n1";
    let written = store
        .put_with_lease(key, b"{\"revision\":1}", lease.id)
        .await
        .unwrap();
    let mut watch = store.watch(key, written + 1);
    // Renewed, it stays.
    let left = store.keep_alive(lease.id).await.unwrap();
    assert!(left > Duration::ZERO);
    assert!(store.get(key).await.unwrap().entry.is_some());
    // No more keep-alives: etcd deletes the record when the lease runs out.
    let gone = changes(&mut watch, 1).await;
    assert!(
        matches!(&gone[..], [Change::Deleted { key: k, .. }] if k == key),
        "{gone:?}"
    );
    assert_eq!(store.get(key).await.unwrap().entry, None);
    match store.keep_alive(lease.id).await {
        Err(Error::LeaseExpired { id }) => assert_eq!(id, lease.id),
        other => panic!("expected an expired lease, got {other:?}"),
    }
}

#[tokio::test]
async fn a_value_over_the_bound_is_refused_with_a_clear_error() {
    let cluster = EtcdCluster::start(Security::Plain).unwrap();
    let store = store(&cluster);
    assert_eq!(store.max_value_bytes(), 16 << 20);
    let key = b"/fleet/doc";
    let before = store.get(key).await.unwrap().revision;
    // 20 MiB written straight into etcd (its request bound raised for it).
    let huge = vec![b'x'; 20 << 20];
    cluster.put_raw(2, key, &huge).unwrap();
    drop(huge);

    let refused = store.get(key).await.unwrap_err();
    assert!(
        matches!(&refused, Error::TooLarge { limit, .. } if *limit > 16 << 20 && *limit < 22 << 20),
        "{refused:?}"
    );
    let text = refused.to_string();
    assert!(text.starts_with("range of /fleet/doc: over "), "{text}");
    // A watch that meets it says the same.
    let mut watch = store.watch(b"/fleet/", before + 1);
    assert!(matches!(
        hang("watch", watch.next()).await,
        Err(Error::TooLarge { .. })
    ));
    // Nor does the client write one.
    let too_big = vec![b'y'; (16 << 20) + 1];
    match store
        .put_if(b"/fleet/other", &too_big, Expect::Absent)
        .await
    {
        Err(Error::TooLarge { what, limit }) => {
            assert_eq!((what.as_str(), limit), ("value for /fleet/other", 16 << 20))
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A value at the bound passes.
    let at_bound = vec![b'z'; 16 << 20];
    let r = store
        .put_if(b"/fleet/other", &at_bound, Expect::Absent)
        .await
        .unwrap();
    let read = store.get(b"/fleet/other").await.unwrap().entry.unwrap();
    assert_eq!((read.value.len(), read.mod_revision), (16 << 20, r));
}

#[tokio::test]
async fn tls_with_client_certificates() {
    let cluster = EtcdCluster::start(Security::Tls).unwrap();
    assert!(cluster.endpoint(0).starts_with("https://"));
    let store = store(&cluster);
    let r1 = store
        .put_if(b"/fleet/doc", b"one", Expect::Absent)
        .await
        .unwrap();
    let mut watch = store.watch(b"/fleet/", r1);
    assert_eq!(changes(&mut watch, 1).await[0].mod_revision(), r1);
    assert_eq!(
        store.get(b"/fleet/doc").await.unwrap().entry.unwrap().value,
        b"one"
    );

    // Without a client certificate etcd will not talk to us: a clear failure, in time.
    let tls = cluster.client_tls().unwrap();
    let mut options = StoreOptions::new(cluster.endpoints());
    options.timeout = QUORUM_TIMEOUT;
    options.tls = Some(TlsOptions {
        ca_file: tls.ca.clone(),
        client_cert: None,
        server_name: None,
    });
    let anonymous = Store::new(&options).unwrap();
    let refused = hang("get", anonymous.get(b"/fleet/doc")).await.unwrap_err();
    assert!(
        refused.to_string().to_lowercase().contains("certificate"),
        "{refused}"
    );
    // Nor with a CA that did not sign etcd's certificate.
    options.tls = Some(TlsOptions {
        ca_file: tls.cert.clone(),
        client_cert: None,
        server_name: None,
    });
    let distrusting = Store::new(&options).unwrap();
    let refused = hang("get", distrusting.get(b"/fleet/doc"))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("TLS"), "{refused}");
}

#[tokio::test]
async fn a_user_and_password_get_a_token() {
    let cluster = EtcdCluster::start(Security::Plain).unwrap();
    cluster.etcdctl(&["user", "add", "root:rootpw"]).unwrap();
    cluster.etcdctl(&["auth", "enable"]).unwrap();
    let with = |password: Option<&str>| {
        let mut options = StoreOptions::new(cluster.endpoints());
        options.timeout = TIMEOUT;
        options.auth = password.map(|p| Credentials {
            username: "root".into(),
            password: p.into(),
        });
        Store::new(&options).unwrap()
    };

    let store = with(Some("rootpw"));
    let r1 = store
        .put_if(b"/fleet/doc", b"one", Expect::Absent)
        .await
        .unwrap();
    assert_eq!(
        store
            .get(b"/fleet/doc")
            .await
            .unwrap()
            .entry
            .unwrap()
            .mod_revision,
        r1
    );
    // The watch as a stream.
    let stream = store.watch(b"/fleet/", r1).into_stream();
    let mut stream = std::pin::pin!(stream);
    match hang("watch", futures_util::StreamExt::next(&mut stream)).await {
        Some(Ok(WatchEvent::Changed { changes })) => assert_eq!(changes[0].mod_revision(), r1),
        other => panic!("expected a change, got {other:?}"),
    }

    // Tokens dropped by etcd (auth turned off and on again): the client logs in again.
    cluster
        .etcdctl(&["--user=root:rootpw", "auth", "disable"])
        .unwrap();
    cluster.etcdctl(&["auth", "enable"]).unwrap();
    let r2 = store
        .put_if(b"/fleet/doc", b"two", Expect::ModRevision(r1))
        .await
        .unwrap();
    assert!(r2 > r1);

    // A wrong password and none at all: etcd's refusal, at once.
    for (store, says) in [
        (with(Some("wrong")), "authentication failed"),
        (with(None), "user name is empty"),
    ] {
        match hang("get", store.get(b"/fleet/doc")).await {
            Err(e @ Error::Server { .. }) => assert!(e.to_string().contains(says), "{e}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
