//! Scalable topics' layout documents (Pulsar's `ScalableTopicResources`):
//! read, created and replaced only by compare-and-set, and checked against
//! the layout's invariants whenever they are read, so a document that is
//! not a layout is an error naming its path, never a DAG handed to clients.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use strobe_layout::{Layout, PendingResize};
use strobe_metadata::{
    Expect, MetadataError, MetadataStore, Op, OpResult, TxnResponse, WatchStream,
};

use crate::error::ResourcesError;
use crate::paths;
use crate::store::{Resources, Versioned, decode, encode};

impl Resources {
    /// The layout of `topic://<ns>/<local>`, with the version to replace it against.
    pub async fn layout(
        &self,
        ns: &str,
        local: &str,
    ) -> Result<Option<Versioned<Layout>>, ResourcesError> {
        let path = paths::scalable_topic(ns, local);
        let Some(v) = self.store().get(&path).await? else {
            return Ok(None);
        };
        Ok(Some(Versioned {
            value: decode_layout(&path, &v.value)?,
            version: v.stat.version,
        }))
    }

    /// The layout of `topic://<ns>/<local>` now (`None`: it has none), and
    /// its changes from then on, without a gap between the two.
    pub async fn watch_layout(
        &self,
        ns: &str,
        local: &str,
    ) -> Result<(Option<Layout>, LayoutWatch), ResourcesError> {
        let path = paths::scalable_topic(ns, local);
        let (scan, followed) = Followed::start(self.store(), &path).await?;
        let current = scan
            .entries
            .iter()
            .find(|e| e.key == path)
            .map(|kv| decode_layout(&path, &kv.value))
            .transpose()?;
        Ok((current, LayoutWatch { f: followed }))
    }

    /// Records a new scalable topic's layout; `AlreadyExists` if it has one.
    pub async fn create_layout(
        &self,
        ns: &str,
        local: &str,
        layout: &Layout,
    ) -> Result<u64, ResourcesError> {
        let path = paths::scalable_topic(ns, local);
        self.create(
            &path,
            layout,
            &format!("scalable topic topic://{ns}/{local}"),
        )
        .await
    }

    /// Replaces the layout read at `version`; `Conflict` if it changed since
    /// (another controller, or this one's earlier step, wrote first).
    pub async fn replace_layout(
        &self,
        ns: &str,
        local: &str,
        layout: &Layout,
        version: u64,
    ) -> Result<u64, ResourcesError> {
        self.commit_layout(ns, local, layout, version, None, None)
            .await
    }

