//! Three `strobe broker` processes on a private etcd and a shared directory:
//! every broker answers a lookup with the same owner, the owner serves the
//! topic, a non-owner refuses it with `ServiceNotReady` (so a stale client
//! looks up again), and a dead owner's topics move once its lease expires.
//! The official client's view of the same cluster is in
//! `tests/conformance/test_cluster.py`.
#![cfg(feature = "cluster")]

mod common;

use std::time::{Duration, Instant};

use common::RawClient;
use common::cluster::{Etcd, Member, TTL_SECS};
use strobe_wire::proto::ServerError;
use strobe_wire::proto::command_lookup_topic_response::LookupType;
use strobe_wire::{Command as Cmd, commands};

async fn lookup(port: u16, topic: &str) -> (LookupType, String) {
    let mut c = RawClient::handshake(port).await;
    c.send(commands::lookup_topic(1, topic, false)).await;
    match c.recv().await.map(|f| f.command) {
        Some(Cmd::LookupResponse(r)) => (
            r.response(),
            r.broker_service_url.clone().unwrap_or_default(),
        ),
        other => panic!("expected a LOOKUP_RESPONSE, got {other:?}"),
    }
}

/// The owner's URL once every live broker gives the same answer.
async fn agreed_owner(members: &[&Member], topic: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut answers = std::collections::BTreeSet::new();
        for m in members {
            let (kind, url) = lookup(m.port, topic).await;
            assert_eq!(
                kind,
                LookupType::Connect,
                "lookups answer Connect with the owner's URL"
            );
            answers.insert(url);
        }
        if answers.len() == 1 {
            return answers.pop_first().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "no agreement on {topic}: {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// PRODUCER on `port`: Ok on success, the server error otherwise.
async fn create_producer(port: u16, topic: &str) -> Result<(), (ServerError, String)> {
    let mut c = RawClient::handshake(port).await;
    c.send(commands::producer(1, 1, topic, None)).await;
    loop {
        match c.recv().await.map(|f| f.command) {
            Some(Cmd::ProducerSuccess(_)) => return Ok(()),
            Some(Cmd::Error(e)) => return Err((e.error(), e.message.clone())),
            Some(_) => continue,
            None => panic!("connection closed"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_agree_owners_serve_and_a_dead_owners_topics_move() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("shared")).unwrap();
    let etcd = Etcd::start(dir.path());
    let mut members: Vec<Member> = ["a", "b", "c"]
        .iter()
        .map(|id| Member::start(id, &etcd, dir.path()))
        .collect();
    let all: Vec<&Member> = members.iter().collect();

    // Topics spread over bundles: every broker gives the same owner for each,
    // and the bundles do not all land on one broker.
    let mut owners = std::collections::BTreeMap::new();
    for i in 0..16 {
        let topic = format!("persistent://public/default/spread-{i}");
        owners.insert(topic.clone(), agreed_owner(&all, &topic).await);
    }
    let distinct: std::collections::BTreeSet<&String> = owners.values().collect();
    assert!(distinct.len() >= 2, "every bundle went to {distinct:?}");

    // The owner serves a topic; the others refuse it with ServiceNotReady.
    let (topic, owner_url) = owners.iter().next().unwrap();
    for m in &members {
        let r = create_producer(m.port, topic).await;
        if &m.url() == owner_url {
            assert_eq!(r, Ok(()), "the owner {} serves {topic}", m.id);
        } else {
            let (code, msg) = r.expect_err("a non-owner refuses");
            assert_eq!(code, ServerError::ServiceNotReady, "{msg}");
            assert!(msg.contains("not served by this broker"), "{msg}");
        }
    }

    // kill -9 of that owner: once its lease is gone another broker owns the
    // topic and serves it.
    let i = members.iter().position(|m| &m.url() == owner_url).unwrap();
    let mut dead = members.remove(i);
    let killed = Instant::now();
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    let rest: Vec<&Member> = members.iter().collect();
    let new_owner = loop {
        let url = agreed_owner(&rest, topic).await;
        if &url != owner_url {
            break url;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(TTL_SECS + 10),
            "the topic never moved"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let port = rest.iter().find(|m| m.url() == new_owner).unwrap().port;
    create_producer(port, topic)
        .await
        .expect("the new owner serves the topic");
    eprintln!(
        "a dead owner's topic moved after {:.2} s (lease TTL {TTL_SECS} s)",
        killed.elapsed().as_secs_f64()
    );
}
