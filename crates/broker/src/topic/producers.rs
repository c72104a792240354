//! A topic's producers: registration under the access modes (Shared,
//! Exclusive, ExclusiveWithFencing, WaitForExclusive and its queue),
//! removal, deduplication switched on and off, and what the broker asks of
//! them.

use strobe_wire::proto::ProducerAccessMode;
use strobe_wire::{OutFrame, commands};
use tokio::sync::oneshot;
use tracing::debug;

use super::{AddProducer, ProducerEntry, ProducerGrant, ProducerKey, Topic, dedup};
use crate::BrokerError;

impl Topic {
    /// Registers a producer, applying its access mode.
    pub fn add_producer(&self, req: AddProducer<'_>) -> Result<ProducerGrant, BrokerError> {
        // Before taking the state lock: the backlog reads the subscriptions.
        if let Some(e) = self.quota_refusal() {
            return Err(e);
        }
        let mut st = self.state.lock();
        if st.closed {
            return Err(BrokerError::ServiceNotReady(format!(
                "topic {} is closing",
                self.name
            )));
        }
        if st.terminated.is_some() {
            return Err(BrokerError::TopicTerminated(format!(
                "topic {} is terminated: it takes no more messages",
                self.name
            )));
        }
        if let Some(max) = self.limits.get().max_producers
            && st.producers.len() >= max as usize
        {
            return Err(BrokerError::ProducerBusy(format!(
                "Topic reached max producers limit: {} has {max}",
                self.name
            )));
        }
        if st.producers.values().any(|p| p.name == req.name) {
            return Err(BrokerError::ProducerBusy(format!(
                "producer with name '{}' is already connected to topic {}",
                req.name, self.name
            )));
        }
        let last_sequence_id = st
            .dedup
            .as_ref()
            .and_then(|d| d.pushed.get(&req.name).copied())
            .unwrap_or(-1);
        let entry = ProducerEntry {
            name: req.name.clone(),
            mode: req.mode,
            tx: req.tx.clone(),
            v5_managed: req.v5_managed,
        };
        let exclusive_mode = req.mode != ProducerAccessMode::Shared;
        // A reconnecting exclusive producer that lost the topic is fenced.
        if exclusive_mode && req.topic_epoch.is_some_and(|e| e < st.topic_epoch) {
            return Err(BrokerError::ProducerFenced(format!(
                "producer epoch {} is older than the topic's {}: another producer took the topic",
                req.topic_epoch.unwrap_or(0),
                st.topic_epoch
            )));
        }
        let grant = |epoch| ProducerGrant {
            name: req.name.clone(),
            last_sequence_id,
            topic_epoch: epoch,
            wait: None,
        };
        match req.mode {
            ProducerAccessMode::Shared => {
                if st.exclusive.is_some() {
                    return Err(BrokerError::ProducerFenced(format!(
                        "topic {} has an exclusive producer",
                        self.name
                    )));
                }
                st.producers.insert(req.key, entry);
                Ok(grant(None))
            }
            ProducerAccessMode::Exclusive => {
                if st.exclusive.is_some() {
                    return Err(BrokerError::ProducerFenced(format!(
                        "topic {} has an exclusive producer",
                        self.name
                    )));
                }
                if !st.producers.is_empty() {
                    return Err(BrokerError::ProducerBusy(format!(
                        "topic {} already has {} producer(s); exclusive access refused",
                        self.name,
                        st.producers.len()
                    )));
                }
                st.topic_epoch += 1;
                st.exclusive = Some(req.key);
                st.producers.insert(req.key, entry);
                Ok(grant(Some(st.topic_epoch)))
            }
            ProducerAccessMode::ExclusiveWithFencing => {
                // Fence everyone else: they get CLOSE_PRODUCER, and a later reconnect
                // with the old epoch is refused.
                for ((_, pid), p) in st.producers.drain() {
                    crate::tell::tell(
                        &p.tx,
                        OutFrame::command(commands::close_producer(pid, None, None)),
                    );
                }
                for (_, _, waiter) in st.waiting.drain(..) {
                    let _ = waiter.send(Err(BrokerError::ProducerFenced(
                        "fenced by a new exclusive producer".into(),
                    )));
                }
                st.topic_epoch += 1;
                st.exclusive = Some(req.key);
                st.producers.insert(req.key, entry);
                Ok(grant(Some(st.topic_epoch)))
            }
            ProducerAccessMode::WaitForExclusive => {
                if st.producers.is_empty() {
                    st.topic_epoch += 1;
                    st.exclusive = Some(req.key);
                    st.producers.insert(req.key, entry);
                    return Ok(grant(Some(st.topic_epoch)));
                }
                let (tx, rx) = oneshot::channel();
                st.waiting.push_back((req.key, entry, tx));
                Ok(ProducerGrant {
                    wait: Some(rx),
                    ..grant(None)
                })
            }
        }
    }

