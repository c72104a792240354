//! A keyed load on a scalable topic and the check of what it stored, for
//! the split and merge tests: keys in turn, each message `"<key>:<seq>"`;
//! afterwards every segment is read in id order (a child's id is above its
//! parents', so that is DAG order) and each key's sequence must be 0, 1, 2…
//! with nothing missing, repeated or out of place.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use strobe_client::{
    Client, InitialPosition, ProducerMessage, ScalableProducer, ScalableSendFuture, SubType,
};
use tokio::task::JoinHandle;

/// Sends `per_tick` messages every 10 ms over `keys` keys until stopped.
pub struct KeyedLoad {
    stop: Arc<AtomicBool>,
    sender: JoinHandle<u64>,
    collector: JoinHandle<(Vec<Instant>, Vec<String>)>,
    producer: Arc<ScalableProducer>,
}

impl KeyedLoad {
    pub fn start(producer: ScalableProducer, keys: u64, per_tick: u64) -> KeyedLoad {
        let producer = Arc::new(producer);
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ScalableSendFuture>();
        let sender = {
            let (producer, stop) = (producer.clone(), stop.clone());
            tokio::spawn(async move {
                let mut seq = vec![0u64; keys as usize];
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    for _ in 0..per_tick {
                        let k = n % keys;
                        let msg =
                            ProducerMessage::new(format!("{k}:{}", seq[k as usize]).into_bytes())
                                .with_key(format!("key-{k}"));
                        seq[k as usize] += 1;
                        n += 1;
                        tx.send(producer.send(msg).await.unwrap()).unwrap();
                    }
                }
                n
            })
        };
        let collector = tokio::spawn(async move {
            let (mut at, mut errors) = (Vec::new(), Vec::new());
            while let Some(f) = rx.recv().await {
                match f.await {
                    Ok(_) => at.push(Instant::now()),
                    Err(e) => errors.push(e.to_string()),
                }
            }
            (at, errors)
        });
        KeyedLoad {
            stop,
            sender,
            collector,
            producer,
        }
    }

    /// Stops, flushes, and checks every send was acknowledged; returns the
    /// number sent and the receipts' times.
    pub async fn finish(self) -> (u64, Vec<Instant>) {
        self.stop.store(true, Ordering::Relaxed);
        let sent = self.sender.await.unwrap();
        tokio::time::timeout(Duration::from_secs(60), self.producer.flush())
            .await
            .expect("flushed within 60 s")
            .unwrap();
        drop(self.producer);
        let (at, errors) = self.collector.await.unwrap();
        assert!(
            errors.is_empty(),
            "{} sends failed: {:?}",
            errors.len(),
            &errors[..errors.len().min(5)]
        );
        assert_eq!(at.len() as u64, sent);
        (sent, at)
    }
}

/// The payloads stored on every segment of `topic` (its local name in
/// public/default) that `layout` (the admin API's JSON) lists, segment by
/// segment in id order (a child's id is above its parents', so that is DAG
/// order); what open or aborted transactions hold is not read.
pub async fn read_dag(client: &Client, topic: &str, layout: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let segments: BTreeMap<u64, &serde_json::Value> = layout["segments"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), v))
        .collect();
    for (id, seg) in segments {
        let name = match seg["legacyTopicName"].as_str() {
            // A migrated v4 topic's partition (PIP-475).
            Some(legacy) => legacy.to_owned(),
            None => format!(
                "segment://public/default/{topic}/{:04x}-{:04x}-{id}",
                seg["hashRange"]["start"].as_u64().unwrap(),
                seg["hashRange"]["end"].as_u64().unwrap()
            ),
        };
        let mut c = client
            .consumer(&name, "verify")
            .sub_type(SubType::Exclusive)
            .initial_position(InitialPosition::Earliest)
            .subscribe()
            .await
            .unwrap();
        while let Some(m) = c.recv_timeout(Duration::from_millis(700)).await.unwrap() {
            out.push(String::from_utf8(m.payload.to_vec()).unwrap());
        }
    }
    out
}

/// Reads every segment of `topic` as [`read_dag`] does and checks each
/// key's sequence; returns how many messages were stored.
pub async fn check_dag_order(client: &Client, topic: &str, layout: &serde_json::Value) -> u64 {
    let mut by_key: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut total = 0u64;
    for text in read_dag(client, topic, layout).await {
        let (k, s) = text.split_once(':').unwrap();
        by_key
            .entry(k.parse().unwrap())
            .or_default()
            .push(s.parse().unwrap());
        total += 1;
    }
    for (k, seqs) in &by_key {
        if let Some(i) = seqs.iter().enumerate().position(|(i, s)| *s != i as u64) {
            panic!(
                "key {k}: lost, duplicated or out of order at {i} of {}: {:?}",
                seqs.len(),
                &seqs[i.saturating_sub(3)..(i + 10).min(seqs.len())]
            );
        }
    }
    total
}
