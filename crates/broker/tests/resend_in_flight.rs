//! A resend that arrives while its first copy is still being stored (the
//! client lost its connection, reconnected and sent what it had pending
//! again) is answered only once the first copy's outcome is known: as a
//! duplicate once it is stored, with an error once it failed (the client
//! then reconnects and sends it again). Answered at once as a duplicate, it
//! would acknowledge a message the store may still fail to keep.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use strobe_broker::{Backends, BrokerHandle};
use strobe_ledger::{
    AppendCallback, LedgerBackend, LedgerError, MemoryBackend, RecoveredTopic, TopicStorage,
};
use strobe_metadata::EmbeddedStore;
use strobe_wire::proto::ServerError;
use strobe_wire::{Command, commands};

use common::{Raw, start_with};

/// An append waiting at the gate, with the storage it goes to once let through.
struct Waiting {
    to: Arc<dyn TopicStorage>,
    at: (u64, u64, u64),
    data: Bytes,
    crc: u32,
    done: AppendCallback,
}

/// Appends held while the gate is shut; then stored, or failed, on request.
#[derive(Default)]
struct Gate {
    /// `None`: open.
    waiting: Mutex<Option<Vec<Waiting>>>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gate")
    }
}

impl Gate {
    fn shut(&self) {
        *self.waiting.lock() = Some(Vec::new());
    }

    fn held(&self) -> usize {
        self.waiting.lock().as_ref().map_or(0, Vec::len)
    }

    /// Opens the gate: what waited is stored (`store`) or failed.
    fn open(&self, store: bool) {
        let waiting = self.waiting.lock().take().unwrap_or_default();
        for w in waiting {
            if store {
                let (l, e, ts) = w.at;
                w.to.append(l, e, ts, w.data, w.crc, w.done);
            } else {
                (w.done)(Err(LedgerError::Closed("the store is cut off".into())));
            }
        }
    }
}

/// A memory backend whose appends pass through a [`Gate`].
#[derive(Debug, Clone)]
struct Gated {
    inner: MemoryBackend,
    gate: Arc<Gate>,
}

#[derive(Debug)]
struct GatedTopic {
    inner: Arc<dyn TopicStorage>,
    gate: Arc<Gate>,
}

impl LedgerBackend for Gated {
    fn open_topic(
        &self,
        topic: &str,
        fence: u64,
    ) -> BoxFuture<'static, strobe_ledger::Result<(Arc<dyn TopicStorage>, RecoveredTopic)>> {
        let open = self.inner.open_topic(topic, fence);
        let gate = self.gate.clone();
        async move {
            let (inner, rec) = open.await?;
            let t: Arc<dyn TopicStorage> = Arc::new(GatedTopic { inner, gate });
            Ok((t, rec))
        }
        .boxed()
    }
    fn kind(&self) -> &'static str {
        "gated"
    }
}

impl TopicStorage for GatedTopic {
    fn append(&self, l: u64, e: u64, ts: u64, data: Bytes, crc: u32, done: AppendCallback) {
        let mut waiting = self.gate.waiting.lock();
        match waiting.as_mut() {
            Some(w) => w.push(Waiting {
                to: self.inner.clone(),
                at: (l, e, ts),
                data,
                crc,
                done,
            }),
            None => {
                drop(waiting);
                self.inner.append(l, e, ts, data, crc, done)
            }
        }
    }
    fn read(
        &self,
        l: u64,
        first: u64,
        last: u64,
    ) -> BoxFuture<'static, strobe_ledger::Result<Vec<Bytes>>> {
        self.inner.read(l, first, last)
    }
    fn delete_ledgers(
        &self,
        first_kept: u64,
        ids: Vec<u64>,
    ) -> BoxFuture<'static, strobe_ledger::Result<()>> {
        self.inner.delete_ledgers(first_kept, ids)
    }
    fn persist_cursor(
        &self,
        name: &str,
        snapshot: Option<Bytes>,
    ) -> BoxFuture<'static, strobe_ledger::Result<()>> {
        self.inner.persist_cursor(name, snapshot)
    }
    fn close(&self) -> BoxFuture<'static, strobe_ledger::Result<()>> {
        self.inner.close()
    }
}

const TOPIC: &str = "persistent://public/default/resend-in-flight";

/// A deduplicating broker on gated memory storage.
async fn broker() -> (BrokerHandle, Arc<Gate>) {
    let gate = Arc::new(Gate::default());
    let backends = Backends {
        storage: Arc::new(Gated {
            inner: MemoryBackend::default(),
            gate: gate.clone(),
        }),
        metadata: Arc::new(EmbeddedStore::in_memory()),
        cluster: None,
    };
    let broker = start_with(|c| c.deduplication_enabled = true, backends).await;
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

/// Sends sequence id 0 on a first connection and drops that connection
/// while the append waits at the gate; returns a second connection that
/// sent 0 again, and then 1.
async fn resend_while_the_first_copy_waits(broker: &BrokerHandle, gate: &Gate) -> Raw {
    let mut first = producer(broker).await;
    gate.shut();
    send(&mut first, 0).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while gate.held() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the append never came"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(first);
    let mut second = producer(broker).await;
    send(&mut second, 0).await;
    send(&mut second, 1).await;
    // Sequence id 1 is new: it is stored, and waits at the gate too.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while gate.held() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "1 was never appended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
    gate.open(true);
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
    gate.open(false);
    match second.recv().await {
        Some(Command::SendError(e)) => {
            assert_eq!(e.sequence_id, 0);
            assert_eq!(e.error(), ServerError::PersistenceError);
        }
        other => panic!("expected SEND_ERROR for 0, got {other:?}"),
    }
    broker.shutdown().await;
}
