//! Out of file descriptors (issue 48): a broker at its open-files limit answers a topic that
//! cannot load with a clear, retryable error (PersistenceError naming the cause), logs it at
//! ERROR, keeps serving the topics it has (their journal too), and serves new topics again
//! once descriptors are free, without a restart. The limit is lowered on the running broker
//! with util-linux's `prlimit --pid` (it raised its soft limit to the hard one at start).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{RawClient, Strobe};
use strobe_client::Client;
use strobe_wire::proto::ServerError;
use strobe_wire::{Command as Cmd, commands};

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the broker's descriptors")
        .count()
}

/// Sets the broker's soft limit of open files (the hard one stays: raising it back would
/// need CAP_SYS_RESOURCE).
fn set_files_limit(pid: u32, n: usize) {
    let ok = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={n}:")])
        .status()
        .expect("prlimit (util-linux) runs");
    assert!(ok.success(), "prlimit --pid {pid} --nofile={n}:");
}

/// The broker's soft limit of open files.
fn files_limit(pid: u32) -> usize {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a limit of open files");
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_out_of_descriptors_says_so_keeps_serving_and_recovers() {
    let s = Strobe::start();
    let pid = s.child.id();
    let c = Client::builder(&format!("pulsar://127.0.0.1:{}", s.port))
        .operation_timeout(Duration::from_secs(15))
        .build()
        .await
        .expect("connect");
    let old = "persistent://public/default/fd-old";
    let p = c.producer(old).no_batching().create().await.unwrap();
    p.send_and_wait(b"before".to_vec()).await.unwrap();
    // One raw connection for the PRODUCER commands that must fail: its answer is the broker's
    // own (the client would retry it until its timeout).
    let mut raw = RawClient::handshake(s.port).await;

    let before = files_limit(pid);
    let limit = open_files(pid) + 30;
    set_files_limit(pid, limit);
    let mut refused = None;
    for i in 0..200u64 {
        let topic = format!("persistent://public/default/fd-{i}");
        raw.send(commands::producer(i, i, &topic, None)).await;
        let started = Instant::now();
        match raw.recv().await.map(|f| f.command) {
            Some(Cmd::ProducerSuccess(_)) => continue,
            Some(Cmd::Error(e)) => {
                assert!(started.elapsed() < Duration::from_secs(5), "answered late");
                refused = Some((i, e));
                break;
            }
            other => panic!("producer {i}: {other:?}"),
        }
    }
    let (at, e) = refused.expect("a topic beyond the limit is refused");
    assert_eq!(e.error(), ServerError::PersistenceError, "{e:?}");
    assert!(e.message.contains("Too many open files"), "{e:?}");
    println!("topic {at} refused at {limit} descriptors: {}", e.message);

    // What is loaded keeps working, its journal included.
    for i in 0..20 {
        p.send_and_wait(format!("during-{i}").into_bytes())
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s
        .log_text()
        .lines()
        .any(|l| l.contains("ERROR") && l.contains("out of file descriptors"))
    {
        assert!(
            Instant::now() < deadline,
            "no ERROR line:\n{}",
            s.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Descriptors free again: new topics load, no restart.
    set_files_limit(pid, before);
    let fresh = c
        .producer("persistent://public/default/fd-after")
        .no_batching()
        .create()
        .await
        .expect("a new topic once descriptors are free");
    fresh.send_and_wait(b"after".to_vec()).await.unwrap();
    p.send_and_wait(b"last".to_vec()).await.unwrap();

    // Nothing acknowledged is missing.
    let got =
        common::read_from_earliest(&c, old, "check", Duration::from_secs(3), usize::MAX).await;
    let mut want = vec!["before".to_string()];
    want.extend((0..20).map(|i| format!("during-{i}")));
    want.push("last".into());
    assert_eq!(got, want);
}
