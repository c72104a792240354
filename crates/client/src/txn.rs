//! Transactions, client side (the Java client's `TransactionCoordinatorClientImpl` and
//! `TransactionImpl`): coordinators are found by the PIP-473 watch when the broker advertises
//! `supports_tc_metadata_discovery`, else by the lookup of
//! `persistent://pulsar/system/transaction_coordinator_assign`'s partitions; a transaction adds
//! each topic and subscription to the coordinator before its first send or ack there.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strobe_wire::Command;
use strobe_wire::proto::{
    self, CommandAck, CommandAddPartitionToTxn, CommandAddSubscriptionToTxn, CommandEndTxn,
    CommandNewTxn, CommandTcClientConnectRequest, command_ack::AckType,
};

use crate::client::Client;
use crate::connection::{Connection, server_error};
use crate::consumer::GiveBack;
use crate::error::{Error, Result};
use crate::util::Backoff;
use crate::{Consumer, Message, Producer, ProducerMessage, SendFuture};

/// The legacy discovery topic (Pulsar's `SystemTopicNames.TRANSACTION_COORDINATOR_ASSIGN`).
pub const TC_ASSIGN_TOPIC: &str = "persistent://pulsar/system/transaction_coordinator_assign";

/// How coordinators were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcDiscovery {
    /// PIP-473 `WATCH_TC_ASSIGNMENTS`.
    Watch,
    /// The assign topic's partitions.
    AssignTopic,
}

/// An open transaction.
#[derive(Debug, Clone)]
pub struct Transaction {
    client: Client,
    conn: Arc<Connection>,
    most: u64,
    least: u64,
    partitions: Arc<Mutex<HashSet<String>>>,
    subscriptions: Arc<Mutex<HashSet<(String, String)>>>,
    /// The consumers that acknowledged cumulatively in this transaction:
    /// what they hold is given back if it aborts.
    cumulative: Arc<Mutex<Vec<GiveBack>>>,
}

fn check(error: Option<i32>, message: Option<String>) -> Result<()> {
    match error {
        Some(e) => Err(server_error(e, message.unwrap_or_default())),
        None => Ok(()),
    }
}

impl Client {
    /// How this client finds coordinators: the watch when the broker offers it.
    pub async fn tc_discovery(&self) -> Result<TcDiscovery> {
        let conn = self.service_connection().await?;
        Ok(
            if conn.features.supports_tc_metadata_discovery == Some(true) {
                TcDiscovery::Watch
            } else {
                TcDiscovery::AssignTopic
            },
        )
    }

    /// The coordinator partitions and the URL of each one's leader (`None`: no leader now).
    pub async fn tc_leaders(&self) -> Result<Vec<Option<String>>> {
        self.tc_leaders_via(self.tc_discovery().await?).await
    }

    /// [`Client::tc_leaders`] found the given way.
    pub async fn tc_leaders_via(&self, how: TcDiscovery) -> Result<Vec<Option<String>>> {
        match how {
            TcDiscovery::Watch => {
                let mut w = self.watch_tc_assignments().await?;
                let (n, assignments) = w.next().await?;
                let mut out = vec![None; n as usize];
                for a in assignments {
                    if let Some(slot) = out.get_mut(a.tc_id as usize) {
                        *slot = a.url;
                    }
                }
                Ok(out)
            }
            TcDiscovery::AssignTopic => {
                let n = self.partitions(TC_ASSIGN_TOPIC).await?;
                let mut out = Vec::with_capacity(n as usize);
                for i in 0..n {
                    let topic = format!("{TC_ASSIGN_TOPIC}-partition-{i}");
                    let conn = self.lookup(&topic).await.ok();
                    out.push(conn.map(|c| format!("pulsar://{}", c.addr)));
                }
                Ok(out)
            }
        }
    }

