//! The shared suite: every backend must pass every case here, unchanged.
//!
//! Each case is a generic `async fn(Arc<dyn MetadataStore>)`; the `suite!` macro instantiates all
//! of them for one backend factory. The etcd instantiation (feature `etcd`) needs a real etcd at
//! `ETCD_ENDPOINTS` and fails, not skips, without it.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use strobe_metadata::tc::{self, TcLeader, TcMember, TcMemberConfig};
use strobe_metadata::{
    Batcher, Counter, EventKind, Expect, LeaderElection, LeaderState, MetadataError, MetadataStore,
    Op, OpResult, PrefixCache, ResourceLock, Session, SessionOptions, SessionState,
};
use tokio::time::Instant;

type Store = Arc<dyn MetadataStore>;

/// The TTL every coordination case uses; etcd's minimum lease TTL is about 2 s.
const TTL: Duration = Duration::from_secs(2);

fn session_opts() -> SessionOptions {
    SessionOptions::with_ttl(TTL)
}

async fn session(store: &Store) -> Arc<Session> {
    Arc::new(Session::start(store.clone(), session_opts()).await.unwrap())
}

// ------------------------------------------------------------------------------------------------
// Key-value

async fn get_put_versions(s: Store) {
    assert_eq!(s.get("/a").await.unwrap(), None);
    let st1 = s.put("/a", b"one", Expect::Any).await.unwrap();
    assert_eq!(st1.created, st1.version);
    assert!(!st1.is_ephemeral());
    let got = s.get("/a").await.unwrap().unwrap();
    assert_eq!(got.value, b"one");
    assert_eq!(got.stat, st1);
    let st2 = s.put("/a", b"two", Expect::Any).await.unwrap();
    assert!(st2.version > st1.version, "versions grow");
    assert_eq!(st2.created, st1.created, "creation revision is kept");
    assert!(s.exists("/a").await.unwrap());
    assert!(!s.exists("/b").await.unwrap());
    // Values are bytes, empty included.
    s.put("/empty", b"", Expect::Absent).await.unwrap();
    assert_eq!(s.get("/empty").await.unwrap().unwrap().value, b"");
}

