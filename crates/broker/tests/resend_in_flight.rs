//! A resend that arrives while its first copy is still being stored (the
//! client lost its connection, reconnected and sent what it had pending
//! again) is answered only once the first copy's outcome is known: as a
//! duplicate once it is stored, with an error once it failed (the client
//! then reconnects and sends it again). Answered at once as a duplicate, it
//! would acknowledge a message the store may still fail to keep.

mod common;

use std::sync::Arc;
use std::time::Duration;

use strobe_broker::BrokerHandle;
use strobe_ledger::testing::Impaired;
use strobe_wire::proto::ServerError;
use strobe_wire::{Command, commands};

use common::{Raw, start_on};

const TOPIC: &str = "persistent://public/default/resend-in-flight";

/// A deduplicating broker on memory storage whose appends can be held.
async fn broker() -> (BrokerHandle, Impaired) {
    let gate = Impaired::default();
    let broker = start_on(|c| c.deduplication_enabled = true, Arc::new(gate.clone())).await;
    (broker, gate)
}

/// A connection with producer 1, named `p`, on [`TOPIC`] (retried while the
/// broker still counts an earlier connection's `p` as connected).
async fn producer(broker: &BrokerHandle) -> Raw {
    let mut raw = Raw::handshake(broker).await;
    for request in 1..100 {
        raw.send(commands::producer(request, 1, TOPIC, Some("p")))
            .await;
        match raw.recv().await {
            Some(Command::ProducerSuccess(_)) => return raw,
            Some(Command::Error(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("expected PRODUCER_SUCCESS, got {other:?}"),
        }
    }
    panic!("producer p was never registered again");
}

async fn send(raw: &mut Raw, sequence_id: u64) {
    let meta = strobe_wire::proto::MessageMetadata {
        producer_name: "p".into(),
        sequence_id,
        publish_time: 1,
        ..Default::default()
    };
    let section = strobe_wire::payload::encode(&meta, b"x", true);
    raw.write(commands::send_frame(1, sequence_id, 1, section))
        .await;
}

/// Waits until `n` appends wait at the gate.
async fn held(gate: &Impaired, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while gate.held() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} appends at the gate, not {n}",
            gate.held()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sends sequence id 0 on a first connection and drops that connection
/// while the append waits at the gate; returns a second connection that
/// sent 0 again, and then 1.
async fn resend_while_the_first_copy_waits(broker: &BrokerHandle, gate: &Impaired) -> Raw {
    let mut first = producer(broker).await;
    gate.shut_gate();
    send(&mut first, 0).await;
    held(gate, 1).await;
    drop(first);
    let mut second = producer(broker).await;
    send(&mut second, 0).await;
    send(&mut second, 1).await;
    // Sequence id 1 is new: it is stored, and waits at the gate too.
    held(gate, 2).await;
    assert!(
        second
            .recv_within(Duration::from_millis(300))
            .await
            .is_none(),
        "nothing is answered while the first copy of 0 is not stored"
    );
    second
}

#[tokio::test]
async fn a_resend_is_a_duplicate_once_its_first_copy_is_stored() {
    let (broker, gate) = broker().await;
    let mut second = resend_while_the_first_copy_waits(&broker, &gate).await;
    gate.open_gate(true);
    match second.recv().await {
        Some(Command::SendReceipt(r)) => {
            assert_eq!(r.sequence_id, 0);
            let id = r.message_id.expect("a message id");
            assert_eq!(
                (id.ledger_id, id.entry_id),
                (u64::MAX, u64::MAX),
                "a duplicate's receipt"
            );
        }
        other => panic!("expected SEND_RECEIPT for 0, got {other:?}"),
    }
    match second.recv().await {
        Some(Command::SendReceipt(r)) => {
            assert_eq!(r.sequence_id, 1);
            let id = r.message_id.expect("a message id");
            assert_eq!(id.entry_id, 1, "stored after the first copy of 0");
        }
        other => panic!("expected SEND_RECEIPT for 1, got {other:?}"),
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn a_resend_whose_first_copy_failed_is_an_error() {
    let (broker, gate) = broker().await;
    let mut second = resend_while_the_first_copy_waits(&broker, &gate).await;
    gate.open_gate(false);
    match second.recv().await {
        Some(Command::SendError(e)) => {
            assert_eq!(e.sequence_id, 0);
            assert_eq!(e.error(), ServerError::PersistenceError);
        }
        other => panic!("expected SEND_ERROR for 0, got {other:?}"),
    }
    broker.shutdown().await;
}