    /// A connection to coordinator `tc`'s leader, on which TC_CLIENT_CONNECT succeeded.
    async fn tc_connection(&self, tc: u64) -> Result<Arc<Connection>> {
        let cached = || {
            self.inner
                .tc_conns
                .lock()
                .expect("tc lock")
                .get(&tc)
                .filter(|c| !c.is_closed())
                .cloned()
        };
        if let Some(c) = cached() {
            return Ok(c);
        }
        // One discovery and TC_CLIENT_CONNECT at a time; whoever waited finds it done.
        let _one = self.inner.tc_lock.lock().await;
        if let Some(c) = cached() {
            return Ok(c);
        }
        let conn = match self.tc_discovery().await? {
            TcDiscovery::AssignTopic => {
                self.lookup(&format!("{TC_ASSIGN_TOPIC}-partition-{tc}"))
                    .await?
            }
            TcDiscovery::Watch => {
                let leaders = self.tc_leaders().await?;
                let Some(Some(url)) = leaders.get(tc as usize) else {
                    return Err(Error::Server {
                        code: proto::ServerError::TransactionCoordinatorNotFound,
                        message: format!("coordinator {tc} has no leader now"),
                    });
                };
                let addr = crate::connection::socket_addr(url)?;
                self.inner.pool.get(&addr, &self.inner.opts).await?
            }
        };
        let rid = conn.next_request_id();
        let reply = conn
            .request(
                rid,
                CommandTcClientConnectRequest {
                    request_id: rid,
                    tc_id: tc,
                    scalable: None,
                },
            )
            .await?;
        match reply {
            Command::TcClientConnectResponse(r) => check(r.error, r.message)?,
            other => return Err(Error::Unexpected(format!("{:?}", other.kind()))),
        }
        self.inner
            .tc_conns
            .lock()
            .expect("tc lock")
            .insert(tc, conn.clone());
        Ok(conn)
    }

    fn forget_tc(&self, tc: u64) {
        self.inner.tc_conns.lock().expect("tc lock").remove(&tc);
    }

