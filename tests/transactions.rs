//! Transactions against a real `strobe standalone`, driven by our client (the official Python
//! client has no transactions API): visibility and Pulsar's ordering rule, abort, transactional
//! acks and their conflicts, timeouts, both discovery paths, and a kill -9 in the middle of a
//! transaction.

mod common;

use std::time::Duration;

use common::Strobe;
use strobe_client::proto::ServerError;
use strobe_client::{
    Client, Consumer, Error, InitialPosition, Producer, SubType, TC_ASSIGN_TOPIC, TcDiscovery,
};

const TTL: Duration = Duration::from_secs(60);
const QUIET: Duration = Duration::from_millis(700);

async fn client(s: &Strobe) -> Client {
    Client::builder(&format!("pulsar://127.0.0.1:{}", s.port))
        .operation_timeout(Duration::from_secs(15))
        .build()
        .await
        .expect("connect")
}

async fn producer(c: &Client, topic: &str) -> Producer {
    c.producer(topic).no_batching().create().await.unwrap()
}

async fn consumer(c: &Client, topic: &str, sub: &str, t: SubType) -> Consumer {
    c.consumer(topic, sub)
        .sub_type(t)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap()
}

async fn send(p: &Producer, body: &str) {
    p.send_and_wait(body.as_bytes().to_vec()).await.unwrap();
}

/// The payloads received until nothing comes for `QUIET`.
async fn drain(c: &mut Consumer) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(m) = c.recv_timeout(QUIET).await.unwrap() {
        out.push(String::from_utf8_lossy(&m.payload).into_owned());
        c.ack(&m).unwrap();
    }
    out
}

fn server_code(e: &Error) -> Option<ServerError> {
    match e {
        Error::Server { code, .. } => Some(*code),
        _ => None,
    }
}