    /// Replaces the layout read at `version` and, in the same transaction,
    /// ends the resize recorded at `resize` (its version) and checks `fence`
    /// (the controller's leadership). `Conflict` if any of them moved.
    pub async fn commit_layout(
        &self,
        ns: &str,
        local: &str,
        layout: &Layout,
        version: u64,
        resize: Option<u64>,
        fence: Option<Op>,
    ) -> Result<u64, ResourcesError> {
        let path = paths::scalable_topic(ns, local);
        let mut ops = vec![Op::put_if(
            path.clone(),
            encode(layout),
            Expect::Version(version),
        )];
        if let Some(v) = resize {
            ops.push(Op::delete(paths::scalable_resize(ns, local), Some(v)));
        }
        ops.extend(fence);
        match self.store().txn(ops).await {
            Ok(r) => Ok(put_version(&r).unwrap_or(version + 1)),
            Err(MetadataError::BadVersion { .. } | MetadataError::NotFound(_)) => {
                Err(ResourcesError::Conflict(format!(
                    "the layout of topic://{ns}/{local} (or its resize, or its controller's leadership) changed since version {version}"
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The resize a controller began on `topic://<ns>/<local>` and has not
    /// finished, with its version.
    pub async fn pending_resize(
        &self,
        ns: &str,
        local: &str,
    ) -> Result<Option<Versioned<PendingResize>>, ResourcesError> {
        self.get(&paths::scalable_resize(ns, local)).await
    }

    /// Records a resize before its first step; `Conflict` if another is
    /// pending or `fence` fails.
    pub async fn begin_resize(
        &self,
        ns: &str,
        local: &str,
        resize: &PendingResize,
        fence: Option<Op>,
    ) -> Result<u64, ResourcesError> {
        let path = paths::scalable_resize(ns, local);
        let mut ops = vec![Op::put_if(path.clone(), encode(resize), Expect::Absent)];
        ops.extend(fence);
        match self.store().txn(ops).await {
            Ok(r) => Ok(put_version(&r).unwrap_or(1)),
            Err(
                MetadataError::AlreadyExists(_)
                | MetadataError::BadVersion { .. }
                | MetadataError::NotFound(_),
            ) => Err(ResourcesError::Conflict(format!(
                "topic://{ns}/{local} has a resize in progress (or its controller lost its leadership)"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// Forgets a finished resize (one whose layout was written before).
    pub async fn end_resize(
        &self,
        ns: &str,
        local: &str,
        version: u64,
    ) -> Result<(), ResourcesError> {
        self.unmark(&paths::scalable_resize(ns, local), Some(version))
            .await
    }

    /// Deletes `path` (at `version`, if given) unless it is gone already.
    async fn unmark(&self, path: &str, version: Option<u64>) -> Result<(), ResourcesError> {
        match self.store().delete(path, version).await {
            Ok(()) | Err(MetadataError::NotFound(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The subscriptions of `topic://<ns>/<local>` the metadata knows (made
    /// through the admin API or by a consumer's registration), by name.
    pub async fn scalable_subscriptions(
        &self,
        ns: &str,
        local: &str,
    ) -> Result<Vec<(String, ScalableSubscription)>, ResourcesError> {
        let prefix = paths::scalable_subscriptions(ns, local);
        let scan = self.store().scan_prefix(&prefix).await?;
        let mut out = Vec::new();
        for kv in scan.entries {
            let rest = &kv.key[prefix.len()..];
            if rest.contains('/') {
                continue;
            }
            let Some(name) = paths::decode_local(rest) else {
                continue;
            };
            out.push((name, decode(&kv.key, &kv.value)?));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Records a subscription; `AlreadyExists` if the topic has it.
    pub async fn create_scalable_subscription(
        &self,
        ns: &str,
        local: &str,
        sub: &str,
        info: &ScalableSubscription,
    ) -> Result<(), ResourcesError> {
        self.create(
            &paths::scalable_subscription(ns, local, sub),
            info,
            &format!("subscription {sub} of topic://{ns}/{local}"),
        )
        .await
        .map(|_| ())
    }

    /// The consumers registered in subscription `sub`, by name.
    pub async fn scalable_consumers(
        &self,
        ns: &str,
        local: &str,
        sub: &str,
    ) -> Result<Vec<String>, ResourcesError> {
        let prefix = format!(
            "{}/consumers/",
            paths::scalable_subscription(ns, local, sub)
        );
        let mut out: Vec<String> = self
            .store()
            .list_keys(&prefix)
            .await?
            .iter()
            .filter_map(|k| paths::decode_local(&k[prefix.len()..]))
            .collect();
        out.sort();
        Ok(out)
    }

    /// Registers consumer `name` in `sub` (the record is empty, as
    /// Pulsar's: the assignment is computed, not stored). Idempotent.
    pub async fn register_scalable_consumer(
        &self,
        ns: &str,
        local: &str,
        sub: &str,
        name: &str,
    ) -> Result<(), ResourcesError> {
        self.mark(&paths::scalable_consumer(ns, local, sub, name))
            .await
    }

    /// Writes the empty marker `path` unless it exists.
    async fn mark(&self, path: &str) -> Result<(), ResourcesError> {
        match self.store().put(path, b"{}", Expect::Absent).await {
            Ok(_) | Err(MetadataError::AlreadyExists(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Forgets consumer `name` of `sub`.
    pub async fn unregister_scalable_consumer(
        &self,
        ns: &str,
        local: &str,
        sub: &str,
        name: &str,
    ) -> Result<(), ResourcesError> {
        self.unmark(&paths::scalable_consumer(ns, local, sub, name), None)
            .await
    }

    /// Wakes on every change of a scalable topic's document or of anything
    /// beneath it (its subscriptions, drained markers, controller).
    pub async fn watch_scalable_tree(
        &self,
        ns: &str,
        local: &str,
    ) -> Result<((), TreeWatch), ResourcesError> {
        let path = paths::scalable_topic(ns, local);
        let (_, f) = Followed::start(self.store(), &path).await?;
        Ok(((), TreeWatch { f }))
    }

    /// Writes the load record of `segment` (its owner does, when a rate moved).
    pub async fn put_segment_load(
        &self,
        ns: &str,
        local: &str,
        segment: u64,
        load: &strobe_layout::SegmentLoad,
    ) -> Result<(), ResourcesError> {
        let path = paths::scalable_segment_load(ns, local, segment);
        self.store().put(&path, &encode(load), Expect::Any).await?;
        Ok(())
    }

    /// Every segment's load record, by segment id.
    pub async fn segment_loads(
        &self,
        ns: &str,
        local: &str,
    ) -> Result<std::collections::BTreeMap<u64, strobe_layout::SegmentLoad>, ResourcesError> {
        let prefix = format!("{}/segments/", paths::scalable_topic(ns, local));
        let scan = self.store().scan_prefix(&prefix).await?;
        let mut out = std::collections::BTreeMap::new();
        for kv in scan.entries {
            let Some(id) = kv.key[prefix.len()..]
                .strip_suffix("/load")
                .and_then(|i| i.parse().ok())
            else {
                continue;
            };
            out.insert(id, decode(&kv.key, &kv.value)?);
        }
        Ok(out)
    }

    /// Forgets a pruned segment's load record.
    pub async fn delete_segment_load(
        &self,
        ns: &str,
        local: &str,
        segment: u64,
    ) -> Result<(), ResourcesError> {
        self.unmark(&paths::scalable_segment_load(ns, local, segment), None)
            .await
    }

    /// Records that `sub` has read sealed segment `segment` to its end
    /// (its segment's owner writes it; the controller's coordinator
    /// watches for it). Idempotent.
    pub async fn mark_drained(
        &self,
        ns: &str,
        local: &str,
        sub: &str,
        segment: u64,
    ) -> Result<(), ResourcesError> {
        self.mark(&paths::scalable_drained(ns, local, sub, segment))
            .await
    }

    /// The segments `sub` has read to their end.
    pub async fn drained(
        &self,
        ns: &str,
        local: &str,
        sub: &str,
    ) -> Result<std::collections::BTreeSet<u64>, ResourcesError> {
        let prefix = format!("{}/drained/", paths::scalable_subscription(ns, local, sub));
        Ok(self
            .store()
            .list_keys(&prefix)
            .await?
            .iter()
            .filter_map(|k| k[prefix.len()..].parse().ok())
            .collect())
    }

    /// Forgets a subscription and what lives beneath it; `false` if there was none.
    pub async fn delete_scalable_subscription(
        &self,
        ns: &str,
        local: &str,
        sub: &str,
    ) -> Result<bool, ResourcesError> {
        let path = paths::scalable_subscription(ns, local, sub);
        let existed = self.store().exists(&path).await?;
        self.delete_tree(&path).await?;
        Ok(existed)
    }

    /// Deletes a scalable topic's document and everything beneath it (its
    /// subscriptions, a pending resize, its controller's key), the document
    /// last, so a topic half deleted is still found and deleted again.
    pub async fn delete_scalable_topic(&self, ns: &str, local: &str) -> Result<(), ResourcesError> {
        self.delete_tree(&paths::scalable_topic(ns, local)).await
    }

    /// Deletes `path` and every key beneath `path/`, deepest first.
    async fn delete_tree(&self, path: &str) -> Result<(), ResourcesError> {
        let below = format!("{path}/");
        let mut keys: Vec<String> = self.store().list_keys(&below).await?.into_iter().collect();
        keys.sort_by_key(|k| std::cmp::Reverse(k.len()));
        keys.push(path.to_owned());
        for k in keys {
            match self.store().delete(&k, None).await {
                Ok(()) | Err(MetadataError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Every scalable topic with a resize in progress, as (namespace, local
    /// name): a broker starting finishes them without waiting for a client.
    pub async fn pending_resizes(&self) -> Result<Vec<(String, String)>, ResourcesError> {
        let prefix = format!("{}/", paths::SCALABLE_TOPICS);
        let mut out = Vec::new();
        for k in self.store().list_keys(&prefix).await? {
            let Some(rest) = k[prefix.len()..].strip_suffix("/resize") else {
                continue;
            };
            // {tenant}/{ns}/{encoded local}: the local name has no '/' left.
            let mut parts = rest.splitn(3, '/');
            let (Some(t), Some(n), Some(enc)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            if enc.contains('/') {
                continue;
            }
            if let Some(local) = paths::decode_local(enc) {
                out.push((format!("{t}/{n}"), local));
            }
        }
        Ok(out)
    }

    /// A namespace's scalable topics now (local name → properties) and
    /// their creations, changes and deletions from then on, without a gap.
    pub async fn watch_scalable_topics(
        &self,
        ns: &str,
    ) -> Result<(ScalableTopics, ScalableTopicsWatch), ResourcesError> {
        let prefix = paths::scalable_topics_of(ns);
        let (scan, f) = Followed::start(self.store(), &prefix).await?;
        let now = topics_in(
            &prefix,
            scan.entries.iter().map(|e| (e.key.as_str(), &e.value[..])),
        );
        Ok((now, ScalableTopicsWatch { f }))
    }

    /// The local names of a namespace's scalable topics.
    pub async fn scalable_topics_of(&self, ns: &str) -> Result<Vec<String>, ResourcesError> {
        let prefix = paths::scalable_topics_of(ns);
        let mut out: Vec<String> = self
            .store()
            .list_keys(&prefix)
            .await?
            .into_iter()
            .filter_map(|k| {
                let rest = &k[prefix.len()..];
                (!rest.contains('/'))
                    .then(|| paths::decode_local(rest))
                    .flatten()
            })
            .collect();
        out.sort();
        Ok(out)
    }
}

/// A scalable topic's subscription as the metadata records it (Pulsar's
/// `SubscriptionMetadata`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalableSubscription {
    /// `STREAM`, `QUEUE` or `CHECKPOINT`.
    #[serde(rename = "type", default = "stream")]
    pub kind: String,
}

fn stream() -> String {
    "STREAM".into()
}

/// Changes under one scalable topic's document (see [`Resources::watch_scalable_tree`]).
#[derive(Debug)]
pub struct TreeWatch {
    f: Followed,
}

impl TreeWatch {
    /// Waits for the next change (`Ok`); `None` once the store closed. A
    /// watch that fell behind the store's history reports a change too.
    pub async fn next(&mut self) -> Option<Result<(), ResourcesError>> {
        let below = format!("{}/", self.f.prefix);
        loop {
            match self.f.stream.next().await? {
                Ok(b) => {
                    if b.events
                        .iter()
                        .any(|e| e.key == self.f.prefix || e.key.starts_with(&below))
                    {
                        return Some(Ok(()));
                    }
                }
                Err(MetadataError::Compacted { .. }) => {
                    return Some(self.f.restart().await.map(|_| ()));
                }
                Err(e) => return Some(Err(e.into())),
            }
        }
    }
}

/// A namespace's scalable topics: local name → properties.
pub type ScalableTopics =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>;

/// The topic documents among `entries` (key, value) under `prefix`; a
/// document that does not decode is left out (the DAG session reports it).
fn topics_in<'a>(
    prefix: &str,
    entries: impl Iterator<Item = (&'a str, &'a [u8])>,
) -> ScalableTopics {
    entries
        .filter_map(|(k, v)| {
            let local = topic_key(prefix, k)?;
            let layout: Layout = decode(k, v).ok()?;
            Some((local, layout.properties))
        })
        .collect()
}

/// The local name a key under `prefix` is the document of, if it is one.
fn topic_key(prefix: &str, key: &str) -> Option<String> {
    let rest = key.strip_prefix(prefix)?;
    if rest.contains('/') {
        return None;
    }
    paths::decode_local(rest)
}

/// One change among a namespace's scalable topics.
#[derive(Debug, Clone, PartialEq)]
pub enum TopicsChange {
    /// Created or rewritten, with its properties now.
    Put(String, std::collections::BTreeMap<String, String>),
    Deleted(String),
    /// The watch fell behind the store's history: the whole set again.
    Reset(ScalableTopics),
}

/// Changes of a namespace's scalable topics (see [`Resources::watch_scalable_topics`]).
#[derive(Debug)]
pub struct ScalableTopicsWatch {
    f: Followed,
}

impl ScalableTopicsWatch {
    /// The next batch of changes (what lives beneath a topic's document is
    /// not a change of the set); `None` once the store closed.
    pub async fn next(&mut self) -> Option<Result<Vec<TopicsChange>, ResourcesError>> {
        loop {
            let batch = match self.f.stream.next().await? {
                Ok(b) => b,
                Err(MetadataError::Compacted { .. }) => {
                    return Some(self.restart().await.map(|t| vec![TopicsChange::Reset(t)]));
                }
                Err(e) => return Some(Err(e.into())),
            };
            let changes: Vec<TopicsChange> = batch
                .events
                .iter()
                .filter_map(|e| {
                    let local = topic_key(&self.f.prefix, &e.key)?;
                    Some(match &e.value {
                        None => TopicsChange::Deleted(local),
                        Some(v) => match decode::<Layout>(&e.key, v) {
                            Ok(l) => TopicsChange::Put(local, l.properties),
                            Err(_) => return None,
                        },
                    })
                })
                .collect();
            if !changes.is_empty() {
                return Some(Ok(changes));
            }
        }
    }

    async fn restart(&mut self) -> Result<ScalableTopics, ResourcesError> {
        let scan = self.f.restart().await?;
        Ok(topics_in(
            &self.f.prefix,
            scan.entries.iter().map(|e| (e.key.as_str(), &e.value[..])),
        ))
    }
}

/// What changed about a scalable topic (see [`LayoutWatch::next`]).
#[derive(Debug, Clone, PartialEq)]
pub enum LayoutChange {
    /// The layout document was written (`None`: deleted); boxed, as it
    /// dwarfs the other change.
    Layout(Option<Box<Layout>>),
    /// Its controller's leader changed.
    Controller,
}

/// Changes of one layout document, as [`Resources::watch_layout`] follows it.
#[derive(Debug)]
pub struct LayoutWatch {
    f: Followed,
}

/// A prefix of the store followed from a scan's revision on, without a
/// gap: what the watches here share.
struct Followed {
    store: Arc<dyn MetadataStore>,
    prefix: String,
    stream: WatchStream,
}

impl std::fmt::Debug for Followed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Followed")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Followed {
    async fn start(
        store: &Arc<dyn MetadataStore>,
        prefix: &str,
    ) -> Result<(strobe_metadata::Scan, Followed), ResourcesError> {
        let scan = store.scan_prefix(prefix).await?;
        let stream = store.watch(prefix, scan.revision + 1).await?;
        Ok((
            scan,
            Followed {
                store: store.clone(),
                prefix: prefix.to_owned(),
                stream,
            },
        ))
    }

    /// Scans again and follows from there (the watch fell behind the
    /// store's history).
    async fn restart(&mut self) -> Result<strobe_metadata::Scan, ResourcesError> {
        let (scan, again) = Followed::start(&self.store, &self.prefix).await?;
        self.stream = again.stream;
        Ok(scan)
    }
}

impl LayoutWatch {
    /// The next change: of the layout (`None`: it was deleted), or of who
    /// leads its controller; `None` once the store closed. Other changes
    /// beneath the document (subscriptions, a pending resize) are not its
    /// changes.
    pub async fn next(&mut self) -> Option<Result<LayoutChange, ResourcesError>> {
        let path = self.f.prefix.clone();
        let controller = format!("{path}/controller");
        loop {
            let batch = match self.f.stream.next().await? {
                Ok(b) => b,
                // Fell behind the store's history: read the document again
                // and follow it from there.
                Err(MetadataError::Compacted { .. }) => {
                    return Some(
                        self.restart()
                            .await
                            .map(|l| LayoutChange::Layout(l.map(Box::new))),
                    );
                }
                Err(e) => return Some(Err(e.into())),
            };
            if let Some(event) = batch.events.iter().rev().find(|e| e.key == path) {
                return Some(match &event.value {
                    None => Ok(LayoutChange::Layout(None)),
                    Some(bytes) => {
                        decode_layout(&path, bytes).map(|l| LayoutChange::Layout(Some(Box::new(l))))
                    }
                });
            }
            if batch.events.iter().any(|e| e.key == controller) {
                return Some(Ok(LayoutChange::Controller));
            }
        }
    }

    async fn restart(&mut self) -> Result<Option<Layout>, ResourcesError> {
        let scan = self.f.restart().await?;
        match scan.entries.into_iter().find(|e| e.key == self.f.prefix) {
            None => Ok(None),
            Some(kv) => decode_layout(&self.f.prefix, &kv.value).map(Some),
        }
    }
}

/// The version a transaction's first operation (a put) wrote.
fn put_version(r: &TxnResponse) -> Option<u64> {
    match r.results.first() {
        Some(OpResult::Put(stat)) => Some(stat.version),
        _ => None,
    }
}

/// A stored layout, decoded and checked against its invariants.
fn decode_layout(path: &str, bytes: &[u8]) -> Result<Layout, ResourcesError> {
    let layout: Layout = decode(path, bytes)?;
    layout.validate().map_err(|e| ResourcesError::Corrupt {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    Ok(layout)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use strobe_metadata::{EmbeddedStore, MetadataStore};

    use super::*;

    #[test]
    fn local_names_are_url_encoded_as_pulsar_encodes_them() {
        assert_eq!(paths::scalable_topic("t/n", "a/b c"), "/topics/t/n/a%2Fb+c");
        assert_eq!(
            paths::scalable_controller("t/n", "x"),
            "/topics/t/n/x/controller"
        );
        for name in ["a/b c", "x%2F", "ünï/cödé", "plain-name_1.*"] {
            assert_eq!(
                paths::decode_local(&paths::encode_local(name)).as_deref(),
                Some(name)
            );
        }
        assert_eq!(paths::decode_local("bad%zz"), None);
    }

    #[tokio::test]
    async fn layouts_are_compare_and_set_and_checked_when_read() {
        let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
        let r = Resources::load(store.clone()).await.unwrap();
        assert!(r.layout("public/default", "a/b").await.unwrap().is_none());
        let l = Layout::create(2, 4, BTreeMap::new(), 1).unwrap();
        let v = r.create_layout("public/default", "a/b", &l).await.unwrap();
        assert!(matches!(
            r.create_layout("public/default", "a/b", &l).await,
            Err(ResourcesError::AlreadyExists(_))
        ));
        let read = r.layout("public/default", "a/b").await.unwrap().unwrap();
        assert_eq!((read.value, read.version), (l.clone(), v));
        let (split, _) = l.split(0, 2).unwrap();
        let v2 = r
            .replace_layout("public/default", "a/b", &split, v)
            .await
            .unwrap();
        // A second writer that read the first version loses.
        assert!(matches!(
            r.replace_layout("public/default", "a/b", &split, v).await,
            Err(ResourcesError::Conflict(_))
        ));
        assert_eq!(
            r.layout("public/default", "a/b")
                .await
                .unwrap()
                .unwrap()
                .version,
            v2
        );
        assert_eq!(
            r.scalable_topics_of("public/default").await.unwrap(),
            vec!["a/b".to_string()]
        );
        // A watch sees the next change of the document and of its controller.
        let (now, mut watch) = r.watch_layout("public/default", "a/b").await.unwrap();
        assert_eq!(now.unwrap().epoch, 1);
        store
            .put(
                "/topics/public/default/a%2Fb/controller",
                b"\"b1\"",
                Expect::Any,
            )
            .await
            .unwrap();
        async fn next(watch: &mut LayoutWatch) -> LayoutChange {
            tokio::time::timeout(std::time::Duration::from_secs(5), watch.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap()
        }
        assert_eq!(next(&mut watch).await, LayoutChange::Controller);
        // Subscriptions beneath the document are not its changes.
        r.create_scalable_subscription("public/default", "a/b", "s", &Default::default())
            .await
            .unwrap();
        let (merged, _) = split.merge(3, 1, 3).unwrap();
        r.replace_layout("public/default", "a/b", &merged, v2)
            .await
            .unwrap();
        assert_eq!(
            next(&mut watch).await,
            LayoutChange::Layout(Some(Box::new(merged)))
        );
        // A document that breaks the invariants is refused, naming its path.
        let mut broken = split.clone();
        broken.segments.remove(&2);
        store
            .put(
                &paths::scalable_topic("public/default", "x"),
                &encode(&broken),
                Expect::Any,
            )
            .await
            .unwrap();
        match r.layout("public/default", "x").await {
            Err(ResourcesError::Corrupt { path, .. }) => {
                assert_eq!(path, "/topics/public/default/x")
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
}
