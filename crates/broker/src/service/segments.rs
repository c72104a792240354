//! Scalable topics as the topic service sees them (PIP-460). A `segment://`
//! is a persistent topic like any other, but no client's connect creates one
//! unless the topic's layout lists it as active (Pulsar re-creates only
//! those), so a producer that still holds an old layout cannot bring a
//! sealed or pruned segment back. A DAG watch session (`cnx::scalable`)
//! gets its layout here: created on first lookup when auto-creation allows,
//! and told as the DAG clients read, with each active segment's broker.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use strobe_layout::{Layout, SegmentLoad};
use strobe_model::{Position, TopicName};
use strobe_resources::{LayoutWatch, ResourcesError, ScalableSubscription};
use strobe_scalable::{ScalableError, SegmentStats, SegmentTopics, SubscriptionOp};
use strobe_wire::proto;
use tracing::{debug, info};

use super::BrokerService;
use crate::BrokerError;
use crate::subscription::{AdminOp, AdminReply, SeekTarget, StartPosition};

impl BrokerService {
    /// Creates segment `name`'s topic here (whatever its layout says: the
    /// controller creates a resize's segments before the layout lists them)
    /// with a cursor at its start for each of `subscriptions` it lacks.
    pub async fn create_segment(
        &self,
        name: &TopicName,
        subscriptions: &[String],
    ) -> Result<(), BrokerError> {
        let topic = self.segment_topic_for_controller(name).await?;
        let have = topic.durable_subscription_names();
        for sub in subscriptions.iter().filter(|s| !have.contains(s)) {
            match topic
                .create_subscription(sub, Some(Position::EARLIEST))
                .await
            {
                Ok(()) | Err(BrokerError::AlreadyExists(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Segment `name`'s topic as its controller sees it; `None` if it has none.
    pub async fn segment_stats(
        &self,
        name: &TopicName,
    ) -> Result<Option<SegmentStats>, BrokerError> {
        let topic = match self.topic(name, false).await {
            Ok(t) => t,
            Err(BrokerError::TopicNotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let (producers, consumers) = super::topics::clients_of(&topic);
        let mut backlogs = BTreeMap::new();
        for sub in topic.durable_subscription_names() {
            if let AdminReply::Info(info) = topic
                .subscription_for_admin(&sub)
                .await?
                .admin(AdminOp::Info)
                .await?
            {
                backlogs.insert(sub, info.backlog);
            }
        }
        Ok(Some(SegmentStats {
            producers: producers as u64,
            consumers: consumers as u64,
            terminated: topic.terminated().is_some(),
            entries: topic.ledger.stats().entries,
            backlogs,
            v4_clients: topic.v4_clients() as u64,
        }))
    }

    /// Terminates segment `name`'s topic (a missing one is left missing).
    pub async fn terminate_segment(&self, name: &TopicName) -> Result<(), BrokerError> {
        match self.terminate(name).await {
            Ok(_) | Err(BrokerError::TopicNotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `op` on subscription `sub` of segment `name` (see [`SubscriptionOp`]).
    pub async fn segment_subscription(
        &self,
        name: &TopicName,
        sub: &str,
        op: SubscriptionOp,
    ) -> Result<(), BrokerError> {
        let topic = self.topic(name, false).await?;
        let at = |ledger_id: u64| {
            AdminOp::Reset(SeekTarget::Message(StartPosition {
                ledger_id,
                entry_id: ledger_id,
                batch_index: -1,
            }))
        };
        let admin = match op {
            SubscriptionOp::Create => {
                return match topic
                    .create_subscription(sub, Some(Position::EARLIEST))
                    .await
                {
                    Ok(()) | Err(BrokerError::AlreadyExists(_)) => Ok(()),
                    Err(e) => Err(e),
                };
            }
            SubscriptionOp::Delete => {
                // Its consumers are closed first (they are the scalable
                // subscription's; the whole of it is going).
                topic.subscription_for_admin(sub).await?.close().await;
                return match topic.subscription_for_admin(sub).await {
                    Ok(h) => h.delete().await,
                    Err(BrokerError::SubscriptionNotFound(_)) => Ok(()),
                    Err(e) => Err(e),
                };
            }
            // MessageId.latest and .earliest, as the wire spells them.
            SubscriptionOp::SkipAll => at(i64::MAX as u64),
            SubscriptionOp::SeekEarliest => at(u64::MAX),
            SubscriptionOp::SeekTime(ts) => AdminOp::Reset(SeekTarget::PublishTime(ts)),
        };
        topic
            .subscription_for_admin(sub)
            .await?
            .admin(admin)
            .await?;
        Ok(())
    }

    /// Deletes segment `name`'s topic, disconnecting its clients.
    pub async fn delete_segment(&self, name: &TopicName) -> Result<(), BrokerError> {
        match self.delete_topic(name, true).await {
            Ok(()) | Err(BrokerError::TopicNotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Records, for every subscription of a scalable topic, the terminated
    /// segments loaded here that it has read to their end (a cursor with
    /// no backlog, or none at all: a subscription made after the seal has
    /// nothing to read there). The controller's coordinators watch these
    /// records to let a stream subscription read a segment's children: the
    /// owner tells them, where Pulsar's controller polls every segment's
    /// backlog over HTTP. Runs every second; a record is written once.
    pub(crate) async fn mark_drained_segments(&self) {
        let loaded = self.loaded_keeping(&self.drained_marked, |t| t.terminated().is_some());
        // One read of a scalable topic's subscriptions per round, however
        // many of its sealed segments are loaded here.
        let mut subs_of: HashMap<String, Vec<(String, ScalableSubscription)>> = HashMap::new();
        for t in loaded {
            if t.terminated().is_none() {
                continue;
            }
            // A segment, or a v4 topic sealed by a migration (PIP-475): a
            // legacy parent's id is its partition's index.
            let (parent, id) = match (t.name.segment(), t.name.scalable_parent()) {
                (Some(d), Some(parent)) => (parent, d.id),
                _ if t.name.domain() == strobe_model::Domain::Persistent => {
                    let v4 = t.name.partitioned_parent();
                    match TopicName::parse(&format!(
                        "topic://{}/{}",
                        v4.namespace(),
                        v4.local_name()
                    )) {
                        Ok(p) => (p, u64::from(t.name.partition().unwrap_or(0))),
                        Err(_) => continue,
                    }
                }
                _ => continue,
            };
            let key = t.name.to_string();
            let (ns, local) = (parent.namespace(), parent.local_name());
            let subs = match subs_of.get(&parent.to_string()) {
                Some(s) => s.clone(),
                None => match self.resources.scalable_subscriptions(ns, local).await {
                    Ok(s) => {
                        subs_of.insert(parent.to_string(), s.clone());
                        s
                    }
                    Err(e) => {
                        debug!(topic = %key, error = %e, "no subscriptions to mark drained");
                        continue;
                    }
                },
            };
            let cursors = t.durable_subscription_names();
            for (sub, _) in subs {
                let done = self
                    .drained_marked
                    .lock()
                    .get(&key)
                    .is_some_and(|m| m.contains(&sub));
                if done {
                    continue;
                }
                let drained = if cursors.contains(&sub) {
                    match t.subscription_for_admin(&sub).await {
                        Ok(h) => matches!(
                            h.admin(AdminOp::Info).await,
                            Ok(AdminReply::Info(i)) if i.backlog == 0
                        ),
                        Err(_) => false,
                    }
                } else {
                    true
                };
                if !drained {
                    continue;
                }
                match self.resources.mark_drained(ns, local, &sub, id).await {
                    Ok(()) => {
                        debug!(segment = %key, subscription = %sub, "drained");
                        self.drained_marked
                            .lock()
                            .entry(key.clone())
                            .or_default()
                            .insert(sub);
                    }
                    Err(e) => debug!(segment = %key, error = %e, "could not record drained"),
                }
            }
        }
    }

    /// The loaded topics that `keep` picks, after forgetting in `per_topic`
    /// those no longer loaded. Runs every second: with 100,000 topics loaded
    /// and none of them a segment, copying every name into a set for the
    /// check and every topic into the answer was a twenty-fifth of a
    /// broker's CPU while it reloaded a lost broker's topics (issue 47).
    fn loaded_keeping<V>(
        &self,
        per_topic: &parking_lot::Mutex<HashMap<String, V>>,
        keep: impl Fn(&crate::topic::Topic) -> bool,
    ) -> Vec<Arc<crate::topic::Topic>> {
        let topics = self.topics.lock();
        {
            let mut per_topic = per_topic.lock();
            if !per_topic.is_empty() {
                per_topic.retain(|k, _| topics.contains_key(k));
            }
        }
        topics.values().filter(|t| keep(t)).cloned().collect()
    }

    /// PIP-483's load records: each active segment loaded here writes its
    /// rates when one moved by more than a quarter (or to or from zero).
    /// An unchanged load is not written again: the record's time is when
    /// the segment went quiet, which a merge's window counts from.
    pub(crate) async fn report_segment_loads(&self, now_ms: u64) {
        for t in self.loaded_keeping(&self.load_reported, |t| t.name.segment().is_some()) {
            let (Some(d), Some(parent)) = (t.name.segment(), t.name.scalable_parent()) else {
                continue;
            };
            if t.terminated().is_some() {
                continue;
            }
            let r = *t.counters.rates.lock();
            let load = SegmentLoad {
                msg_rate_in: r.msg_in,
                bytes_rate_in: r.bytes_in,
                msg_rate_out: r.msg_out,
                bytes_rate_out: r.bytes_out,
                since_ms: now_ms,
            };
            let key = t.name.to_string();
            let last = self.load_reported.lock().get(&key).copied();
            if last.is_some_and(|l| !moved(&l, &load)) {
                continue;
            }
            match self
                .resources
                .put_segment_load(parent.namespace(), parent.local_name(), d.id, &load)
                .await
            {
                Ok(()) => {
                    self.load_reported.lock().insert(key, load);
                }
                Err(e) => debug!(segment = %key, error = %e, "could not record the load"),
            }
        }
    }

    /// The segment operations a controller on this broker makes: here when
    /// this broker owns the segment, else at its owner's admin API.
    pub fn segment_topics(&self) -> Arc<dyn SegmentTopics> {
        Arc::new(BrokerSegments {
            service: self.me.clone(),
        })
    }

    /// Whether the layout of `segment`'s scalable topic lists it, with the
    /// same range, as active.
    pub(crate) async fn segment_is_active(&self, segment: &TopicName) -> Result<bool, BrokerError> {
        let (Some(d), Some(parent)) = (segment.segment(), segment.scalable_parent()) else {
            return Ok(false);
        };
        let Some(layout) = self
            .resources
            .layout(parent.namespace(), parent.local_name())
            .await?
        else {
            return Ok(false);
        };
        Ok(layout
            .value
            .get(d.id)
            .is_ok_and(|s| s.is_active() && s.hash_range == d.range))
    }

    /// The layout of `topic` (a `topic://`) now and its changes from then on.
    /// A topic without one gets one segment when `create` and the broker's
    /// auto-creation allow (Pulsar's `create_if_missing`); else it is not found.
    pub async fn watch_layout(
        &self,
        topic: &TopicName,
        create: bool,
    ) -> Result<(Option<Layout>, LayoutWatch), BrokerError> {
        let (ns, local) = (topic.namespace(), topic.local_name());
        let (current, watch) = self.stored_layout_watch(topic).await?;
        if let Some(l) = current {
            return Ok((Some(l), watch));
        }
        if !(create && self.auto_topic_creation(ns).0) {
            return Err(BrokerError::TopicNotFound(format!(
                "scalable topic {topic} does not exist"
            )));
        }
        let layout = Layout::create(
            1,
            self.config.scalable_topic_entry_bucket_budget,
            BTreeMap::new(),
            now_ms(),
        )
        .map_err(|e| BrokerError::NotAllowed(e.to_string()))?;
        match self.resources.create_layout(ns, local, &layout).await {
            Ok(_) => {
                info!(%topic, "created scalable topic with one segment");
                Ok((Some(layout), watch))
            }
            // Another session (or broker) created it first: its layout comes
            // through the watch, which started before either write.
            Err(ResourcesError::AlreadyExists(_)) => Ok((None, watch)),
            Err(e) => Err(e.into()),
        }
    }

    /// The v4 topics a synthetic or migrated layout of `persistent://` topic
    /// `v4` stands for: its partitions, or itself when it is not
    /// partitioned (or does not exist yet: Pulsar serves it the same way).
    pub async fn legacy_topics(&self, v4: &TopicName) -> Result<Vec<String>, BrokerError> {
        let n = self.partitioned_metadata(v4, false).await?;
        Ok(if n == 0 {
            vec![v4.to_string()]
        } else {
            (0..n).map(|i| format!("{v4}-partition-{i}")).collect()
        })
    }

    /// Topic `topic`'s stored layout, if any, and a watch from it on; a
    /// missing namespace is TopicNotFound.
    async fn stored_layout_watch(
        &self,
        topic: &TopicName,
    ) -> Result<(Option<Layout>, LayoutWatch), BrokerError> {
        let ns = topic.namespace();
        if !self.namespace_exists(ns) {
            return Err(BrokerError::TopicNotFound(format!(
                "namespace {ns} does not exist"
            )));
        }
        Ok(self.resources.watch_layout(ns, topic.local_name()).await?)
    }

    /// Migrates v4 topic `v4` (`persistent://`) to the scalable topic of
    /// the same name (PIP-475; see `strobe_scalable::migrate`), then lets
    /// its controller start.
    pub async fn migrate_to_scalable(
        &self,
        v4: &TopicName,
        force: bool,
    ) -> Result<Layout, BrokerError> {
        if !self.namespace_exists(v4.namespace()) {
            return Err(BrokerError::TopicNotFound(format!(
                "namespace {} does not exist",
                v4.namespace()
            )));
        }
        let topic = TopicName::parse(&format!("topic://{}/{}", v4.namespace(), v4.local_name()))?;
        let partitioned = self.partitioned_metadata(v4, false).await? > 0;
        let layout = strobe_scalable::migrate(
            strobe_scalable::Migration {
                topic: &topic,
                legacy: self.legacy_topics(v4).await?,
                partitioned,
                bucket_budget: self.config.scalable_topic_entry_bucket_budget,
                force,
                now_ms: now_ms(),
            },
            &self.resources,
            self.segment_topics().as_ref(),
        )
        .await?;
        self.touch_controller(&topic);
        Ok(layout)
    }

    /// A DAG watch on a `persistent://` name (PIP-475): the scalable
    /// topic's layout when it has one (a migrated topic), else a synthetic
    /// layout of the v4 topic, never stored; the watch goes on, so a
    /// migration's layout replaces the synthetic one.
    pub async fn watch_legacy_layout(
        &self,
        topic: &TopicName,
        v4: &TopicName,
    ) -> Result<(Layout, bool, LayoutWatch), BrokerError> {
        let (current, watch) = self.stored_layout_watch(topic).await?;
        if let Some(l) = current {
            return Ok((l, false, watch));
        }
        let legacy = self.legacy_topics(v4).await?;
        let layout = Layout::synthetic(&legacy, now_ms())
            .map_err(|e| BrokerError::NotAllowed(e.to_string()))?;
        Ok((layout, true, watch))
    }

    /// `layout` as clients read it (`ScalableTopicDAG`): every segment, the
    /// broker serving each active one for `listener` (a segment whose lookup
    /// fails is left out: the client looks it up itself), and the broker
    /// leading the topic's controller.
    pub async fn dag(
        &self,
        topic: &TopicName,
        layout: &Layout,
        listener: Option<&str>,
    ) -> proto::ScalableTopicDag {
        // A synthetic layout (every segment a v4 topic, none sealed) has no
        // controller: nothing of it is stored to control.
        let synthetic = layout
            .segments
            .values()
            .all(|s| s.is_legacy() && s.is_active());
        let controller = match synthetic {
            true => None,
            false => self.controller_urls(topic, listener).await,
        };
        let mut brokers = Vec::new();
        for s in layout.active() {
            let Some(name) = s.topic_name(topic) else {
                continue;
            };
            match self.lookup_target_for(&name, listener).await {
                Ok(t) => brokers.push(proto::SegmentBrokerAddress {
                    segment_id: s.segment_id,
                    broker_url: t.service_url,
                    broker_url_tls: t.service_url_tls,
                }),
                Err(e) => {
                    debug!(segment = %name, error = %e, "no broker for the segment in the DAG")
                }
            }
        }
        proto::ScalableTopicDag {
            epoch: layout.epoch,
            segments: layout
                .segments
                .values()
                .map(|s| proto::SegmentInfoProto {
                    segment_id: s.segment_id,
                    hash_start: u32::from(s.hash_range.start),
                    hash_end: u32::from(s.hash_range.end),
                    state: (if s.is_active() {
                        proto::SegmentState::Active
                    } else {
                        proto::SegmentState::Sealed
                    }) as i32,
                    parent_ids: s.parent_ids.clone(),
                    child_ids: s.child_ids.clone(),
                    created_at_epoch: s.created_at_epoch,
                    sealed_at_epoch: s.sealed_at_epoch,
                    created_at_ms: Some(s.created_at_ms),
                    sealed_at_ms: s.sealed_at_ms,
                    legacy_topic_name: s.legacy_topic_name.clone(),
                    entry_bucket_splits: s.entry_bucket_splits.clone(),
                })
                .collect(),
            segment_brokers: brokers,
            controller_broker_url: controller.as_ref().map(|c| c.0.clone()),
            controller_broker_url_tls: controller.and_then(|c| c.1),
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Whether a rate of `now` moved by more than a quarter from `before`, or
/// to or from zero.
fn moved(before: &SegmentLoad, now: &SegmentLoad) -> bool {
    [
        (before.msg_rate_in, now.msg_rate_in),
        (before.bytes_rate_in, now.bytes_rate_in),
        (before.msg_rate_out, now.msg_rate_out),
        (before.bytes_rate_out, now.bytes_rate_out),
    ]
    .iter()
    .any(|(a, b)| (*a == 0.0) != (*b == 0.0) || (b - a).abs() > 0.25 * a.abs())
}

/// [`SegmentTopics`] on a broker: each call runs where the segment's bundle
/// is owned (assigned by a lookup if nobody owns it): here, or at the owner's
/// `/admin/v2/segments/...` (which forwards again if the bundle moved).
struct BrokerSegments {
    service: Weak<BrokerService>,
}

impl std::fmt::Debug for BrokerSegments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BrokerSegments")
    }
}

/// One HTTP client for every broker-to-broker call a controller makes.
fn http() -> &'static Client<HttpConnector, Full<Bytes>> {
    static CLIENT: OnceLock<Client<HttpConnector, Full<Bytes>>> = OnceLock::new();
    CLIENT.get_or_init(|| Client::builder(TokioExecutor::new()).build_http())
}

/// `method` on another broker's admin `url` with a JSON `body`, as this broker (its
/// `broker_client_token`): the answer's status and body. `within` bounds the wait for the answer.
pub(crate) async fn call_broker(
    method: hyper::Method,
    url: &str,
    token: &str,
    body: Vec<u8>,
    within: Duration,
) -> Result<(u16, Bytes), String> {
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json");
    if !token.is_empty() {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let answer = tokio::time::timeout(within, http().request(req))
        .await
        .map_err(|_| format!("{url} did not answer within {within:?}"))?
        .map_err(|e| format!("{url}: {e}"))?;
    let status = answer.status().as_u16();
    let body = answer
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}

/// The admin path of a segment: `/admin/v2/segments/{t}/{ns}/{topic}/{descriptor}`.
pub(crate) fn segment_admin_path(name: &TopicName) -> Option<String> {
    if name.domain() == strobe_model::Domain::Persistent {
        // A legacy segment (PIP-475): the v4 topic, named whole.
        let local = strobe_resources::paths::encode_local(name.local_name()).replace('+', "%20");
        return Some(format!(
            "/admin/v2/segments/{}/{local}/{LEGACY_DESCRIPTOR}",
            name.namespace()
        ));
    }
    let d = name.segment()?;
    let parent = name.scalable_parent()?;
    let local = strobe_resources::paths::encode_local(parent.local_name()).replace('+', "%20");
    Some(format!(
        "/admin/v2/segments/{}/{local}/{d}",
        parent.namespace()
    ))
}

/// The descriptor by which `/admin/v2/segments/{t}/{ns}/{topic}/...` names
/// the v4 topic `persistent://{t}/{ns}/{topic}` (a legacy segment) rather
/// than a `segment://`: brokers ask it of each other, clients never.
pub const LEGACY_DESCRIPTOR: &str = "v4";

fn failed(name: &TopicName, e: impl std::fmt::Display) -> ScalableError {
    ScalableError::Segment {
        segment: name.to_string(),
        reason: e.to_string(),
    }
}

impl BrokerSegments {
    fn service(&self) -> Result<Arc<BrokerService>, ScalableError> {
        self.service
            .upgrade()
            .ok_or_else(|| ScalableError::NotLeader("the broker is shutting down".into()))
    }

    /// `None`: this broker owns `name`; else the owner's web URL.
    async fn owner(
        &self,
        s: &BrokerService,
        name: &TopicName,
    ) -> Result<Option<String>, ScalableError> {
        if s.cluster().is_none() {
            return Ok(None);
        }
        let target = s
            .lookup_target_for(name, None)
            .await
            .map_err(|e| failed(name, e))?;
        Ok((!target.local).then_some(target.http_url))
    }

    /// `method` on the owner's `path` + `suffix`; the answer's status and body.
    async fn call(
        &self,
        base: &str,
        name: &TopicName,
        method: hyper::Method,
        suffix: &str,
        body: Vec<u8>,
    ) -> Result<(u16, Bytes), ScalableError> {
        let path = segment_admin_path(name).ok_or_else(|| failed(name, "not a segment"))?;
        let url = format!("{}{path}{suffix}", base.trim_end_matches('/'));
        let token = self.service()?.config.broker_client_token.clone();
        let (status, body) = call_broker(method, &url, &token, body, Duration::from_secs(30))
            .await
            .map_err(|e| failed(name, e))?;
        if status >= 300 && status != 404 {
            return Err(failed(
                name,
                format!(
                    "{url} answered {status}: {}",
                    String::from_utf8_lossy(&body)
                ),
            ));
        }
        Ok((status, body))
    }
}

#[async_trait::async_trait]
impl SegmentTopics for BrokerSegments {
    async fn create(
        &self,
        name: &TopicName,
        subscriptions: &[String],
    ) -> Result<(), ScalableError> {
        let s = self.service()?;
        match self.owner(&s, name).await? {
            None => s
                .create_segment(name, subscriptions)
                .await
                .map_err(|e| failed(name, e)),
            Some(url) => {
                let body = serde_json::to_vec(subscriptions).unwrap_or_default();
                match self.call(&url, name, hyper::Method::PUT, "", body).await? {
                    (404, body) => Err(failed(name, String::from_utf8_lossy(&body))),
                    _ => Ok(()),
                }
            }
        }
    }

    async fn stats(&self, name: &TopicName) -> Result<Option<SegmentStats>, ScalableError> {
        let s = self.service()?;
        match self.owner(&s, name).await? {
            None => s.segment_stats(name).await.map_err(|e| failed(name, e)),
            Some(url) => match self
                .call(&url, name, hyper::Method::GET, "/stats", Vec::new())
                .await?
            {
                (404, _) => Ok(None),
                (_, body) => serde_json::from_slice(&body)
                    .map(Some)
                    .map_err(|e| failed(name, e)),
            },
        }
    }

    async fn terminate(&self, name: &TopicName) -> Result<(), ScalableError> {
        let s = self.service()?;
        match self.owner(&s, name).await? {
            None => s.terminate_segment(name).await.map_err(|e| failed(name, e)),
            Some(url) => {
                self.call(&url, name, hyper::Method::POST, "/terminate", Vec::new())
                    .await?;
                Ok(())
            }
        }
    }

    async fn subscription(
        &self,
        name: &TopicName,
        sub: &str,
        op: SubscriptionOp,
    ) -> Result<(), ScalableError> {
        let s = self.service()?;
        match self.owner(&s, name).await? {
            None => s
                .segment_subscription(name, sub, op)
                .await
                .map_err(|e| failed(name, e)),
            Some(url) => {
                let sub = strobe_resources::paths::encode_local(sub).replace('+', "%20");
                let (method, suffix) = match op {
                    SubscriptionOp::Create => (hyper::Method::PUT, format!("/subscription/{sub}")),
                    SubscriptionOp::Delete => {
                        (hyper::Method::DELETE, format!("/subscription/{sub}"))
                    }
                    SubscriptionOp::SkipAll => {
                        (hyper::Method::POST, format!("/subscription/{sub}/skip-all"))
                    }
                    SubscriptionOp::SeekEarliest => (
                        hyper::Method::POST,
                        format!("/subscription/{sub}/seek?earliest=true"),
                    ),
                    SubscriptionOp::SeekTime(ts) => (
                        hyper::Method::POST,
                        format!("/subscription/{sub}/seek?timestamp={ts}"),
                    ),
                };
                match self.call(&url, name, method, &suffix, Vec::new()).await? {
                    (404, body) => Err(failed(name, String::from_utf8_lossy(&body))),
                    _ => Ok(()),
                }
            }
        }
    }

    async fn delete(&self, name: &TopicName) -> Result<(), ScalableError> {
        let s = self.service()?;
        match self.owner(&s, name).await? {
            None => s.delete_segment(name).await.map_err(|e| failed(name, e)),
            Some(url) => {
                self.call(&url, name, hyper::Method::DELETE, "?force=true", Vec::new())
                    .await?;
                Ok(())
            }
        }
    }
}
