//! Moving a bundle between brokers of a cluster (PIP-307's multi-phase
//! unload) and plain unloads of a bundle (its clients look up again).
//!
//! A transfer to `dst`: the record goes Releasing{dst} (lookups now answer
//! `dst`); the bundle's topics close without telling their clients (sends are
//! held, dispatch stops, cursors are persisted, the logs are closed, so the
//! destination opens them complete); the record goes Assigning{dst}; the
//! destination takes it (Owned, under its lease); then the clients get
//! CLOSE_PRODUCER / CLOSE_CONSUMER naming `dst`, and reconnect there without a
//! lookup. If the destination does not take the bundle in time, the source
//! frees it and its clients look up instead.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use strobe_model::TopicName;
use tracing::{info, warn};

use super::BrokerService;
use crate::BrokerError;
use crate::topic::handoff::Handoff;
use strobe_cluster::{BrokerInfo, bundle_path};

/// How long a source waits for the destination to take a bundle.
const TAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl BrokerService {
    /// The live broker `name` means: its id, or the `host:port` of its HTTP
    /// or binary URL (pulsar-admin's `-d host:webPort`).
    fn find_broker(&self, name: &str) -> Result<BrokerInfo, BrokerError> {
        let c = self.cluster().ok_or_else(|| {
            BrokerError::NotAllowed(
                "a standalone broker has no other broker to move a bundle to".into(),
            )
        })?;
        let authority = |url: &str| {
            url.split("://")
                .nth(1)
                .unwrap_or("")
                .trim_end_matches('/')
                .to_string()
        };
        c.live_brokers()
            .into_iter()
            .find(|b| {
                b.broker_id == name
                    || authority(&b.web_service_url) == name
                    || authority(&b.service_url) == name
            })
            .ok_or_else(|| {
                BrokerError::NotAllowed(format!("no live broker {name:?} in the cluster"))
            })
    }

    /// Closes the loaded topics of a bundle for a handoff and takes them out
    /// of the topic map, one after another on purpose: closing 8 or 64 at
    /// once cut a bundle's close from 1.4 s to 0.3-0.7 s, but at a
    /// SIGTERM the bundles then reached the other brokers faster than they
    /// could load their topics, and the producers' longest wait grew from
    /// 2.5-2.9 s to 7-11 s (11,246 topics, docs/performance.md).
    async fn close_bundle_topics(
        &self,
        ns: &str,
        bundle: &str,
    ) -> Result<Vec<Handoff>, BrokerError> {
        let bundles = self.ns_bundles(ns)?;
        let names: Vec<TopicName> = self
            .loaded_topics_of(ns)
            .iter()
            .filter(|t| bundles.bundle_of(&t.name) == bundle)
            .map(|t| t.name.clone())
            .collect();
        let mut handoffs = Vec::with_capacity(names.len());
        for name in names {
            let key = name.to_string();
            let _closing = self.topic_locks.lock(&key).await;
            let topic = self.topics.lock().remove(&key);
            if let Some(t) = topic {
                handoffs.push(t.close_for_handoff().await);
                self.forget_non_persistent(&name).await;
            }
        }
        Ok(handoffs)
    }

    /// Moves bundle `bundle` of namespace `ns`, which this broker owns, to
    /// the broker `dst` (see the module docs).
    pub async fn transfer_bundle(
        &self,
        ns: &str,
        bundle: &str,
        dst: &str,
    ) -> Result<(), BrokerError> {
        let dst = self.find_broker(dst)?;
        let c = self
            .cluster()
            .expect("find_broker checked the cluster")
            .clone();
        self.bundles(ns)?.range_of(bundle)?;
        let path = bundle_path(ns, bundle);
        if c.owner_of(&path).is_none() {
            // As Pulsar's unload of a bundle no broker owns: nothing to
            // move (a split's fresh child, a bundle freed a moment ago);
            // the next lookup places it.
            info!(bundle = %path, dst = %dst.broker_id, "no broker owns the bundle; nothing to transfer");
            return Ok(());
        }
        let started = Instant::now();
        c.begin_transfer(&path, &dst).await?;
        let began = started.elapsed();
        let handoffs = self.close_bundle_topics(ns, bundle).await?;
        let closed = started.elapsed() - began;
        let assigned = c.assign(&path).await;
        let taken = assigned.is_ok() && c.wait_taken(&path, &dst.broker_id, TAKE_TIMEOUT).await;
        let took = started.elapsed() - closed - began;
        let urls = |conns: &[u64]| taken.then(|| self.assigned_urls(&dst, conns)).flatten();
        let topics = handoffs.len();
        for h in handoffs {
            h.disconnect(&urls).await;
        }
        let counters = &self.cluster_counters;
        if !taken {
            counters.transfers_failed.fetch_add(1, Ordering::Relaxed);
            c.release(&path).await;
            warn!(bundle = %path, dst = %dst.broker_id, error = ?assigned.err(), "the destination did not take the bundle; freed it, clients look it up");
            return Err(BrokerError::ServiceNotReady(format!(
                "broker {} did not take bundle {path} within {TAKE_TIMEOUT:?}",
                dst.broker_id
            )));
        }
        counters.transfers.fetch_add(1, Ordering::Relaxed);
        counters
            .transfer_close_us
            .fetch_add(closed.as_micros() as u64, Ordering::Relaxed);
        counters
            .transfer_take_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        info!(bundle = %path, dst = %dst.broker_id, topics, begin_ms = began.as_millis() as u64, close_ms = closed.as_millis() as u64, take_ms = took.as_millis() as u64, "bundle transferred");
        Ok(())
    }

    /// Unloads a bundle in a cluster without a destination: its topics close
    /// (clients look them up again) and the bundle is freed for whichever
    /// broker the next lookup picks.
    pub async fn release_bundle(&self, ns: &str, bundle: &str) -> Result<(), BrokerError> {
        let Some(c) = self.cluster().cloned() else {
            return self.unload_namespace(ns, Some(bundle)).await;
        };
        self.bundles(ns)?.range_of(bundle)?;
        for h in self.close_bundle_topics(ns, bundle).await? {
            h.disconnect(&|_| None).await;
        }
        c.release(&bundle_path(ns, bundle)).await;
        self.cluster_counters
            .unloads
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// On shutdown: every bundle this broker owns goes to the least loaded
    /// other broker, so clients move without a lookup or an error.
    pub async fn hand_off_bundles(&self) {
        let Some(c) = self.cluster().cloned() else {
            return;
        };
        let me = c.broker_id();
        for path in c.owned_bundles() {
            let Some((ns, bundle)) = strobe_cluster::parse_bundle_path(&path) else {
                continue;
            };
            let mut load = std::collections::HashMap::new();
            for (_, o) in c.owners() {
                *load.entry(o.broker.broker_id).or_insert(0u32) += 1;
            }
            let others: Vec<BrokerInfo> = c
                .live_brokers()
                .into_iter()
                .filter(|b| b.broker_id != me)
                .collect();
            let Some(dst) = strobe_cluster::pick_broker(&path, &others, &load).cloned() else {
                return;
            };
            if let Err(e) = self.transfer_bundle(ns, bundle, &dst.broker_id).await {
                warn!(bundle = %path, error = %e, "handing a bundle over at shutdown failed");
            }
        }
    }
}