#[tokio::test]
async fn commit_makes_sends_visible_in_log_order() {
    let s = Strobe::start();
    let c = client(&s).await;
    let topic = "persistent://public/default/txn-commit";
    let p = producer(&c, topic).await;
    let mut k = consumer(&c, topic, "s", SubType::Shared).await;
    send(&p, "m0").await;
    let txn = c.new_transaction(TTL).await.unwrap();
    txn.send(&p, "a").await.unwrap().await.unwrap();
    txn.send(&p, "b").await.unwrap().await.unwrap();
    // Sent after the open transaction's first message: withheld with it (Pulsar's
    // maxReadPosition), so the log's order stays the delivery order.
    send(&p, "m1").await;
    assert_eq!(drain(&mut k).await, ["m0"]);
    txn.commit().await.unwrap();
    assert_eq!(drain(&mut k).await, ["a", "b", "m1"]);
    // A retried commit answers the same; an abort after it is refused.
    txn.commit().await.unwrap();
    let e = txn.abort().await.unwrap_err();
    assert_eq!(server_code(&e), Some(ServerError::InvalidTxnStatus), "{e}");

    // The admin API and metrics see it.
    let (most, least) = txn.id();
    let (code, body) = s.http(
        "GET",
        &format!("/admin/v3/transactions/transactionMetadata/{most}/{least}"),
        "",
    );
    assert_eq!(code, 200, "{body}");
    let meta: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(meta["status"], "COMMITTED");
    assert!(meta["producedPartitions"].get(topic).is_some(), "{body}");
    let (code, body) = s.http("GET", "/admin/v3/transactions/coordinatorStats", "");
    assert_eq!(code, 200, "{body}");
    let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(stats.as_object().unwrap().len(), 16);
    assert!(
        stats
            .as_object()
            .unwrap()
            .values()
            .all(|c| c["state"] == "Ready")
    );
    let (code, body) = s.http(
        "GET",
        "/admin/v3/transactions/transactionBufferStats/public/default/txn-commit",
        "",
    );
    assert_eq!(code, 200, "{body}");
    let buffer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(buffer["committedTxnCount"], 1, "{body}");
    assert_eq!(buffer["ongoingTxnSize"], 0, "{body}");
    let (_, metrics) = s.http("GET", "/metrics", "");
    let committed: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("pulsar_txn_committed_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(committed, 1, "{metrics}");
    assert!(metrics.contains("pulsar_txn_tb_committed_total{"));
}

#[tokio::test]
async fn abort_hides_messages_from_consumers_and_readers() {
    let s = Strobe::start();
    let c = client(&s).await;
    let topic = "persistent://public/default/txn-abort";
    let p = producer(&c, topic).await;
    let mut k = consumer(&c, topic, "s", SubType::Exclusive).await;
    let txn = c.new_transaction(TTL).await.unwrap();
    txn.send(&p, "x").await.unwrap().await.unwrap();
    send(&p, "z0").await;
    txn.send(&p, "y").await.unwrap().await.unwrap();
    txn.abort().await.unwrap();
    send(&p, "z1").await;
    assert_eq!(drain(&mut k).await, ["z0", "z1"]);
    let mut r = c.reader(topic).start_earliest().create().await.unwrap();
    let mut seen = Vec::new();
    while let Some(m) = r.recv_timeout(QUIET).await.unwrap() {
        seen.push(String::from_utf8_lossy(&m.payload).into_owned());
    }
    assert_eq!(seen, ["z0", "z1"]);
    // With an aborted transaction's entry and its marker last in the log, the reader has
    // nothing more to read, and says so.
    let t2 = c.new_transaction(TTL).await.unwrap();
    t2.send(&p, "gone").await.unwrap().await.unwrap();
    t2.abort().await.unwrap();
    assert!(!r.has_message_available().await.unwrap());
    // A send in an ended transaction is refused.
    let e = txn.send(&p, "late").await.unwrap().await.unwrap_err();
    assert!(
        matches!(
            server_code(&e),
            Some(ServerError::InvalidTxnStatus | ServerError::TransactionConflict)
        ),
        "{e}"
    );
}

#[tokio::test]
async fn transactional_acks_conflict_commit_and_abort() {
    let s = Strobe::start();
    let c = client(&s).await;
    let topic = "persistent://public/default/txn-acks";
    let p = producer(&c, topic).await;
    for i in 0..3 {
        send(&p, &format!("m{i}")).await;
    }
    let mut k = consumer(&c, topic, "s", SubType::Shared).await;
    let m0 = k.recv().await.unwrap();
    let m1 = k.recv().await.unwrap();
    let m2 = k.recv().await.unwrap();
    let t1 = c.new_transaction(TTL).await.unwrap();
    let t2 = c.new_transaction(TTL).await.unwrap();
    t1.ack(&k, &m0, false).await.unwrap();
    let e = t2.ack(&k, &m0, false).await.unwrap_err();
    assert_eq!(
        server_code(&e),
        Some(ServerError::TransactionConflict),
        "{e}"
    );
    t2.ack(&k, &m1, false).await.unwrap();
    k.ack(&m2).unwrap();
    k.flush_acks();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Acking a message the subscription already acked is a conflict too.
    let t3 = c.new_transaction(TTL).await.unwrap();
    let e = t3.ack(&k, &m2, false).await.unwrap_err();
    assert_eq!(
        server_code(&e),
        Some(ServerError::TransactionConflict),
        "{e}"
    );
    t3.abort().await.unwrap();
    // Commit t1 (m0 acked for good), abort t2 (m1 delivered again).
    t1.commit().await.unwrap();
    t2.abort().await.unwrap();
    let again = k.recv_timeout(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        again.map(|m| String::from_utf8_lossy(&m.payload).into_owned()),
        Some("m1".to_string())
    );
    assert!(k.recv_timeout(QUIET).await.unwrap().is_none());
    // After a reconnect only m1 (acked by nobody) comes back.
    drop(k);
    let mut k = consumer(&c, topic, "s", SubType::Shared).await;
    assert_eq!(drain(&mut k).await, ["m1"]);
}

#[tokio::test]
async fn a_transaction_past_its_timeout_is_aborted() {
    let s = Strobe::start();
    let c = client(&s).await;
    let topic = "persistent://public/default/txn-timeout";
    let p = producer(&c, topic).await;
    let mut k = consumer(&c, topic, "s", SubType::Exclusive).await;
    let txn = c.new_transaction(Duration::from_millis(500)).await.unwrap();
    txn.send(&p, "never").await.unwrap().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let e = txn.commit().await.unwrap_err();
    assert_eq!(server_code(&e), Some(ServerError::InvalidTxnStatus), "{e}");
    send(&p, "after").await;
    assert_eq!(drain(&mut k).await, ["after"]);
}

#[tokio::test]
async fn coordinators_are_found_by_watch_and_by_the_assign_topic() {
    let s = Strobe::start();
    let c = client(&s).await;
    assert_eq!(c.tc_discovery().await.unwrap(), TcDiscovery::Watch);
    let leaders = c.tc_leaders().await.unwrap();
    assert_eq!(leaders.len(), 16);
    assert!(leaders.iter().all(Option::is_some), "{leaders:?}");
    // The legacy path: the assign topic's partitions, each looked up to its leader.
    assert_eq!(c.partitions(TC_ASSIGN_TOPIC).await.unwrap(), 16);
    let legacy = c.tc_leaders_via(TcDiscovery::AssignTopic).await.unwrap();
    assert_eq!(legacy, leaders);
    // Every partition serves transactions.
    for _ in 0..16 {
        let t = c.new_transaction(TTL).await.unwrap();
        t.commit().await.unwrap();
    }
}

#[tokio::test]
async fn a_kill_9_in_the_middle_of_a_transaction_loses_nothing() {
    let mut s = Strobe::start();
    let topic = "persistent://public/default/txn-kill";
    let (txn_id, c) = {
        let c = client(&s).await;
        let p = producer(&c, topic).await;
        let _k = consumer(&c, topic, "s", SubType::Exclusive).await;
        let txn = c.new_transaction(TTL).await.unwrap();
        txn.send(&p, "t0").await.unwrap().await.unwrap();
        txn.send(&p, "t1").await.unwrap().await.unwrap();
        send(&p, "plain").await;
        (txn, c)
    };
    s.signal("KILL");
    s.restart();
    // The transaction is still open on the restarted broker: nothing of it (and nothing
    // after it) is visible until it commits.
    let c2 = client(&s).await;
    let mut k = consumer(&c2, topic, "s", SubType::Exclusive).await;
    assert!(k.recv_timeout(QUIET).await.unwrap().is_none());
    txn_id.commit().await.unwrap();
    assert_eq!(drain(&mut k).await, ["t0", "t1", "plain"]);
    drop(c);
}

#[tokio::test]
async fn compaction_leaves_out_aborted_messages() {
    let s = Strobe::start();
    let c = client(&s).await;
    let topic = "persistent://public/default/txn-compact";
    let p = producer(&c, topic).await;
    let kept = strobe_client::ProducerMessage::new(b"v1".to_vec()).with_key("k");
    p.send_and_wait(kept).await.unwrap();
    let txn = c.new_transaction(TTL).await.unwrap();
    let dropped = strobe_client::ProducerMessage::new(b"v2".to_vec()).with_key("k");
    txn.send(&p, dropped).await.unwrap().await.unwrap();
    txn.abort().await.unwrap();
    let path = "/admin/v2/persistent/public/default/txn-compact/compaction";
    assert_eq!(s.http("PUT", path, "").0, 204);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = s.http("GET", path, "");
        if !body.contains("RUNNING") {
            assert!(body.contains("SUCCESS"), "{body}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "compaction still running"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut k = c
        .consumer(topic, "compacted")
        .read_compacted(true)
        .initial_position(InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let m = k
        .recv_timeout(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"v1");
    assert!(k.recv_timeout(QUIET).await.unwrap().is_none());
}

/// An aborted transaction's acks of messages inside a batch give them back
/// (before, only whole entries were delivered again and these stayed with
/// the consumer until it reconnected).
#[tokio::test]
async fn an_aborted_ack_inside_a_batch_delivers_the_message_again() {
    let s = Strobe::start();
    let c = client(&s).await;
    let topic = "persistent://public/default/txn-batch-abort";
    let p = c
        .producer(topic)
        .batching(Duration::from_millis(50), 10, 1 << 20)
        .create()
        .await
        .unwrap();
    let receipts: Vec<_> = futures_join(&p, 3).await;
    assert_eq!(receipts.len(), 3);
    let mut k = consumer(&c, topic, "s", SubType::Shared).await;
    let m0 = k.recv().await.unwrap();
    let m1 = k.recv().await.unwrap();
    let m2 = k.recv().await.unwrap();
    assert!(m1.id.batch_size > 1, "the three share a batch: {:?}", m1.id);
    let t = c.new_transaction(TTL).await.unwrap();
    t.ack(&k, &m1, false).await.unwrap();
    k.ack(&m0).unwrap();
    k.ack(&m2).unwrap();
    k.flush_acks();
    t.abort().await.unwrap();
    let again = k.recv_timeout(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        again.map(|m| String::from_utf8_lossy(&m.payload).into_owned()),
        Some("b1".to_string())
    );
}

async fn futures_join(p: &Producer, n: usize) -> Vec<strobe_client::MessageId> {
    let mut pending = Vec::new();
    for i in 0..n {
        pending.push(p.send(format!("b{i}").into_bytes()).await.unwrap());
    }
    let mut out = Vec::new();
    for f in pending {
        out.push(f.await.unwrap());
    }
    out
}

/// A transactional cumulative ack that ends inside a batch covers the
/// entries before it and the batch's indexes up to the message, no more: a
/// consumer that subscribes again after the commit gets the rest of the
/// batch. (It used to mark the whole entry deleted, and the fault
/// campaign's consume-transform-produce lost the rest of a batch each time
/// a later transaction failed and its transformer subscribed again.)
#[tokio::test]
async fn a_cumulative_ack_inside_a_batch_commits_only_what_it_covers() {
    let s = Strobe::start();
    let c = client(&s).await;
    let topic = "persistent://public/default/txn-cumulative-in-batch";
    let (k, got) = four_of_one_batch(&c, topic).await;
    let txn = c.new_transaction(TTL).await.unwrap();
    txn.ack(&k, &got[3], true).await.unwrap();
    txn.commit().await.unwrap();
    k.close().await.unwrap();
    let mut k = consumer(&c, topic, "s", SubType::Failover).await;
    assert_eq!(drain(&mut k).await, ["m4", "m5", "m6", "m7", "m8", "m9"]);
}

/// Sends `<prefix>0`..`<prefix>9` to `topic` as one batch, and waits for their receipts.
async fn ten_in_one_batch(c: &Client, topic: &str, prefix: &str) {
    let p = c
        .producer(topic)
        .batching(Duration::from_millis(200), 10, 1 << 20)
        .create()
        .await
        .unwrap();
    let mut receipts = Vec::new();
    for i in 0..10 {
        receipts.push(p.send(format!("{prefix}{i}").into_bytes()).await.unwrap());
    }
    for r in receipts {
        r.await.unwrap();
    }
}

/// A Failover consumer of subscription `s` on `topic`, and the first four
/// of ten messages (m0..m9) that went as one batch.
async fn four_of_one_batch(c: &Client, topic: &str) -> (Consumer, Vec<strobe_client::Message>) {
    let mut k = consumer(c, topic, "s", SubType::Failover).await;
    ten_in_one_batch(c, topic, "m").await;
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(k.recv_timeout(QUIET).await.unwrap().expect("a message"));
    }
    assert_eq!(got[3].id.batch_size, 10, "the ten went as one batch");
    (k, got)
}

/// Found by the fault campaign: a transformer's transaction acked its batch
/// cumulatively and failed; the client subscribed again before the abort
/// reached the subscription, and the new consumer was given the messages
/// after the ack. The abort then delivered the batch again behind them, and
/// the next transaction's cumulative ack, on the later messages, covered the
/// batch unprocessed: inputs acknowledged, missing from the output.
#[tokio::test]
async fn a_pending_cumulative_ack_holds_what_follows_from_another_consumer() {
    let s = Strobe::start();
    let c = client(&s).await;
    let topic = "persistent://public/default/txn-cumulative-handover";
    let mut a = consumer(&c, topic, "s", SubType::Failover).await;
    let p = producer(&c, topic).await;
    for i in 0..10 {
        send(&p, &format!("m{i}")).await;
    }
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(a.recv_timeout(QUIET).await.unwrap().expect("a message"));
    }
    let t1 = c.new_transaction(TTL).await.unwrap();
    t1.ack(&a, &got[4], true).await.unwrap();
    a.close().await.unwrap();
    let mut b = consumer(&c, topic, "s", SubType::Failover).await;
    // While t1 may still abort, nothing after its ack goes to another consumer.
    let early = b.recv_timeout(QUIET).await.unwrap();
    assert!(
        early.is_none(),
        "a consumer was given {:?} past a pending cumulative ack",
        early.map(|m| String::from_utf8_lossy(&m.payload).into_owned())
    );
    t1.abort().await.unwrap();
    let mut seen = Vec::new();
    let mut last = None;
    let mut wait = Duration::from_secs(10);
    while let Some(m) = b.recv_timeout(wait).await.unwrap() {
        seen.push(String::from_utf8_lossy(&m.payload).into_owned());
        last = Some(m);
        wait = QUIET;
    }
    let all: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    assert_eq!(
        seen, all,
        "after the abort, everything from the start, in order"
    );
    let t2 = c.new_transaction(TTL).await.unwrap();
    t2.ack(&b, &last.expect("messages"), true).await.unwrap();
    t2.commit().await.unwrap();
    b.close().await.unwrap();
    let mut k = consumer(&c, topic, "s", SubType::Failover).await;
    assert!(drain(&mut k).await.is_empty());
}

/// Found by the fault campaign: a transformer's transaction acked inside a
/// batch (its 200th message was the batch's first); its next transaction
/// failed and it subscribed again before the first committed. The batch's
/// entry was hidden while the ack was pending, the read moved past it, and
/// once the commit acked its first message the rest were never delivered.
#[tokio::test]
async fn the_rest_of_a_batch_acked_partly_in_a_pending_transaction_goes_to_the_next_consumer() {
    let s = Strobe::start();
    let c = client(&s).await;
    let topic = "persistent://public/default/txn-cumulative-in-batch-handover";
    let (a, got) = four_of_one_batch(&c, topic).await;
    let t1 = c.new_transaction(TTL).await.unwrap();
    t1.ack(&a, &got[3], true).await.unwrap();
    a.close().await.unwrap();
    let mut b = consumer(&c, topic, "s", SubType::Failover).await;
    assert!(
        b.recv_timeout(QUIET).await.unwrap().is_none(),
        "nothing of the batch while the transaction may still abort"
    );
    t1.commit().await.unwrap();
    let mut rest = Vec::new();
    let mut wait = Duration::from_secs(10);
    while let Some(m) = b.recv_timeout(wait).await.unwrap() {
        rest.push(String::from_utf8_lossy(&m.payload).into_owned());
        b.ack(&m).unwrap();
        wait = QUIET;
    }
    assert_eq!(rest, ["m4", "m5", "m6", "m7", "m8", "m9"]);
}

/// A consumer that acknowledged cumulatively in a transaction that aborts gets, next, the first
/// message the transaction had acknowledged, then the rest in order: what it held after it
/// (sent before the abort) is dropped and comes again (PIP-84's consumer epochs).
#[tokio::test]
async fn an_aborted_cumulative_ack_gives_back_what_the_consumer_holds_in_order() {
    let s = Strobe::start();
    let c = client(&s).await;
    let topic = "persistent://public/default/txn-cumulative-abort";
    let p = producer(&c, topic).await;
    for i in 0..10 {
        send(&p, &format!("m{i}")).await;
    }
    let mut k = consumer(&c, topic, "s", SubType::Failover).await;
    let mut first = Vec::new();
    for _ in 0..5 {
        first.push(k.recv().await.unwrap());
    }
    // m5 to m9 arrive meanwhile: sent before the abort.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = c.new_transaction(TTL).await.unwrap();
    t.ack(&k, &first[4], true).await.unwrap();
    t.abort().await.unwrap();
    let mut after = Vec::new();
    while let Some(m) = k.recv_timeout(QUIET).await.unwrap() {
        after.push(String::from_utf8_lossy(&m.payload).into_owned());
    }
    let want: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    assert_eq!(after, want);
}

/// Unloads `topic`: it is loaded again at its next use, in a new ledger, and
/// its subscriptions from their persisted cursors.
fn unload(s: &Strobe, topic: &str) {
    let path = format!(
        "/admin/v2/{}/unload",
        topic.replace("://", "/").trim_start_matches('/')
    );
    let (st, body) = s.http("PUT", &path, "");
    assert!(st == 204 || st == 200, "unload: {st} {body}");
}

/// A Failover consumer of subscription `s` that received a0..a2 in one
/// ledger and b0..b9 as one batch at the first entry of the next (the topic
/// was unloaded between them); the b's.
async fn batch_opening_a_ledger(
    s: &Strobe,
    c: &Client,
    topic: &str,
) -> (Consumer, Vec<strobe_client::Message>) {
    let mut k = consumer(c, topic, "s", SubType::Failover).await;
    let p = producer(c, topic).await;
    for i in 0..3 {
        send(&p, &format!("a{i}")).await;
    }
    p.close().await.unwrap();
    unload(s, topic);
    ten_in_one_batch(c, topic, "b").await;
    // The a's, unacknowledged, may come again after the unload's reconnect.
    let mut got: Vec<strobe_client::Message> = Vec::new();
    while got.last().is_none_or(|m| &m.payload[..] != b"b9") {
        let m = k.recv_timeout(Duration::from_secs(10)).await.unwrap();
        got.push(m.expect("a message"));
    }
    let a = got[0].id;
    got.retain(|m| m.payload.starts_with(b"b"));
    let texts: Vec<String> = got
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    assert_eq!(texts, (0..10).map(|i| format!("b{i}")).collect::<Vec<_>>());
    let b3 = got[3].id;
    assert_eq!(b3.batch_size, 10, "the ten went as one batch");
    assert!(
        b3.position.ledger_id > a.position.ledger_id && b3.position.entry_id == 0,
        "the batch opens a new ledger: {a:?} then {b3:?}"
    );
    (k, got)
}

/// Found by the fault campaign (seed 103: one input transformed twice, by
/// two committed transactions). A cumulative ack that ends inside a batch
/// acks the entries before the batch's; for a batch at a ledger's first
/// entry those are the previous ledger's, and none was acked: they came
/// again once the subscription was loaded afresh.
#[tokio::test]
async fn a_committed_cumulative_ack_inside_a_batch_at_a_ledgers_first_entry_covers_the_ledger_before()
 {
    let s = Strobe::start();
    let c = client(&s).await;
    let topic = "persistent://public/default/txn-cumulative-ledger-start";
    let (k, got) = batch_opening_a_ledger(&s, &c, topic).await;
    let txn = c.new_transaction(TTL).await.unwrap();
    txn.ack(&k, &got[3], true).await.unwrap();
    txn.commit().await.unwrap();
    k.close().await.unwrap();
    unload(&s, topic);
    let mut k = consumer(&c, topic, "s", SubType::Failover).await;
    assert_eq!(drain(&mut k).await, ["b4", "b5", "b6", "b7", "b8", "b9"]);
}

/// The same without a transaction: a plain cumulative ack with batch-index
/// acknowledgement.
#[tokio::test]
async fn a_cumulative_ack_inside_a_batch_at_a_ledgers_first_entry_covers_the_ledger_before() {
    let s = Strobe::start();
    let c = client(&s).await;
    let topic = "persistent://public/default/cumulative-ledger-start";
    let (mut k, got) = batch_opening_a_ledger(&s, &c, topic).await;
    k.ack_cumulative(&got[3]).unwrap();
    k.close().await.unwrap();
    unload(&s, topic);
    let mut k = consumer(&c, topic, "s", SubType::Failover).await;
    assert_eq!(drain(&mut k).await, ["b4", "b5", "b6", "b7", "b8", "b9"]);
}

/// A kill -9 under transactional load (standalone answers ADD_PARTITION_TO_TXN before its
/// registration is written, and the sends wait for it): every transaction whose commit was
/// answered is delivered whole after the restart, each one is all or nothing across its two
/// topics, one never committed delivers nothing, and nothing comes twice.
#[tokio::test]
async fn a_kill_9_under_transactional_load_keeps_every_transaction_whole() {
    use std::collections::{HashMap, HashSet};
    use std::sync::{Arc, Mutex};
    let mut s = Strobe::start();
    let (a, b) = (
        "persistent://public/default/txn-load-a",
        "persistent://public/default/txn-load-b",
    );
    let ttl = Duration::from_secs(3);
    // What the client was told: transaction -> committed (true) or not (false: never
    // committed, or its commit failed or went unanswered).
    let told: Arc<Mutex<HashMap<String, bool>>> = Arc::default();
    {
        let c = client(&s).await;
        let (pa, pb) = (
            Arc::new(producer(&c, a).await),
            Arc::new(producer(&c, b).await),
        );
        // Each topic's first transaction registers it synchronously; the rest are early.
        let warm = c.new_transaction(ttl).await.unwrap();
        warm.send(&pa, "warm").await.unwrap().await.unwrap();
        warm.send(&pb, "warm").await.unwrap().await.unwrap();
        warm.commit().await.unwrap();
        told.lock().unwrap().insert("warm".into(), true);
        let mut loops = Vec::new();
        for w in 0..8 {
            let (c, pa, pb, told) = (c.clone(), pa.clone(), pb.clone(), told.clone());
            loops.push(tokio::spawn(async move {
                for i in 0.. {
                    let id = format!("{w}-{i}");
                    told.lock().unwrap().insert(id.clone(), false);
                    let r = async {
                        let txn = c.new_transaction(ttl).await?;
                        let fa = txn.send(&pa, id.clone()).await?;
                        let fb = txn.send(&pb, id.clone()).await?;
                        fa.await?;
                        fb.await?;
                        txn.commit().await
                    }
                    .await;
                    match r {
                        Ok(()) => {
                            told.lock().unwrap().insert(id, true);
                        }
                        Err(_) => return,
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        s.signal("KILL");
        for l in loops {
            let _ = tokio::time::timeout(Duration::from_secs(30), l).await;
        }
    }
    s.restart();
    // Transactions left open time out (3 s) and abort; the topics then deliver the rest.
    let c = client(&s).await;
    let mut got: Vec<Vec<String>> = Vec::new();
    for topic in [a, b] {
        let mut k = consumer(&c, topic, "check", SubType::Exclusive).await;
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            match k.recv_timeout(Duration::from_secs(6)).await.unwrap() {
                Some(m) => {
                    out.push(String::from_utf8_lossy(&m.payload).into_owned());
                    k.ack(&m).unwrap();
                }
                None => break,
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{topic} never went quiet"
            );
        }
        got.push(out);
    }
    let told = told.lock().unwrap().clone();
    let committed: HashSet<&String> = told.iter().filter(|(_, c)| **c).map(|(k, _)| k).collect();
    assert!(
        committed.len() > 20,
        "too little load before the kill: {}",
        committed.len()
    );
    for (topic, out) in [a, b].iter().zip(&got) {
        let set: HashSet<&String> = out.iter().collect();
        assert_eq!(set.len(), out.len(), "{topic}: a message came twice");
        for id in &committed {
            assert!(set.contains(id), "{topic}: committed transaction {id} lost");
        }
        for id in &set {
            assert!(told.contains_key(*id), "{topic}: {id} was never sent");
        }
    }
    let (in_a, in_b): (HashSet<&String>, HashSet<&String>) =
        (got[0].iter().collect(), got[1].iter().collect());
    assert_eq!(in_a, in_b, "a transaction delivered on one topic only");
}
