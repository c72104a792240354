//! Opening a run's connections, consumers and producers. With many topics
//! (issue 47: 100,000 of them) the setup itself is measured: producers and
//! consumers are created `--setup-concurrency` at a time rather than one
//! after another (100,000 round trips in series take minutes whatever the
//! broker does), spread over `--connections` clients as an application's
//! many processes would be.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use strobe_client::{Client, Compression, Consumer, InitialPosition, SubType};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::stats::{Stats, record, wall_nanos};

/// `topic` itself, or with `n` > 1, `<topic>-0` .. `<topic>-(n-1)`.
pub(super) fn topic_names(topic: &str, n: usize) -> Vec<String> {
    if n <= 1 {
        vec![topic.to_string()]
    } else {
        (0..n).map(|i| format!("{topic}-{i}")).collect()
    }
}

/// What the setup needs of the run's options.
pub struct SetupOpts {
    pub sub_type: SubType,
    pub initial: InitialPosition,
    pub subscription: String,
    pub receiver_queue: u32,
    pub consumers: usize,
    pub producers: usize,
    /// Batching delay, messages, bytes (None: off).
    pub batching: Option<(Duration, u32, usize)>,
    pub compression: Compression,
    pub max_pending: usize,
    pub size: usize,
    /// Sends are paced (the pacer opens each producer's gate).
    pub paced: bool,
    pub concurrency: usize,
}

/// `n` clients to `url`, each with a connection of its own.
pub async fn connect(url: &str, n: usize) -> anyhow::Result<Vec<Client>> {
    let mut clients = Vec::with_capacity(n.max(1));
    for _ in 0..n.max(1) {
        clients.push(
            Client::builder(url)
                .build()
                .await
                .with_context(|| format!("connecting to {url}"))?,
        );
    }
    Ok(clients)
}

fn client_of(clients: &[Client], topic: usize) -> &Client {
    &clients[topic % clients.len()]
}

/// Every topic's consumers, subscribed concurrently, each receiving in a task.
pub async fn open_consumers(
    clients: &[Client],
    topics: &[String],
    o: &SetupOpts,
    stats: &Arc<Stats>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let wanted = (0..topics.len()).flat_map(|i| std::iter::repeat_n(i, o.consumers.max(1)));
    futures::stream::iter(wanted)
        .map(|i| {
            let t = &topics[i];
            let b = client_of(clients, i)
                .consumer(t, &o.subscription)
                .sub_type(o.sub_type)
                .receiver_queue_size(o.receiver_queue)
                .initial_position(o.initial);
            async move {
                let c = b
                    .subscribe()
                    .await
                    .with_context(|| format!("subscribing to {t}"))?;
                anyhow::Ok(tokio::spawn(consume_loop(c, stats.clone())))
            }
        })
        .buffer_unordered(o.concurrency.max(1))
        .try_collect()
        .await
}

/// Every topic's producers, created concurrently, each sending in a task;
/// with a rate, the gates the pacer opens.
pub async fn open_producers(
    clients: &[Client],
    topics: &[String],
    o: &SetupOpts,
    stats: &Arc<Stats>,
    per_producer_count: u64,
) -> anyhow::Result<(Vec<JoinHandle<()>>, Vec<Arc<Semaphore>>)> {
    let wanted = (0..topics.len()).flat_map(|i| std::iter::repeat_n(i, o.producers.max(1)));
    let made: Vec<(JoinHandle<()>, Option<Arc<Semaphore>>)> = futures::stream::iter(wanted)
        .map(|i| {
            let t = &topics[i];
            let mut b = client_of(clients, i)
                .producer(t)
                .compression(o.compression)
                .max_pending_messages(o.max_pending)
                .send_timeout(None);
            b = match o.batching {
                Some((delay, messages, bytes)) => b.batching(delay, messages, bytes),
                None => b.no_batching(),
            };
            async move {
                let producer = b
                    .create()
                    .await
                    .with_context(|| format!("creating a producer on {t}"))?;
                let gate = o.paced.then(|| Arc::new(Semaphore::new(0)));
                let task = tokio::spawn(produce_loop(
                    producer,
                    stats.clone(),
                    o.size,
                    gate.clone(),
                    per_producer_count,
                    o.max_pending,
                ));
                anyhow::Ok((task, gate))
            }
        })
        .buffer_unordered(o.concurrency.max(1))
        .try_collect()
        .await?;
    let mut tasks = Vec::with_capacity(made.len());
    let mut gates = Vec::new();
    for (task, gate) in made {
        tasks.push(task);
        gates.extend(gate);
    }
    Ok((tasks, gates))
}

