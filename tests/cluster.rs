//! Three `strobe broker` processes on a private etcd and a shared directory:
//! every broker answers a lookup with the same owner, the owner serves the
//! topic, a non-owner refuses it with `ServiceNotReady` (so a stale client
//! looks up again), and a dead owner's topics move once its lease expires.
//! The official client's view of the same cluster is in
//! `tests/conformance/test_cluster.py`.
#![cfg(feature = "cluster")]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{RawClient, free_port};
use strobe_wire::proto::ServerError;
use strobe_wire::proto::command_lookup_topic_response::LookupType;
use strobe_wire::{Command as Cmd, commands};

const READY: &str = "strobe broker is ready";
const TTL_SECS: u64 = 3;

fn etcd_binary() -> String {
    for c in ["etcd", "/usr/bin/etcd", "/usr/local/bin/etcd"] {
        if Command::new(c)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return c.to_string();
        }
    }
    panic!("etcd is not installed: tests/run-all.sh installs Debian's etcd-server");
}

/// A private etcd, killed when dropped.
struct Etcd {
    child: Child,
    port: u16,
}

impl Etcd {
    fn start(dir: &std::path::Path) -> Etcd {
        let (port, peer) = (free_port(), free_port());
        let child = Command::new(etcd_binary())
            .args(["--name", "cluster-test", "--data-dir"])
            .arg(dir.join("etcd"))
            .args([
                "--listen-client-urls",
                &format!("http://127.0.0.1:{port}"),
                "--advertise-client-urls",
                &format!("http://127.0.0.1:{port}"),
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-cluster",
                &format!("cluster-test=http://127.0.0.1:{peer}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn etcd");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "etcd did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Etcd { child, port }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `strobe broker`, killed when dropped.
struct Member {
    id: String,
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Member {
    fn start(id: &str, etcd: &Etcd, dir: &std::path::Path) -> Member {
        let log = dir.join(format!("{id}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_strobe"))
            .args(["broker", "--metadata-store"])
            .arg(format!("etcd:http://127.0.0.1:{}", etcd.port))
            .arg("--storage")
            .arg(format!("file://{}", dir.join("shared").display()))
            .args(["--broker-id", id, "--cluster-name", "rust-cluster"])
            .arg("--data-dir")
            .arg(dir.join(id))
            .args(["--broker-port", "0", "--http-port", "0"])
            .args([
                "--bind-address",
                "127.0.0.1",
                "--advertised-address",
                "127.0.0.1",
            ])
            .args(["--metadata-session-timeout-secs", &TTL_SECS.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn strobe broker");
        let mut m = Member {
            id: id.to_string(),
            child,
            port: 0,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(&m.log).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.contains(READY)) {
                let addr = line
                    .split(" addr=")
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap();
                m.port = addr.rsplit(':').next().unwrap().parse().unwrap();
                return m;
            }
            if let Ok(Some(s)) = m.child.try_wait() {
                panic!("{id} exited ({s}): {text}");
            }
            assert!(Instant::now() < deadline, "{id} not ready: {text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn url(&self) -> String {
        format!("pulsar://127.0.0.1:{}", self.port)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
