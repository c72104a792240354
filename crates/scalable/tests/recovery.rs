//! The controller against an in-memory store and fake segment topics: a
//! resize stopped at any step (a failpoint, or any segment call failing) is
//! finished by the next controller, to the layout an uninterrupted run
//! reaches, with the topics in the state that layout implies.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use strobe_layout::Layout;
use strobe_metadata::{EmbeddedStore, MetadataStore};
use strobe_model::TopicName;
use strobe_resources::{Resources, ScalableSubscription};
use strobe_scalable::{
    Controller, Failpoint, ScalableError, SegmentStats, SegmentTopics, SubscriptionOp,
};

#[derive(Debug, Default, Clone, PartialEq)]
struct FakeTopic {
    terminated: bool,
    /// Subscription → backlog.
    subs: BTreeMap<String, u64>,
}

#[derive(Debug, Default)]
struct Fake {
    topics: Mutex<BTreeMap<String, FakeTopic>>,
    /// Calls left before one fails (usize::MAX: none fails).
    budget: AtomicUsize,
    calls: AtomicUsize,
}

impl Fake {
    fn new() -> Arc<Fake> {
        let f = Fake::default();
        f.budget.store(usize::MAX, Ordering::SeqCst);
        Arc::new(f)
    }

    fn step(&self, what: &str, t: &TopicName) -> Result<(), ScalableError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let left = self.budget.load(Ordering::SeqCst);
        if left == 0 {
            return Err(ScalableError::Segment {
                segment: t.to_string(),
                reason: format!("injected failure of {what}"),
            });
        }
        if left != usize::MAX {
            self.budget.store(left - 1, Ordering::SeqCst);
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl SegmentTopics for Fake {
    async fn create(&self, s: &TopicName, subs: &[String]) -> Result<(), ScalableError> {
        self.step("create", s)?;
        let mut topics = self.topics.lock();
        let t = topics.entry(s.to_string()).or_default();
        for sub in subs {
            t.subs.entry(sub.clone()).or_insert(0);
        }
        Ok(())
    }
    async fn stats(&self, s: &TopicName) -> Result<Option<SegmentStats>, ScalableError> {
        self.step("stats", s)?;
        Ok(self
            .topics
            .lock()
            .get(&s.to_string())
            .map(|t| SegmentStats {
                terminated: t.terminated,
                backlogs: t.subs.clone(),
                ..SegmentStats::default()
            }))
    }
    async fn terminate(&self, s: &TopicName) -> Result<(), ScalableError> {
        self.step("terminate", s)?;
        if let Some(t) = self.topics.lock().get_mut(&s.to_string()) {
            t.terminated = true;
        }
        Ok(())
    }
    async fn subscription(
        &self,
        s: &TopicName,
        sub: &str,
        op: SubscriptionOp,
    ) -> Result<(), ScalableError> {
        self.step("subscription", s)?;
        let mut topics = self.topics.lock();
        let t = topics.get_mut(&s.to_string()).unwrap();
        match op {
            SubscriptionOp::Create => {
                t.subs.entry(sub.to_owned()).or_insert(0);
            }
            SubscriptionOp::Delete => {
                t.subs.remove(sub);
            }
            SubscriptionOp::SkipAll => {
                t.subs.insert(sub.to_owned(), 0);
            }
            SubscriptionOp::SeekEarliest | SubscriptionOp::SeekTime(_) => {
                t.subs.insert(sub.to_owned(), 99);
            }
        }
        Ok(())
    }
    async fn delete(&self, s: &TopicName) -> Result<(), ScalableError> {
        self.step("delete", s)?;
        self.topics.lock().remove(&s.to_string());
        Ok(())
    }
}

const NS: &str = "public/default";

async fn setup() -> (Arc<Resources>, TopicName) {
    let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
    let r = Arc::new(Resources::load(store).await.unwrap());
    let l = Layout::create(1, 4, BTreeMap::new(), 1).unwrap();
    r.create_layout(NS, "orders", &l).await.unwrap();
    r.create_scalable_subscription(NS, "orders", "audit", &ScalableSubscription::default())
        .await
        .unwrap();
    (
        r,
        TopicName::parse("topic://public/default/orders").unwrap(),
    )
}

/// The layout's shape without its clock: (epoch, next id, per segment: id,
/// range, active, parents, children).
type Shape = (u64, u64, Vec<(u64, String, bool, Vec<u64>, Vec<u64>)>);

fn shape(l: &Layout) -> Shape {
    (
        l.epoch,
        l.next_segment_id,
        l.segments
            .values()
            .map(|s| {
                (
                    s.segment_id,
                    s.descriptor().to_string(),
                    s.is_active(),
                    s.parent_ids.clone(),
                    s.child_ids.clone(),
                )
            })
            .collect(),
    )
}

/// The topics a layout implies: every segment's topic exists; exactly the
/// sealed ones are terminated; every one has the "audit" cursor.
fn check_topics(topic: &TopicName, l: &Layout, fake: &Fake) {
    let topics = fake.topics.lock();
    let names: BTreeSet<String> = l
        .segments
        .values()
        .map(|s| topic.segment_name(s.descriptor()).unwrap().to_string())
        .collect();
    assert_eq!(topics.keys().cloned().collect::<BTreeSet<_>>(), names);
    for s in l.segments.values() {
        let t = &topics[&topic.segment_name(s.descriptor()).unwrap().to_string()];
        assert_eq!(t.terminated, !s.is_active(), "segment {}", s.segment_id);
        assert!(t.subs.contains_key("audit"), "segment {}", s.segment_id);
    }
}

#[tokio::test]
async fn a_split_stopped_at_any_step_is_finished_by_the_next_controller() {
    for step in [
        Failpoint::AfterRecord,
        Failpoint::AfterCreate,
        Failpoint::AfterTerminate,
        Failpoint::AfterCommit,
    ] {
        let (r, topic) = setup().await;
        let fake = Fake::new();
        let first = Controller::new(topic.clone(), r.clone(), fake.clone(), None);
        first.recover().await.unwrap();
        // A subscription only a consumer made: the children get it too.
        fake.topics
            .lock()
            .get_mut("segment://public/default/orders/0000-ffff-0")
            .unwrap()
            .subs
            .insert("queue".into(), 3);
        first.set_failpoint(Some(step), false);
        assert!(matches!(
            first.split(0).await,
            Err(ScalableError::Failpoint(s)) if s == step
        ));
        drop(first);
        let pending = r.pending_resize(NS, "orders").await.unwrap();
        assert_eq!(
            pending.is_some(),
            step != Failpoint::AfterCommit,
            "{step:?}"
        );

        let next = Controller::new(topic.clone(), r.clone(), fake.clone(), None);
        let l = next.recover().await.unwrap();
        assert_eq!(l.epoch, 1, "{step:?}");
        assert!(!l.get(0).unwrap().is_active());
        assert_eq!(l.get(0).unwrap().child_ids, vec![1, 2]);
        check_topics(&topic, &l, &fake);
        for child in ["0000-7fff-1", "8000-ffff-2"] {
            let t = fake.topics.lock()[&format!("segment://public/default/orders/{child}")].clone();
            assert!(t.subs.contains_key("queue"), "{step:?}: {child}");
        }
        assert!(r.pending_resize(NS, "orders").await.unwrap().is_none());
        // The next resize goes on from there.
        let l = next.merge(1, 2).await.unwrap();
        assert_eq!(
            (l.epoch, l.get(3).unwrap().parent_ids.clone()),
            (2, vec![1, 2])
        );
    }
}

/// splits, a merge and a prune with the k-th segment call failing, for
/// every k: after each failure a fresh controller recovers and the script
/// goes on; the end is the uninterrupted run's layout.
#[tokio::test]
async fn any_failing_segment_call_is_recovered_from() {
    async fn script(c: &Controller) -> Result<(), ScalableError> {
        let l = c.layout().await?.value;
        if l.epoch == 0 {
            c.split(0).await?;
        }
        let l = c.layout().await?.value;
        if l.epoch == 1 {
            c.split(1).await?;
        }
        let l = c.layout().await?.value;
        if l.epoch == 2 {
            c.merge(3, 4).await?;
        }
        let l = c.layout().await?.value;
        if l.epoch == 3 {
            c.prune(Some(Duration::ZERO)).await?;
        }
        Ok(())
    }
    let (r, topic) = setup().await;
    let fake = Fake::new();
    let c = Controller::new(topic.clone(), r.clone(), fake.clone(), None);
    c.recover().await.unwrap();
    script(&c).await.unwrap();
    let expected = c.layout().await.unwrap().value;
    assert_eq!(expected.epoch, 4);
    // Segments 0 and 1 (parents of 3 and 4) and 3, 4 are sealed and drained.
    assert_eq!(
        expected.segments.keys().copied().collect::<Vec<_>>(),
        vec![2, 5]
    );
    check_topics(&topic, &expected, &fake);
    let total = fake.calls.load(Ordering::SeqCst);

    for k in 0..total {
        let (r, topic) = setup().await;
        let fake = Fake::new();
        let mut failed = false;
        for attempt in 0..10 {
            let c = Controller::new(topic.clone(), r.clone(), fake.clone(), None);
            if attempt == 0 {
                fake.budget.store(k, Ordering::SeqCst);
            }
            let run = async {
                c.recover().await?;
                script(&c).await
            };
            match run.await {
                Ok(()) => break,
                Err(_) => {
                    failed = true;
                    fake.budget.store(usize::MAX, Ordering::SeqCst);
                }
            }
        }
        assert!(failed, "call {k} of {total} was made");
        let l = r.layout(NS, "orders").await.unwrap().unwrap().value;
        assert_eq!(shape(&l), shape(&expected), "failing call {k}");
        check_topics(&topic, &l, &fake);
        assert!(r.pending_resize(NS, "orders").await.unwrap().is_none());
    }
}

#[tokio::test]
async fn prune_waits_for_retention_and_every_subscription() {
    let (r, topic) = setup().await;
    let fake = Fake::new();
    let c = Controller::new(topic.clone(), r.clone(), fake.clone(), None);
    c.recover().await.unwrap();
    c.split(0).await.unwrap();
    let parent = "segment://public/default/orders/0000-ffff-0";
    fake.topics
        .lock()
        .get_mut(parent)
        .unwrap()
        .subs
        .insert("audit".into(), 5);
    assert_eq!(c.prune(None).await.unwrap(), Vec::<u64>::new());
    assert_eq!(
        c.prune(Some(Duration::from_secs(3600))).await.unwrap(),
        Vec::<u64>::new()
    );
    // The backlog holds it.
    assert_eq!(
        c.prune(Some(Duration::ZERO)).await.unwrap(),
        Vec::<u64>::new()
    );
    fake.topics
        .lock()
        .get_mut(parent)
        .unwrap()
        .subs
        .insert("audit".into(), 0);
    assert_eq!(c.prune(Some(Duration::ZERO)).await.unwrap(), vec![0]);
    let l = c.layout().await.unwrap().value;
    assert_eq!(l.epoch, 2);
    assert!(l.get(1).unwrap().parent_ids.is_empty());
    assert!(!fake.topics.lock().contains_key(parent));
}

#[tokio::test]
async fn subscriptions_seek_and_delete_reach_every_segment() {
    let (r, topic) = setup().await;
    let fake = Fake::new();
    let c = Controller::new(topic.clone(), r.clone(), fake.clone(), None);
    c.recover().await.unwrap();
    c.split(0).await.unwrap();
    c.create_subscription("late", "QUEUE").await.unwrap();
    // Only the active segments get the new subscription.
    let with_late: Vec<String> = fake
        .topics
        .lock()
        .iter()
        .filter(|(_, t)| t.subs.contains_key("late"))
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(
        with_late,
        vec![
            "segment://public/default/orders/0000-7fff-1".to_string(),
            "segment://public/default/orders/8000-ffff-2".to_string()
        ]
    );
    // A seek before the split: the children (created after it) from their
    // start; a seek after everything: the sealed parent is skipped.
    let sealed_at = c
        .layout()
        .await
        .unwrap()
        .value
        .get(0)
        .unwrap()
        .sealed_at_ms
        .unwrap();
    c.seek("audit", sealed_at + 1).await.unwrap();
    let parent = fake.topics.lock()["segment://public/default/orders/0000-ffff-0"].subs["audit"];
    assert_eq!(parent, 0);
    c.skip_all("audit").await.unwrap();
    assert!(fake.topics.lock().values().all(|t| t.subs["audit"] == 0));
    assert!(matches!(
        c.seek("nobody", 1).await,
        Err(ScalableError::NotFound(_))
    ));
    c.delete_subscription("audit").await.unwrap();
    assert!(
        fake.topics
            .lock()
            .values()
            .all(|t| !t.subs.contains_key("audit"))
    );
    assert_eq!(
        r.scalable_subscriptions(NS, "orders").await.unwrap(),
        vec![(
            "late".to_string(),
            ScalableSubscription {
                kind: "QUEUE".into()
            }
        )]
    );
    c.delete_topic(false).await.unwrap();
    assert!(fake.topics.lock().is_empty());
    assert!(r.layout(NS, "orders").await.unwrap().is_none());
    assert!(
        r.scalable_subscriptions(NS, "orders")
            .await
            .unwrap()
            .is_empty()
    );
}