    /// Opens a transaction on the next coordinator (round robin), retrying while coordinators
    /// move (up to the operation timeout).
    pub async fn new_transaction(&self, ttl: Duration) -> Result<Transaction> {
        let cached = self.inner.tc_parallelism.load(Ordering::Relaxed);
        let n = if cached > 0 {
            cached
        } else {
            // One discovery for every transaction that starts meanwhile.
            let _one = self.inner.tc_lock.lock().await;
            match self.inner.tc_parallelism.load(Ordering::Relaxed) {
                0 => {
                    let n = self.tc_leaders().await?.len().max(1) as u64;
                    self.inner.tc_parallelism.store(n, Ordering::Relaxed);
                    n
                }
                n => n,
            }
        };
        let first = self.inner.next_tc.fetch_add(1, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + self.inner.opts.operation_timeout;
        let mut backoff = Backoff::new();
        let mut attempt = 0u64;
        loop {
            let tc = (first + attempt) % n;
            attempt += 1;
            match self.new_transaction_on(tc, ttl).await {
                Ok(t) => return Ok(t),
                Err(e) if e.is_retriable() || is_tc_moved(&e) => {
                    self.forget_tc(tc);
                    let wait = backoff.next().min(Duration::from_millis(500));
                    if tokio::time::Instant::now() + wait > deadline {
                        return Err(e);
                    }
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Opens a transaction on coordinator partition `tc` (one attempt).
    pub async fn new_transaction_on(&self, tc: u64, ttl: Duration) -> Result<Transaction> {
        let conn = self.tc_connection(tc).await?;
        let rid = conn.next_request_id();
        let reply = conn
            .request(
                rid,
                CommandNewTxn {
                    request_id: rid,
                    txn_ttl_millis: Some(ttl.as_millis() as u64),
                    tc_id: Some(tc),
                    scalable: None,
                },
            )
            .await?;
        let Command::NewTxnResponse(r) = reply else {
            return Err(Error::Unexpected(format!("{:?}", reply.kind())));
        };
        check(r.error, r.message)?;
        Ok(Transaction {
            client: self.clone(),
            conn,
            most: r.txnid_most_bits.unwrap_or(tc),
            least: r.txnid_least_bits.unwrap_or(0),
            partitions: Arc::default(),
            subscriptions: Arc::default(),
            cumulative: Arc::default(),
        })
    }
}

/// The coordinator moved (or is being elected): find it again.
fn is_tc_moved(e: &Error) -> bool {
    matches!(
        e,
        Error::Server {
            code: proto::ServerError::TransactionCoordinatorNotFound
                | proto::ServerError::ServiceNotReady,
            ..
        } | Error::Disconnected(_)
            | Error::Timeout(_)
    )
}

impl Transaction {
    /// `(most, least)` bits of the TxnID.
    pub fn id(&self) -> (u64, u64) {
        (self.most, self.least)
    }

    /// A request to this transaction's coordinator, following it if its leader moved.
    async fn tc_request(&self, make: impl Fn(u64) -> Command) -> Result<Command> {
        let deadline = tokio::time::Instant::now() + self.client.inner.opts.operation_timeout;
        let mut conn = self.conn.clone();
        let mut backoff = Backoff::new();
        loop {
            let rid = conn.next_request_id();
            let r = conn.request(rid, make(rid)).await;
            let err = match r {
                Ok(reply) => match tc_error(&reply) {
                    Some(e) if is_tc_moved(&e) => e,
                    _ => return Ok(reply),
                },
                Err(e) if is_tc_moved(&e) || e.is_retriable() => e,
                Err(e) => return Err(e),
            };
            self.client.forget_tc(self.most);
            let wait = backoff.next().min(Duration::from_millis(500));
            if tokio::time::Instant::now() + wait > deadline {
                return Err(err);
            }
            tokio::time::sleep(wait).await;
            if let Ok(c) = self.client.tc_connection(self.most).await {
                conn = c;
            }
        }
    }

    /// Registers `topic` with the coordinator as a participant (once).
    pub(crate) async fn add_partition(&self, topic: &str) -> Result<()> {
        if self.partitions.lock().expect("txn lock").contains(topic) {
            return Ok(());
        }
        let (most, least) = self.id();
        let t = topic.to_owned();
        let reply = self
            .tc_request(|rid| {
                CommandAddPartitionToTxn {
                    request_id: rid,
                    txnid_least_bits: Some(least),
                    txnid_most_bits: Some(most),
                    partitions: vec![t.clone()],
                    scalable: None,
                }
                .into()
            })
            .await?;
        let Command::AddPartitionToTxnResponse(r) = reply else {
            return Err(Error::Unexpected(format!("{:?}", reply.kind())));
        };
        check(r.error, r.message)?;
        self.partitions
            .lock()
            .expect("txn lock")
            .insert(topic.to_owned());
        Ok(())
    }

    async fn add_subscription(&self, topic: &str, subscription: &str) -> Result<()> {
        let key = (topic.to_owned(), subscription.to_owned());
        if self.subscriptions.lock().expect("txn lock").contains(&key) {
            return Ok(());
        }
        let (most, least) = self.id();
        let reply = self
            .tc_request(|rid| {
                CommandAddSubscriptionToTxn {
                    request_id: rid,
                    txnid_least_bits: Some(least),
                    txnid_most_bits: Some(most),
                    subscription: vec![proto::Subscription {
                        topic: key.0.clone(),
                        subscription: key.1.clone(),
                    }],
                    scalable: None,
                }
                .into()
            })
            .await?;
        let Command::AddSubscriptionToTxnResponse(r) = reply else {
            return Err(Error::Unexpected(format!("{:?}", reply.kind())));
        };
        check(r.error, r.message)?;
        self.subscriptions.lock().expect("txn lock").insert(key);
        Ok(())
    }

    /// Sends `msg` in this transaction: stored now, visible to consumers once it commits.
    pub async fn send(
        &self,
        producer: &Producer,
        msg: impl Into<ProducerMessage>,
    ) -> Result<SendFuture> {
        self.add_partition(producer.topic()).await?;
        let mut msg = msg.into();
        msg.txn = Some(self.id());
        producer.send(msg).await
    }

    /// Acknowledges `msg` in this transaction (cumulatively with `cumulative`): held until the
    /// transaction ends, real if it commits, delivered again if it aborts.
    pub async fn ack(&self, consumer: &Consumer, msg: &Message, cumulative: bool) -> Result<()> {
        self.add_subscription(consumer.topic(), consumer.subscription())
            .await?;
        if cumulative {
            let g = consumer.give_back_handle();
            let mut known = self.cumulative.lock().expect("txn lock");
            if !known.iter().any(|k| k.is_for(&g)) {
                known.push(g);
            }
        }
        let (conn, consumer_id) = consumer.wire();
        let mut id = crate::consumer::id_data(&msg.id);
        if msg.id.batch_size > 1 && msg.id.batch_index >= 0 {
            // The bits still unacked after this ack: all but this index (or, cumulatively,
            // all after it).
            let n = msg.id.batch_size as usize;
            let i = msg.id.batch_index as usize;
            let mut bits = vec![0u64; n.div_ceil(64)];
            for j in 0..n {
                if (cumulative && j > i) || (!cumulative && j != i) {
                    bits[j / 64] |= 1 << (j % 64);
                }
            }
            id.ack_set = bits.into_iter().map(|w| w as i64).collect();
        }
        let rid = conn.next_request_id();
        let (most, least) = self.id();
        let reply = conn
            .request(
                rid,
                CommandAck {
                    consumer_id,
                    ack_type: if cumulative {
                        AckType::Cumulative
                    } else {
                        AckType::Individual
                    } as i32,
                    message_id: vec![id],
                    txnid_most_bits: Some(most),
                    txnid_least_bits: Some(least),
                    request_id: Some(rid),
                    ..Default::default()
                },
            )
            .await?;
        match reply {
            Command::AckResponse(r) => check(r.error, r.message),
            other => Err(Error::Unexpected(format!("{:?}", other.kind()))),
        }
    }

    async fn end(&self, action: i32) -> Result<()> {
        let (most, least) = self.id();
        let reply = self
            .tc_request(|rid| {
                CommandEndTxn {
                    request_id: rid,
                    txnid_least_bits: Some(least),
                    txnid_most_bits: Some(most),
                    txn_action: Some(action),
                    scalable: None,
                }
                .into()
            })
            .await?;
        let Command::EndTxnResponse(r) = reply else {
            return Err(Error::Unexpected(format!("{:?}", reply.kind())));
        };
        check(r.error, r.message)
    }

    /// Commits: everything sent becomes visible and every ack real (both, when this returns
    /// without error, on every participant the coordinator could reach within its wait).
    pub async fn commit(&self) -> Result<()> {
        self.end(proto::TxnAction::Commit as i32).await
    }

    /// Aborts: nothing sent is ever delivered, acked messages are delivered again. A consumer
    /// that acknowledged cumulatively in it gives back everything it holds unacknowledged (as
    /// Pulsar's client does; PIP-84's epochs drop what it was sent before): its next message is
    /// the first the transaction had acknowledged.
    pub async fn abort(&self) -> Result<()> {
        self.end(proto::TxnAction::Abort as i32).await?;
        let consumers = std::mem::take(&mut *self.cumulative.lock().expect("txn lock"));
        for c in consumers {
            c.give_back();
        }
        Ok(())
    }
}

/// The error a coordinator response carries, if any.
fn tc_error(reply: &Command) -> Option<Error> {
    let (e, m) = match reply {
        Command::AddPartitionToTxnResponse(r) => (r.error, r.message.clone()),
        Command::AddSubscriptionToTxnResponse(r) => (r.error, r.message.clone()),
        Command::EndTxnResponse(r) => (r.error, r.message.clone()),
        Command::NewTxnResponse(r) => (r.error, r.message.clone()),
        _ => (None, None),
    };
    e.map(|e| server_error(e, m.unwrap_or_default()))
}