async fn cas_semantics(s: Store) {
    let st = s.put("/k", b"v1", Expect::Absent).await.unwrap();
    match s.put("/k", b"x", Expect::Absent).await {
        Err(MetadataError::AlreadyExists(k)) => assert_eq!(k, "/k"),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    match s.put("/k", b"x", Expect::Version(st.version + 100)).await {
        Err(MetadataError::BadVersion {
            key,
            expected,
            found,
        }) => {
            assert_eq!(
                (key.as_str(), expected, found),
                ("/k", st.version + 100, st.version)
            );
        }
        other => panic!("expected BadVersion, got {other:?}"),
    }
    match s.put("/missing", b"x", Expect::Version(1)).await {
        Err(MetadataError::NotFound(k)) => assert_eq!(k, "/missing"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    let st2 = s
        .put("/k", b"v2", Expect::Version(st.version))
        .await
        .unwrap();
    assert_eq!(s.get("/k").await.unwrap().unwrap().value, b"v2");
    // The old version no longer matches.
    assert!(matches!(
        s.put("/k", b"v3", Expect::Version(st.version)).await,
        Err(MetadataError::BadVersion { .. })
    ));
    assert_eq!(
        s.get("/k").await.unwrap().unwrap().stat.version,
        st2.version
    );
}

async fn delete_semantics(s: Store) {
    assert!(matches!(
        s.delete("/d", None).await,
        Err(MetadataError::NotFound(_))
    ));
    let st = s.put("/d", b"x", Expect::Any).await.unwrap();
    assert!(matches!(
        s.delete("/d", Some(st.version + 1)).await,
        Err(MetadataError::BadVersion { .. })
    ));
    s.delete("/d", Some(st.version)).await.unwrap();
    assert_eq!(s.get("/d").await.unwrap(), None);
    s.put("/d", b"y", Expect::Absent).await.unwrap();
    s.delete("/d", None).await.unwrap();
    // Re-created keys get a new creation revision.
    let st3 = s.put("/d", b"z", Expect::Absent).await.unwrap();
    assert!(st3.created > st.created);
}

async fn children_and_scan(s: Store) {
    for k in [
        "/ns/a",
        "/ns/b/x",
        "/ns/b/y",
        "/ns/c/d/e",
        "/nsx",
        "/other/z",
    ] {
        s.put(k, k.as_bytes(), Expect::Any).await.unwrap();
    }
    assert_eq!(s.list_children("/ns").await.unwrap(), vec!["a", "b", "c"]);
    assert_eq!(s.list_children("/ns/").await.unwrap(), vec!["a", "b", "c"]);
    assert_eq!(s.list_children("/ns/b").await.unwrap(), vec!["x", "y"]);
    assert_eq!(
        s.list_children("/ns/a").await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        s.list_children("/nope").await.unwrap(),
        Vec::<String>::new()
    );
    let root: BTreeSet<String> = s.list_children("/").await.unwrap().into_iter().collect();
    assert!(
        root.is_superset(
            &["ns", "nsx", "other"]
                .iter()
                .map(|s| s.to_string())
                .collect()
        )
    );
    let scan = s.scan_prefix("/ns/").await.unwrap();
    let keys: Vec<&str> = scan.entries.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, vec!["/ns/a", "/ns/b/x", "/ns/b/y", "/ns/c/d/e"]);
    assert_eq!(scan.entries[0].value, b"/ns/a");
    assert!(scan.revision >= scan.entries.iter().map(|kv| kv.stat.version).max().unwrap());
    assert_eq!(
        s.list_keys("/ns").await.unwrap().len(),
        5,
        "plain string prefix includes /nsx"
    );
}

async fn invalid_paths(s: Store) {
    for bad in ["", "a", "/", "/a/", "//a", "/a//b", "/a\nb"] {
        assert!(
            matches!(
                s.put(bad, b"x", Expect::Any).await,
                Err(MetadataError::InvalidPath { .. })
            ),
            "{bad:?} must be refused"
        );
    }
    assert!(matches!(
        s.scan_prefix("x").await,
        Err(MetadataError::InvalidPath { .. })
    ));
    assert!(matches!(
        s.txn(vec![Op::put("/a", "1"), Op::put("/a", "2")]).await,
        Err(MetadataError::InvalidTxn(_))
    ));
    assert!(matches!(
        s.txn(vec![]).await,
        Err(MetadataError::InvalidTxn(_))
    ));
}

async fn multi_key_txn(s: Store) {
    let a = s.put("/t/a", b"a0", Expect::Any).await.unwrap();
    let b = s.put("/t/b", b"b0", Expect::Any).await.unwrap();
    let resp = s
        .txn(vec![
            Op::put_if("/t/a", "a1", Expect::Version(a.version)),
            Op::delete("/t/b", Some(b.version)),
            Op::put_if("/t/c", "c1", Expect::Absent),
            Op::check("/t/none", Expect::Absent),
        ])
        .await
        .unwrap();
    assert_eq!(resp.results.len(), 4);
    let OpResult::Put(sa) = resp.results[0] else {
        panic!()
    };
    let OpResult::Put(sc) = resp.results[2] else {
        panic!()
    };
    assert_eq!(sa.version, resp.revision);
    assert_eq!(
        sc.version, resp.revision,
        "one revision for the whole transaction"
    );
    assert_eq!(sa.created, a.created);
    assert_eq!(resp.results[1], OpResult::Delete);
    assert_eq!(resp.results[3], OpResult::Check);
    assert_eq!(s.get("/t/b").await.unwrap(), None);

    // A failing check anywhere aborts everything, and the error names it.
    let before = s.scan_prefix("/t/").await.unwrap().entries;
    let err = s
        .txn(vec![
            Op::put("/t/a", "a2"),
            Op::put_if("/t/d", "d", Expect::Absent),
            Op::check("/t/c", Expect::Version(sc.version + 7)),
        ])
        .await
        .unwrap_err();
    match err {
        MetadataError::BadVersion { key, .. } => assert_eq!(key, "/t/c"),
        other => panic!("expected BadVersion on /t/c, got {other:?}"),
    }
    assert_eq!(
        s.scan_prefix("/t/").await.unwrap().entries,
        before,
        "nothing applied"
    );
    // A check-only transaction writes nothing.
    let r = s
        .txn(vec![Op::check("/t/a", Expect::Version(sa.version))])
        .await
        .unwrap();
    assert_eq!(r.results, vec![OpResult::Check]);
}

/// Concurrent writers' transactions, straight to the store (the embedded store writes them as
/// one group) and through a [`Batcher`] (sent as one): each gets the answer it would have had
/// alone. Of many CASes on one key, exactly one wins; a failing check fails only its own.
async fn concurrent_txns_answer_as_alone(s: Store) {
    let fence = s.put("/g/fence", b"f", Expect::Any).await.unwrap();
    let batcher = Arc::new(Batcher::new(s.clone(), 128));
    for through_batcher in [false, true] {
        let tag = if through_batcher { "b" } else { "s" };
        let shared = s
            .put(&format!("/g/{tag}/shared"), b"0", Expect::Absent)
            .await
            .unwrap();
        let mut tasks = Vec::new();
        for i in 0..40u64 {
            let (s, b) = (s.clone(), batcher.clone());
            let ops = match i % 4 {
                // A CAS on the one shared key: one wins.
                0 => vec![Op::put_if(
                    format!("/g/{tag}/shared"),
                    i.to_string(),
                    Expect::Version(shared.version),
                )],
                // A wrong expectation: fails alone.
                1 => vec![
                    Op::check("/g/fence", Expect::Version(fence.version)),
                    Op::put_if(format!("/g/{tag}/k{i}"), "x", Expect::Version(1)),
                ],
                // Fenced puts of keys of their own.
                _ => vec![
                    Op::check("/g/fence", Expect::Version(fence.version)),
                    Op::put_if(format!("/g/{tag}/k{i}"), i.to_string(), Expect::Absent),
                    Op::put(format!("/g/{tag}/j{i}"), "y"),
                ],
            };
            tasks.push(tokio::spawn(async move {
                if through_batcher {
                    b.txn(ops).await
                } else {
                    s.txn(ops).await
                }
            }));
        }
        let mut cas_won = 0;
        for (i, t) in tasks.into_iter().enumerate() {
            let r = t.await.unwrap();
            match i % 4 {
                0 => match r {
                    Ok(resp) => {
                        cas_won += 1;
                        assert!(matches!(resp.results[..], [OpResult::Put(_)]));
                    }
                    Err(MetadataError::BadVersion { key, .. }) => {
                        assert_eq!(key, format!("/g/{tag}/shared"))
                    }
                    Err(e) => panic!("{tag} {i}: {e}"),
                },
                1 => assert!(
                    matches!(r, Err(MetadataError::NotFound(ref k)) if *k == format!("/g/{tag}/k{i}")),
                    "{tag} {i}: {r:?}"
                ),
                _ => {
                    let resp = r.unwrap_or_else(|e| panic!("{tag} {i}: {e}"));
                    let [OpResult::Check, OpResult::Put(a), OpResult::Put(b)] = resp.results[..]
                    else {
                        panic!("{tag} {i}: {:?}", resp.results)
                    };
                    assert_eq!((a.version, b.version), (resp.revision, resp.revision));
                    let got = s.get(&format!("/g/{tag}/k{i}")).await.unwrap().unwrap();
                    assert_eq!((got.value, got.stat), (i.to_string().into_bytes(), a));
                }
            }
        }
        assert_eq!(cas_won, 1, "{tag}: exactly one CAS on the shared key");
    }
    // A moved fence fails every fenced write of a group.
    s.put("/g/fence", b"moved", Expect::Any).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..10 {
        let b = batcher.clone();
        tasks.push(tokio::spawn(async move {
            b.txn(vec![
                Op::check("/g/fence", Expect::Version(fence.version)),
                Op::put(format!("/g/late{i}"), "z"),
            ])
            .await
        }));
    }
    for t in tasks {
        assert!(matches!(
            t.await.unwrap(),
            Err(MetadataError::BadVersion { .. })
        ));
    }
    assert!(s.scan_prefix("/g/late").await.unwrap().entries.is_empty());
}

async fn watch_events(s: Store) {
    s.put("/w/pre", b"0", Expect::Any).await.unwrap();
    let scan = s.scan_prefix("/w/").await.unwrap();
    let mut w = s.watch("/w/", scan.revision + 1).await.unwrap();
    let c = s.put("/w/a", b"1", Expect::Absent).await.unwrap();
    s.put("/outside", b"x", Expect::Any).await.unwrap();
    let m = s
        .put("/w/a", b"2", Expect::Version(c.version))
        .await
        .unwrap();
    s.delete("/w/a", Some(m.version)).await.unwrap();
    let t = s
        .txn(vec![
            Op::put("/w/x", "x"),
            Op::put("/w/y", "y"),
            Op::put("/z", "z"),
        ])
        .await
        .unwrap();

    let mut got = Vec::new();
    while got.len() < 4 {
        let b = tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .expect("watch event in time")
            .expect("stream open")
            .expect("no error");
        got.push(b);
    }
    assert_eq!(got[0].revision, c.version);
    assert_eq!(got[0].events[0].kind, EventKind::Created);
    assert_eq!(got[0].events[0].value.as_deref(), Some(&b"1"[..]));
    assert_eq!(got[0].events[0].stat.unwrap().version, c.version);
    assert_eq!(got[1].events[0].kind, EventKind::Modified);
    assert_eq!(got[1].events[0].value.as_deref(), Some(&b"2"[..]));
    assert_eq!(got[2].events[0].kind, EventKind::Deleted);
    assert_eq!(got[2].events[0].key, "/w/a");
    assert_eq!(got[2].events[0].value, None);
    assert_eq!(got[3].revision, t.revision);
    let keys: Vec<&str> = got[3].events.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(
        keys,
        vec!["/w/x", "/w/y"],
        "one batch per transaction, filtered by prefix"
    );
    // Nothing else is pending.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), w.next())
            .await
            .is_err()
    );
}

async fn watch_resume_from_revision(s: Store) {
    let start = s.scan_prefix("/r/").await.unwrap().revision + 1;
    let mut revs = Vec::new();
    for i in 0..10 {
        revs.push(
            s.put(&format!("/r/{i}"), b"v", Expect::Any)
                .await
                .unwrap()
                .version,
        );
    }
    // A late watcher asking from an old revision gets exactly the history from there.
    let mut w = s.watch("/r/", start).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 10 {
        let b = tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push(b.revision);
    }
    assert_eq!(seen, revs);
    drop(w);
    // Resuming from the middle neither misses nor repeats.
    let mut w = s.watch("/r/", revs[6]).await.unwrap();
    for i in 10..13 {
        revs.push(
            s.put(&format!("/r/{i}"), b"v", Expect::Any)
                .await
                .unwrap()
                .version,
        );
    }
    let mut seen = Vec::new();
    while seen.len() < 7 {
        let b = tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push(b.revision);
    }
    assert_eq!(seen, revs[6..].to_vec());
    // Watching "from now" sees only later writes.
    let mut w = s.watch("/r/", 0).await.unwrap();
    let last = s.put("/r/late", b"v", Expect::Any).await.unwrap();
    let b = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(b.revision, last.version);
}

// ------------------------------------------------------------------------------------------------
// Leases, sessions, ephemeral keys

async fn ephemeral_keys(s: Store) {
    let sess = session(&s).await;
    let lease = sess.require_lease().unwrap();
    let st = s
        .put_ephemeral("/eph/a", b"1", Expect::Absent, lease)
        .await
        .unwrap();
    assert_eq!(st.lease, Some(lease));
    s.put("/eph/persistent", b"p", Expect::Any).await.unwrap();
    assert_eq!(
        s.get("/eph/a").await.unwrap().unwrap().stat.lease,
        Some(lease)
    );
    let rev = s.scan_prefix("/eph/").await.unwrap().revision;
    let mut w = s.watch("/eph/", rev + 1).await.unwrap();
    // Keep-alives hold it past the TTL.
    tokio::time::sleep(TTL + Duration::from_millis(800)).await;
    assert!(s.exists("/eph/a").await.unwrap(), "kept alive");
    assert!(sess.is_alive());
    sess.close().await.unwrap();
    assert_eq!(sess.state(), SessionState::Closed);
    assert!(
        !s.exists("/eph/a").await.unwrap(),
        "closing the session deletes its keys"
    );
    assert!(s.exists("/eph/persistent").await.unwrap());
    let b = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(b.events[0].kind, EventKind::Deleted);
    assert_eq!(b.events[0].key, "/eph/a");
    // A put bound to a dead lease is refused.
    assert!(matches!(
        s.put_ephemeral("/eph/b", b"1", Expect::Any, lease).await,
        Err(MetadataError::SessionExpired)
    ));
    // A raw lease that is not kept alive expires with its keys.
    let g = s.grant_lease(TTL).await.unwrap();
    s.put_ephemeral("/eph/raw", b"1", Expect::Any, g.id)
        .await
        .unwrap();
    let gone = common::eventually(TTL + Duration::from_secs(2), async || {
        !s.exists("/eph/raw").await.unwrap()
    })
    .await;
    assert!(gone, "an expired lease's keys vanish within TTL + 1 s");
    assert_eq!(s.keep_alive(g.id).await.unwrap(), None);
    s.revoke_lease(g.id).await.unwrap();
}

/// Keep-alives stop (a partition): the session declares itself lost strictly before the server
/// deletes its keys, and then re-establishes with a new epoch once keep-alives flow again.
async fn session_loss_precedes_expiry(s: Store) {
    let sess = session(&s).await;
    let (lease, epoch) = sess.lease().unwrap();
    s.put_ephemeral("/sl/k", b"1", Expect::Any, lease)
        .await
        .unwrap();
    let mut w = s.watch("/sl/", 0).await.unwrap();
    sess.pause_keepalives(true);
    let paused = Instant::now();
    let mut lost_at = None;
    let mut deleted_at = None;
    while deleted_at.is_none() && paused.elapsed() < TTL + Duration::from_secs(3) {
        if lost_at.is_none() && !sess.is_alive() {
            lost_at = Some(Instant::now());
        }
        if let Ok(Some(Ok(b))) = tokio::time::timeout(Duration::from_millis(5), w.next()).await
            && b.events.iter().any(|e| e.kind == EventKind::Deleted)
        {
            deleted_at = Some(Instant::now());
        }
    }
    let lost_at = lost_at.expect("session declared lost");
    let deleted_at = deleted_at.expect("server expired the lease");
    assert!(
        lost_at < deleted_at,
        "local loss must come before the server's expiry"
    );
    assert!(
        deleted_at - paused <= TTL + Duration::from_secs(1),
        "expiry within TTL + 1 s"
    );
    assert_eq!(sess.state(), SessionState::Lost { epoch });
    sess.pause_keepalives(false);
    let mut rx = sess.subscribe();
    let st = tokio::time::timeout(
        Duration::from_secs(5),
        rx.wait_for(|s| matches!(s, SessionState::Alive { .. })),
    )
    .await
    .unwrap()
    .unwrap()
    .to_owned();
    match st {
        SessionState::Alive {
            lease: l2,
            epoch: e2,
        } => {
            assert_ne!(l2, lease);
            assert_eq!(e2, epoch + 1);
        }
        other => panic!("{other:?}"),
    }
    assert!(sess.is_alive_in(epoch + 1));
    sess.close().await.unwrap();
}

// ------------------------------------------------------------------------------------------------
// Coordination

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Cand {
    name: String,
}

fn cand(name: &str) -> Cand {
    Cand { name: name.into() }
}

async fn election_basics(s: Store) {
    let s1 = session(&s).await;
    let s2 = session(&s).await;
    let e1 = LeaderElection::new(&s1, "/el/leader", cand("one")).unwrap();
    let e2 = LeaderElection::new(&s2, "/el/leader", cand("two")).unwrap();
    assert_eq!(e1.state(), LeaderState::NoLeader);
    e1.campaign();
    e1.wait_for(Duration::from_secs(5), LeaderState::is_leading)
        .await
        .unwrap();
    e2.campaign();
    let st = e2
        .wait_for(Duration::from_secs(5), |s| {
            matches!(s, LeaderState::Following { .. })
        })
        .await
        .unwrap();
    assert_eq!(
        st,
        LeaderState::Following {
            leader: Some(cand("one")),
            version: e1_version(&e1)
        }
    );
    assert!(e1.is_leader() && !e2.is_leader());
    let (who, stat) = e2.leader().await.unwrap().unwrap();
    assert_eq!(who, cand("one"));
    assert_eq!(stat.lease, Some(s1.require_lease().unwrap()));
    // The fence works in a transaction only for the leader.
    let fence = e1.fence().unwrap();
    s.txn(vec![fence.clone(), Op::put("/el/data", "by-leader")])
        .await
        .unwrap();
    assert!(e2.fence().is_err());
    // Resign: the other takes over at once.
    e1.resign().await.unwrap();
    assert!(!e1.is_leader());
    e2.wait_for(Duration::from_secs(5), LeaderState::is_leading)
        .await
        .unwrap();
    // The old fence no longer holds.
    assert!(
        s.txn(vec![fence, Op::put("/el/data", "stale")])
            .await
            .is_err()
    );
    assert_eq!(
        s.get("/el/data").await.unwrap().unwrap().value,
        b"by-leader"
    );
    // Re-campaign: follows the new leader.
    e1.campaign();
    let st = e1
        .wait_for(Duration::from_secs(5), |s| {
            matches!(s, LeaderState::Following { .. })
        })
        .await
        .unwrap();
    assert!(matches!(st, LeaderState::Following { leader: Some(ref c), .. } if c.name == "two"));
    // Deleting the key (an operator) triggers a new election, which someone wins.
    s.delete("/el/leader", None).await.unwrap();
    let ok = common::eventually(Duration::from_secs(5), async || {
        e1.is_leader() ^ e2.is_leader()
    })
    .await;
    assert!(ok, "exactly one leader after the key was deleted");
    e1.resign().await.unwrap();
    e2.resign().await.unwrap();
    s1.close().await.unwrap();
    s2.close().await.unwrap();
}

fn e1_version(e: &LeaderElection<Cand>) -> u64 {
    match e.state() {
        LeaderState::Leading { version, .. } => version,
        other => panic!("not leading: {other:?}"),
    }
}

/// The leader's keep-alives stop: it stops acting as leader before its key expires, another
/// candidate takes over within TTL + 1 s, and the old leader follows after re-establishing.
async fn election_takeover_on_session_loss(s: Store) {
    let s1 = session(&s).await;
    let s2 = session(&s).await;
    let e1 = LeaderElection::new(&s1, "/elx/leader", cand("one")).unwrap();
    let e2 = LeaderElection::new(&s2, "/elx/leader", cand("two")).unwrap();
    e1.campaign();
    e1.wait_for(Duration::from_secs(5), LeaderState::is_leading)
        .await
        .unwrap();
    e2.campaign();
    e2.wait_for(Duration::from_secs(5), |s| {
        matches!(s, LeaderState::Following { .. })
    })
    .await
    .unwrap();

    s1.pause_keepalives(true);
    let paused = Instant::now();
    let mut stopped_at = None;
    let mut took_over_at = None;
    while took_over_at.is_none() && paused.elapsed() < TTL + Duration::from_secs(3) {
        if stopped_at.is_none() && !e1.is_leader() {
            stopped_at = Some(Instant::now());
        }
        if e2.is_leader() {
            took_over_at = Some(Instant::now());
            assert!(!e1.is_leader(), "two leaders at once");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stopped_at = stopped_at.expect("old leader stopped");
    let took_over_at = took_over_at.expect("new leader within the deadline");
    assert!(
        stopped_at < took_over_at,
        "old leader stops before the new one starts"
    );
    assert!(
        took_over_at - paused <= TTL + Duration::from_secs(1),
        "takeover after {:?}",
        took_over_at - paused
    );
    s1.pause_keepalives(false);
    let st = e1
        .wait_for(Duration::from_secs(6), |s| {
            matches!(s, LeaderState::Following { .. })
        })
        .await
        .unwrap();
    assert!(matches!(st, LeaderState::Following { leader: Some(ref c), .. } if c.name == "two"));
    // If the new leader goes away, the re-established candidate takes over again.
    e2.resign().await.unwrap();
    e1.wait_for(Duration::from_secs(5), LeaderState::is_leading)
        .await
        .unwrap();
    e1.resign().await.unwrap();
    s1.close().await.unwrap();
    s2.close().await.unwrap();
}

async fn resource_lock(s: Store) {
    let s1 = session(&s).await;
    let s2 = session(&s).await;
    let mut l1 = ResourceLock::acquire(&s1, "/locks/bundle-1", cand("one"))
        .await
        .unwrap();
    assert!(l1.is_held());
    match ResourceLock::acquire(&s2, "/locks/bundle-1", cand("two")).await {
        Err(MetadataError::LockBusy(p)) => assert_eq!(p, "/locks/bundle-1"),
        other => panic!("expected LockBusy, got {other:?}"),
    }
    assert_eq!(
        ResourceLock::<Cand>::owner(&*s, "/locks/bundle-1")
            .await
            .unwrap(),
        Some(cand("one"))
    );
    l1.update(cand("one-b")).await.unwrap();
    assert_eq!(
        ResourceLock::<Cand>::owner(&*s, "/locks/bundle-1")
            .await
            .unwrap(),
        Some(cand("one-b"))
    );
    s.txn(vec![l1.fence().unwrap(), Op::put("/locks/data", "x")])
        .await
        .unwrap();
    l1.release().await.unwrap();
    let l2 = ResourceLock::acquire(&s2, "/locks/bundle-1", cand("two"))
        .await
        .unwrap();
    // Losing the session loses the lock, before the key expires on the server.
    s2.pause_keepalives(true);
    tokio::time::timeout(TTL + Duration::from_secs(1), l2.lost())
        .await
        .expect("lock lost in time");
    assert!(!l2.is_held());
    assert!(l2.fence().is_err());
    let ok = common::eventually(TTL + Duration::from_secs(2), async || {
        ResourceLock::acquire(&s1, "/locks/bundle-1", cand("one"))
            .await
            .is_ok()
    })
    .await;
    assert!(ok, "the lock is free once the lease expired");
    s1.close().await.unwrap();
}

async fn counter_is_monotonic_and_unique(s: Store) {
    let c = Counter::new(s.clone(), "/txn/tc-seq/0").unwrap();
    assert_eq!(c.next().await.unwrap(), 0);
    assert_eq!(c.next().await.unwrap(), 1);
    assert_eq!(c.next_batch(5).await.unwrap(), 2..7);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let mut v = Vec::new();
            for _ in 0..15 {
                v.push(c.next().await.unwrap());
            }
            v
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let v = t.await.unwrap();
        assert!(v.windows(2).all(|w| w[0] < w[1]), "monotonic per caller");
        all.extend(v);
    }
    all.sort();
    assert_eq!(
        all,
        (7..67).collect::<Vec<_>>(),
        "no value twice, none skipped"
    );
}

async fn prefix_cache(s: Store) {
    s.put("/cache/a", b"1", Expect::Any).await.unwrap();
    let cache = PrefixCache::start(s.clone(), "/cache/").await.unwrap();
    assert_eq!(
        cache.snapshot().entries.len(),
        1,
        "loaded before start returns"
    );
    s.txn(vec![Op::put("/cache/b", "2"), Op::put("/cache/c", "3")])
        .await
        .unwrap();
    s.delete("/cache/a", None).await.unwrap();
    let snap = cache
        .wait_for(Duration::from_secs(5), |c| {
            !c.entries.contains_key("/cache/a")
        })
        .await
        .unwrap();
    let keys: Vec<&str> = snap.entries.keys().map(String::as_str).collect();
    assert_eq!(keys, vec!["/cache/b", "/cache/c"]);
    let direct = s.scan_prefix("/cache/").await.unwrap();
    assert_eq!(snap.entries.len(), direct.entries.len());
    // Every published snapshot is a transaction boundary: b and c appear together.
    let mut rx = cache.subscribe();
    s.txn(vec![Op::put("/cache/x", "x"), Op::put("/cache/y", "y")])
        .await
        .unwrap();
    loop {
        rx.changed().await.unwrap();
        let snap = rx.borrow_and_update().clone();
        assert_eq!(
            snap.entries.contains_key("/cache/x"),
            snap.entries.contains_key("/cache/y")
        );
        if snap.entries.contains_key("/cache/x") {
            break;
        }
    }
}

// ------------------------------------------------------------------------------------------------
// PIP-473

fn tc_config(id: &str, parallelism: u32) -> TcMemberConfig {
    TcMemberConfig {
        leader: TcLeader {
            broker_id: id.into(),
            broker_service_url: format!("pulsar://{id}:6650"),
            broker_service_url_tls: Some(format!("pulsar+ssl://{id}:6651")),
            listeners: Vec::new(),
        },
        parallelism,
        session: session_opts(),
        campaign: None,
    }
}

async fn tc_parallelism_is_fixed(s: Store) {
    assert_eq!(tc::ensure_parallelism(&*s, 16).await.unwrap(), 16);
    assert_eq!(tc::ensure_parallelism(&*s, 16).await.unwrap(), 16);
    let err = TcMember::start(s.clone(), tc_config("b9", 8))
        .await
        .unwrap_err();
    match &err {
        MetadataError::ParallelismMismatch {
            configured,
            stored,
            path,
        } => {
            assert_eq!(
                (*configured, *stored, path.as_str()),
                (8, 16, tc::PARALLELISM_PATH)
            );
        }
        other => panic!("expected a mismatch, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("8") && text.contains("16"),
        "names both values: {text}"
    );
}

async fn tc_elections_converge(s: Store) {
    const P: u32 = 8;
    let m1 = TcMember::start(s.clone(), tc_config("b1", P))
        .await
        .unwrap();
    let m2 = TcMember::start(s.clone(), tc_config("b2", P))
        .await
        .unwrap();
    let m3 = TcMember::start(s.clone(), tc_config("b3", P))
        .await
        .unwrap();
    let full = m3
        .view()
        .wait_for(Duration::from_secs(5), |a| a.is_complete())
        .await
        .unwrap();
    assert_eq!(full.parallelism, P);
    // Exactly one leader per partition (a winner learns it won when its put returns, which can
    // be a moment after the view saw the key), and the view agrees with the elections.
    let one_each = common::eventually(Duration::from_secs(2), async || {
        (0..P).all(|n| [&m1, &m2, &m3].iter().filter(|m| m.is_leader(n)).count() == 1)
    })
    .await;
    assert!(one_each, "exactly one leader per partition");
    for n in 0..P {
        let id = &full.leaders[n as usize].as_ref().unwrap().broker_id;
        let m = [&m1, &m2, &m3]
            .into_iter()
            .find(|m| m.is_leader(n))
            .unwrap();
        assert_eq!(
            &m.election(n).unwrap().value().broker_id,
            id,
            "view agrees on {n}"
        );
    }
    let l0 = full.leaders[0].clone().unwrap();
    assert!(l0.broker_service_url.starts_with("pulsar://b"));
    assert!(
        l0.broker_service_url_tls
            .as_deref()
            .unwrap()
            .starts_with("pulsar+ssl://b")
    );

    // The broker leading partition 0 dies (keep-alives stop). Watch every snapshot m3 publishes:
    // a partition led by a live broker is never missing, and the table converges on survivors.
    let victim = [&m1, &m2].into_iter().find(|m| m.is_leader(0));
    let (victim, survivors): (&TcMember, Vec<&TcMember>) = match victim {
        Some(v) => (
            v,
            [&m1, &m2, &m3]
                .into_iter()
                .filter(|m| !std::ptr::eq(*m, v))
                .collect(),
        ),
        None => (&m3, vec![&m1, &m2]),
    };
    let victim_id = victim.election(0).unwrap().value().broker_id.clone();
    let observer = survivors[0];
    let mut rx = observer.view().subscribe();
    let mut prev = rx.borrow_and_update().clone();
    victim.session().pause_keepalives(true);
    let killed = Instant::now();
    let converged = loop {
        assert!(
            killed.elapsed() < TTL + Duration::from_secs(2),
            "no convergence; last {prev:?}"
        );
        if tokio::time::timeout(Duration::from_millis(200), rx.changed())
            .await
            .is_err()
        {
            continue;
        }
        let cur = rx.borrow_and_update().clone();
        for n in 0..P as usize {
            if let Some(l) = &prev.leaders[n]
                && l.broker_id != victim_id
            {
                assert!(
                    cur.leaders[n].is_some(),
                    "partition {n} with a live leader went missing"
                );
            }
        }
        prev = cur.clone();
        if cur.is_complete() && cur.count_led_by(&victim_id) == 0 {
            break killed.elapsed();
        }
    };
    assert!(
        converged <= TTL + Duration::from_secs(1),
        "converged after {converged:?}"
    );
    let one_each = common::eventually(Duration::from_secs(2), async || {
        (0..P).all(|n| survivors.iter().filter(|m| m.is_leader(n)).count() == 1)
    })
    .await;
    assert!(
        one_each,
        "exactly one surviving leader per partition after the failover"
    );
    for m in survivors {
        // Both survivors publish the same table.
        let t = m
            .view()
            .wait_for(Duration::from_secs(2), |a| {
                a.is_complete() && a.count_led_by(&victim_id) == 0
            })
            .await;
        assert!(t.is_ok(), "every survivor converges");
    }
    m1.shutdown().await.unwrap();
    m2.shutdown().await.unwrap();
    m3.shutdown().await.unwrap();
}

macro_rules! suite {
    ($name:ident, $factory:path) => {
        mod $name {
            use super::*;
            suite!(@cases $factory;
                get_put_versions, cas_semantics, delete_semantics, children_and_scan,
                invalid_paths, multi_key_txn, concurrent_txns_answer_as_alone, watch_events, watch_resume_from_revision,
                ephemeral_keys, session_loss_precedes_expiry, election_basics,
                election_takeover_on_session_loss, resource_lock, counter_is_monotonic_and_unique,
                prefix_cache, tc_parallelism_is_fixed, tc_elections_converge);
        }
    };
    (@cases $factory:path; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                super::$case($factory().await).await;
            }
        )*
    };
}

suite!(embedded_memory, common::embedded_memory);
suite!(embedded_durable, common::embedded_durable);
#[cfg(feature = "etcd")]
suite!(etcd, common::etcd);