/// Receives and acknowledges until the run says stop, counting latency
/// (from the payload's timestamp) and duplicates.
async fn consume_loop(mut c: Consumer, stats: Arc<Stats>) {
    let mut highest: HashMap<Arc<str>, u64> = HashMap::new();
    loop {
        // What is already here is taken without waiting; an empty queue
        // waits for a message or the end of the run (no timer: 100,000
        // consumers polling a stop flag would keep the client busy).
        let next = match c.try_recv() {
            Ok(Some(m)) => Ok(m),
            _ => tokio::select! {
                r = c.recv() => r,
                _ = stats.stop_consuming.cancelled() => break,
            },
        };
        let m = match next {
            Ok(m) => m,
            Err(_) => {
                if stats.stop_consuming.is_cancelled() {
                    break;
                }
                stats.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let now = wall_nanos();
        let sent = if m.payload.len() >= 8 {
            u64::from_be_bytes(m.payload[..8].try_into().expect("8 bytes"))
        } else {
            0
        };
        // A perf timestamp is within a day of now; anything else (another
        // producer's payload) falls back to publish time.
        let us = if sent > 0 && now >= sent && now - sent < 86_400_000_000_000 {
            (now - sent) / 1000
        } else {
            (now / 1_000_000).saturating_sub(m.publish_time) * 1000
        };
        match highest.get_mut(&m.producer_name) {
            Some(h) if m.sequence_id <= *h => {
                stats.duplicates.fetch_add(1, Ordering::Relaxed);
            }
            Some(h) => *h = m.sequence_id,
            None => {
                highest.insert(m.producer_name.clone(), m.sequence_id);
            }
        }
        record(&stats.e2e_lat, us);
        stats.received.fetch_add(1, Ordering::Relaxed);
        stats.last_recv_us.store(
            Instant::now().duration_since(stats.start).as_micros() as u64,
            Ordering::Relaxed,
        );
        stats
            .received_bytes
            .fetch_add(m.payload.len() as u64, Ordering::Relaxed);
        let _ = c.ack(&m);
    }
    c.flush_acks();
    let _ = c.close().await;
}

/// Sends until the run stops (or `count` messages), one per permit of the
/// pacer's `gate` when the run has a rate, counting receipts and latency.
async fn produce_loop(
    producer: strobe_client::Producer,
    stats: Arc<Stats>,
    size: usize,
    gate: Option<Arc<tokio::sync::Semaphore>>,
    count: u64,
    max_pending: usize,
) {
    let (tx, mut rx) =
        tokio::sync::mpsc::channel::<(strobe_client::SendFuture, Instant)>(max_pending.max(1) * 2);
    let st = stats.clone();
    let receipts = tokio::spawn(async move {
        while let Some((f, at)) = rx.recv().await {
            match f.await {
                Ok(_) => {
                    let now = Instant::now();
                    record(&st.pub_lat, now.duration_since(at).as_micros() as u64);
                    st.acked.fetch_add(1, Ordering::Relaxed);
                    st.last_ack_us.store(
                        now.duration_since(st.start).as_micros() as u64,
                        Ordering::Relaxed,
                    );
                    st.acked_bytes.fetch_add(size as u64, Ordering::Relaxed);
                }
                Err(_) => {
                    st.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    let filler = vec![b'x'; size - 8];
    let mut sent: u64 = 0;
    'outer: loop {
        let due = match &gate {
            // Open loop: one message per permit from the pacer.
            Some(g) => match g.acquire().await {
                Ok(p) => {
                    p.forget();
                    1
                }
                Err(_) => break 'outer,
            },
            None => 256,
        };
        for _ in 0..due {
            if stats.stop_producing.load(Ordering::Relaxed) || (count > 0 && sent >= count) {
                break 'outer;
            }
            let mut payload = Vec::with_capacity(size);
            payload.extend_from_slice(&wall_nanos().to_be_bytes());
            payload.extend_from_slice(&filler);
            let at = Instant::now();
            match producer.send(payload).await {
                Ok(f) => {
                    sent += 1;
                    stats.sent.fetch_add(1, Ordering::Relaxed);
                    if tx.send((f, at)).await.is_err() {
                        break 'outer;
                    }
                }
                Err(_) => {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        if gate.is_none() {
            tokio::task::yield_now().await;
        }
    }
    if let Some(g) = &gate {
        g.close();
    }
    let _ = producer.flush().await;
    drop(tx);
    let _ = receipts.await;
    let _ = producer.close().await;
}