    /// Removes a producer (closed by its client or its connection ended) and
    /// lets the next WaitForExclusive producer in.
    pub fn remove_producer(&self, key: ProducerKey) {
        let mut st = self.state.lock();
        st.waiting.retain(|(k, _, _)| *k != key);
        if st.producers.remove(&key).is_none() {
            return;
        }
        if st.exclusive == Some(key) {
            st.exclusive = None;
        }
        if st.producers.is_empty() {
            while let Some((k, entry, waiter)) = st.waiting.pop_front() {
                let epoch = st.topic_epoch + 1;
                if waiter.send(Ok(epoch)).is_ok() {
                    st.topic_epoch = epoch;
                    st.exclusive = Some(k);
                    debug!(topic = %self.name, producer = %entry.name, mode = ?entry.mode, "waiting producer takes the topic");
                    st.producers.insert(k, entry);
                    break;
                }
            }
        }
    }

    /// Switches deduplication on (rebuilding the sequence ids from storage)
    /// or off (its snapshot cursor goes: it would hold the log from trimming).
    pub async fn set_deduplication(&self, enabled: bool) -> Result<(), BrokerError> {
        let on = self.state.lock().dedup.is_some();
        if enabled && !on {
            let d = dedup::recover(&self.ledger).await?;
            self.state.lock().dedup.get_or_insert(d);
            self.dedup_on
                .store(true, std::sync::atomic::Ordering::Release);
        } else if !enabled && on {
            self.state.lock().dedup = None;
            self.dedup_on
                .store(false, std::sync::atomic::Ordering::Release);
            self.ledger.delete_cursor(dedup::CURSOR).await?;
        }
        Ok(())
    }

    /// Whether the producer is still registered (not fenced or closed by the broker).
    pub fn has_producer(&self, key: ProducerKey) -> bool {
        self.state.lock().producers.contains_key(&key)
    }

    /// The highest sequence id accepted for producer `name`, stored or being
    /// stored (-1 without deduplication or before its first message), as
    /// Pulsar tells a producer that registers.
    pub fn last_sequence_id(&self, name: &str) -> i64 {
        let st = self.state.lock();
        st.dedup
            .as_ref()
            .and_then(|d| d.pushed.get(name).copied())
            .unwrap_or(-1)
    }

    /// The producers connected, without copying their names.
    pub fn producer_count(&self) -> usize {
        self.state.lock().producers.len()
    }

    pub fn producer_names(&self) -> Vec<String> {
        self.state
            .lock()
            .producers
            .values()
            .map(|p| p.name.clone())
            .collect()
    }

    /// Disconnects every producer (a quota with producer_exception is exceeded).
    pub fn disconnect_producers(&self) {
        let mut st = self.state.lock();
        for ((_, pid), p) in st.producers.drain() {
            crate::tell::tell(
                &p.tx,
                OutFrame::command(commands::close_producer(pid, None, None)),
            );
        }
        st.exclusive = None;
    }
}
