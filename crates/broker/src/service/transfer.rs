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
use tracing::{debug, info, warn};

use super::BrokerService;
use crate::BrokerError;
use crate::topic::handoff::Handoff;
use strobe_cluster::{BrokerInfo, bundle_path};

/// How long a source waits for the destination to take a bundle.
const TAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// At a shutdown, the next bundle goes to a broker once its topic loads are down to
/// [`strobe_cluster::SETTLED_TOPIC_LOADS`], or after this long.
const SETTLE_WAIT: Duration = Duration::from_secs(5);

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
    /// of the topic map, one after another: a close that leaves its log for
    /// the next open costs little, and what bounds a move is the destination
    /// loading the topics (see `hand_off_bundles`).
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

    /// The topic loads running and waiting at `b`, from its `/metrics`.
    async fn loads_at(&self, b: &BrokerInfo) -> Result<u64, String> {
        let url = format!(
            "{}/metrics?name[]=strobe_topic_loads_running&name[]=strobe_topic_loads_waiting",
            b.web_service_url.trim_end_matches('/')
        );
        let (status, body) = super::segments::call_broker(
            hyper::Method::GET,
            &url,
            &self.config.broker_client_token,
            Vec::new(),
            Duration::from_secs(2),
        )
        .await?;
        if status != 200 {
            return Err(format!("{url} answered {status}"));
        }
        Ok(String::from_utf8_lossy(&body)
            .lines()
            .filter(|l| l.starts_with("strobe_topic_loads_"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64)
    }

    /// Waits, at most [`SETTLE_WAIT`], until `dst` has loaded the topics of the bundles it
    /// took before: the next bundle's producers are held from the start of its transfer
    /// until their topics are loaded there, so starting it while `dst` still loads the
    /// previous ones holds them longer, while its clients are still served here.
    async fn wait_settled(&self, dst: &BrokerInfo) {
        let deadline = Instant::now() + SETTLE_WAIT;
        loop {
            match self.loads_at(dst).await {
                Ok(n)
                    if n > strobe_cluster::SETTLED_TOPIC_LOADS as u64
                        && Instant::now() < deadline => {}
                Ok(_) => return,
                Err(e) => {
                    debug!(dst = %dst.broker_id, error = %e, "no topic loads from the destination; going on");
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// On shutdown: every bundle this broker owns goes to the least loaded
    /// other broker, so clients move without a lookup or an error. One bundle
    /// at a time, each once its destination has loaded the topics of the one it
    /// took before: closing a bundle's topics costs little (a close leaves its
    /// log for the next open), loading them at the destination is what takes the
    /// time, and a bundle's producers wait from its close until their topic is
    /// loaded there (docs/performance.md, "SIGTERM at scale").
    pub async fn hand_off_bundles(&self) {
        let Some(c) = self.cluster().cloned() else {
            return;
        };
        let me = c.broker_id();
        let mut last: Option<String> = None;
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
            if last.as_deref() == Some(dst.broker_id.as_str()) {
                // The clients of the bundle just moved there are still reconnecting.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            self.wait_settled(&dst).await;
            last = Some(dst.broker_id.clone());
            if let Err(e) = self.transfer_bundle(ns, bundle, &dst.broker_id).await {
                warn!(bundle = %path, error = %e, "handing a bundle over at shutdown failed");
            }
        }
    }
}
