//! The coordinator against a real metadata store: the embedded one, and etcd when
//! `ETCD_ENDPOINTS` is set (tests/run-all.sh always sets it).

use std::sync::Arc;
use std::time::Duration;

use strobe_metadata::tc::{TcLeader, TcMember, TcMemberConfig};
use strobe_metadata::{EmbeddedStore, MetadataStore, SessionOptions};
use strobe_model::TxnId;
use strobe_txn::header::SubRef;
use strobe_txn::participant::{self, DecisionEvent, DecisionWatch};
use strobe_txn::paths::Participant;
use strobe_txn::{CoordinatorConfig, EndAction, TransactionCoordinator, TxnError, TxnState};

async fn coordinator(
    store: Arc<dyn MetadataStore>,
    id: &str,
    parallelism: u32,
    cfg: CoordinatorConfig,
) -> Arc<TransactionCoordinator> {
    let member = TcMember::start(
        store.clone(),
        TcMemberConfig {
            leader: TcLeader {
                broker_id: id.into(),
                broker_service_url: format!("pulsar://{id}:6650"),
                broker_service_url_tls: None,
                listeners: Vec::new(),
            },
            parallelism,
            session: SessionOptions::with_ttl(Duration::from_secs(3)),
            campaign: None,
        },
    )
    .await
    .unwrap();
    member
        .view()
        .wait_for(Duration::from_secs(10), |a| a.is_complete())
        .await
        .unwrap();
    TransactionCoordinator::start(
        store,
        member,
        CoordinatorConfig {
            broker_id: id.into(),
            ..cfg
        },
    )
}

fn quick() -> CoordinatorConfig {
    CoordinatorConfig {
        end_wait: Duration::from_millis(200),
        sweep_interval: Duration::from_millis(100),
        seq_block: 3,
        forget_after: Duration::from_millis(100),
        ..Default::default()
    }
}

#[tokio::test]
async fn lifecycle_on_the_embedded_store() {
    let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
    lifecycle(store).await;
}

async fn lifecycle(store: Arc<dyn MetadataStore>) {
    let tc = coordinator(store.clone(), "b1", 2, quick()).await;
    let (tx, mut events) = tokio::sync::mpsc::channel(64);
    let _watch = DecisionWatch::start(store.clone(), tx).await.unwrap();
    tc.connect(0).await.unwrap();
    tc.connect(1).await.unwrap();
    assert!(matches!(
        tc.connect(2).await,
        Err(TxnError::CoordinatorNotFound(_))
    ));

    // Ids are unique and come from blocks (of 3 here): more than a block's worth.
    let mut ids = Vec::new();
    for _ in 0..7 {
        ids.push(tc.new_txn(1, 0).await.unwrap());
    }
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(unique.len(), 7);
    assert!(ids.iter().all(|t| t.most_sig_bits == 1));

    let t = ids[0];
    let topic = "persistent://public/default/t".to_string();
    let sub = SubRef {
        topic: topic.clone(),
        subscription: "s".into(),
    };
    tc.add_participants(t, std::slice::from_ref(&topic), &[])
        .await
        .unwrap();
    tc.add_participants(t, &[], std::slice::from_ref(&sub))
        .await
        .unwrap();
    let h = tc.header(t).await.unwrap().unwrap();
    assert_eq!(h.partitions, vec![topic.clone()]);
    assert_eq!(h.subscriptions, vec![sub.clone()]);
    assert!(
        participant::load_buffer(&*store, &topic)
            .await
            .unwrap()
            .is_some()
    );

    // Commit; retried commit is fine; abort after commit is InvalidTxnStatus.
    tc.end_txn(t, EndAction::Commit).await.unwrap();
    tc.end_txn(t, EndAction::Commit).await.unwrap();
    assert!(matches!(
        tc.end_txn(t, EndAction::Abort).await,
        Err(TxnError::InvalidStatus(_))
    ));
    assert!(matches!(
        tc.add_participants(t, std::slice::from_ref(&topic), &[])
            .await,
        Err(TxnError::InvalidStatus(_))
    ));
    let ev = tokio::time::timeout(Duration::from_secs(5), events.recv())
        .await
        .unwrap()
        .unwrap();
    match ev {
        DecisionEvent::Decided(x, TxnState::Committed, who) => {
            assert_eq!(x, t);
            assert_eq!(who.len(), 2, "{who:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        participant::decision(&*store, t).await.unwrap(),
        Some(TxnState::Committed)
    );
    // The participants apply it; END_TXN waits for exactly that.
    let who = [
        Participant::Partition(topic.clone()),
        Participant::Subscription {
            topic: topic.clone(),
            subscription: "s".into(),
        },
    ];
    for p in &who {
        participant::applied(&*store, t, p, &[]).await.unwrap();
    }
    assert!(tc.wait_participants(t, &who, Duration::from_secs(1)).await);

    // Unknown transaction.
    let ghost = TxnId {
        most_sig_bits: 0,
        least_sig_bits: 999_999,
    };
    assert!(matches!(
        tc.end_txn(ghost, EndAction::Commit).await,
        Err(TxnError::NotFound(_))
    ));

    // A timeout aborts, and the watch reports it.
    let short = tc.new_txn(0, 150).await.unwrap();
    tc.add_participants(short, std::slice::from_ref(&topic), &[])
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let ev = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("the timeout abort is reported")
            .unwrap();
        if matches!(ev, DecisionEvent::Decided(x, TxnState::Aborted, _) if x == short) {
            break;
        }
    }
    let h = tc.header(short).await.unwrap().unwrap();
    assert!(h.timed_out && h.state == TxnState::Aborted);
    assert!(matches!(
        tc.end_txn(short, EndAction::Commit).await,
        Err(TxnError::InvalidStatus(_))
    ));
    let stats = tc.stats();
    assert_eq!(stats[0].timed_out, 1);
    assert_eq!(stats[1].committed, 1);
    assert_eq!(stats[1].open, 6);
}

/// A second coordinator takes over a partition whose leader resigned: it continues the open
/// transactions, never reuses an id, and the old one can no longer write.
#[tokio::test]
async fn a_new_leader_continues_where_the_old_one_stopped() {
    let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
    let a = coordinator(store.clone(), "a", 1, quick()).await;
    let t1 = a.new_txn(0, 60_000).await.unwrap();
    let t2 = a.new_txn(0, 60_000).await.unwrap();
    let topic = "persistent://public/default/t".to_string();
    for t in [t1, t2] {
        a.add_participants(t, std::slice::from_ref(&topic), &[])
            .await
            .unwrap();
    }
    // Without a participant a transaction is never written: the new leader does not know it.
    let empty = a.new_txn(0, 60_000).await.unwrap();
    let b = coordinator(store.clone(), "b", 1, quick()).await;
    assert!(matches!(
        b.new_txn(0, 0).await,
        Err(TxnError::CoordinatorNotFound(_))
    ));
    a.shutdown().await;
    b.member()
        .view()
        .wait_for(Duration::from_secs(10), |v| {
            v.leaders[0].as_ref().is_some_and(|l| l.broker_id == "b")
        })
        .await
        .unwrap();
    // Wait for b's own election state to say it leads.
    for _ in 0..100 {
        if b.leads(0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t3 = b.new_txn(0, 0).await.unwrap();
    assert!(t3.least_sig_bits > t2.least_sig_bits, "{t3} after {t2}");
    b.end_txn(t1, EndAction::Abort).await.unwrap();
    b.end_txn(t2, EndAction::Commit).await.unwrap();
    assert!(matches!(
        b.end_txn(empty, EndAction::Commit).await,
        Err(TxnError::NotFound(_))
    ));
    assert_eq!(
        b.stats()[0].open,
        1,
        "t3 is open; t1 and t2 were recovered and ended"
    );
    assert!(matches!(
        a.new_txn(0, 0).await,
        Err(TxnError::CoordinatorNotFound(_))
    ));
}

/// A commit whose write landed but whose answer was lost (an etcd member
/// died with it in flight) is answered as committed, not as a failure the
/// client would try to abort (and be refused: it conflicts with its own
/// commit).
#[tokio::test]
async fn a_decision_whose_answer_was_lost_is_found_made() {
    let store = Arc::new(strobe_metadata::testing::LostAnswers::new(
        EmbeddedStore::in_memory(),
    ));
    let tc = coordinator(store.clone(), "b1", 1, quick()).await;
    tc.connect(0).await.unwrap();
    let topic = "persistent://public/default/t".to_string();
    let t = tc.new_txn(0, 0).await.unwrap();
    tc.add_participants(t, std::slice::from_ref(&topic), &[])
        .await
        .unwrap();
    store.fail_next(1);
    tc.end_txn(t, EndAction::Commit).await.unwrap();
    assert_eq!(store.failing(), 0, "the commit's answer was lost");
    let h = tc.header(t).await.unwrap().expect("a header");
    assert_eq!(h.state, TxnState::Committed);
    let u = tc.new_txn(0, 0).await.unwrap();
    tc.add_participants(u, std::slice::from_ref(&topic), &[])
        .await
        .unwrap();
    store.fail_next(1);
    tc.end_txn(u, EndAction::Abort).await.unwrap();
    let h = tc.header(u).await.unwrap().expect("a header");
    assert_eq!(h.state, TxnState::Aborted);
}

/// A transaction without participants costs no metadata write: opened and ended in memory, its
/// END_TXN retried finds the same answer, the other one is refused; one that gets a participant
/// is written then, with its timeout from NEW_TXN.
#[tokio::test]
async fn a_transaction_is_written_with_its_first_participant() {
    let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
    let tc = coordinator(store.clone(), "b1", 1, quick()).await;
    tc.connect(0).await.unwrap();
    let before = store.scan_prefix("/txn/").await.unwrap().entries;
    let t = tc.new_txn(0, 60_000).await.unwrap();
    assert!(
        tc.header(t).await.unwrap().is_none(),
        "not written at NEW_TXN"
    );
    assert_eq!(tc.stats()[0].open, 1);
    tc.end_txn(t, EndAction::Commit).await.unwrap();
    tc.end_txn(t, EndAction::Commit).await.unwrap();
    assert!(matches!(
        tc.end_txn(t, EndAction::Abort).await,
        Err(TxnError::InvalidStatus(_))
    ));
    let topic = "persistent://public/default/t".to_string();
    assert!(matches!(
        tc.add_participants(t, std::slice::from_ref(&topic), &[])
            .await,
        Err(TxnError::InvalidStatus(_))
    ));
    let after: Vec<_> = store
        .scan_prefix("/txn/")
        .await
        .unwrap()
        .entries
        .into_iter()
        .filter(|kv| !kv.key.starts_with("/txn/tc"))
        .collect();
    let before: Vec<_> = before
        .into_iter()
        .filter(|kv| !kv.key.starts_with("/txn/tc"))
        .collect();
    assert_eq!(after, before, "nothing written for it");
    assert_eq!((tc.stats()[0].open, tc.stats()[0].committed), (0, 1));

    let u = tc.new_txn(0, 60_000).await.unwrap();
    let opened = now_ms();
    tc.add_participants(u, std::slice::from_ref(&topic), &[])
        .await
        .unwrap();
    let h = tc
        .header(u)
        .await
        .unwrap()
        .expect("written with its participant");
    assert_eq!(h.state, TxnState::Open);
    assert_eq!(h.partitions, vec![topic.clone()]);
    assert!(h.timeout_at >= opened + 59_000 && h.timeout_at <= now_ms() + 60_000);
    tc.end_txn(u, EndAction::Abort).await.unwrap();
    assert_eq!(
        tc.header(u).await.unwrap().unwrap().state,
        TxnState::Aborted
    );
}

/// A participant answered before its registration was written, whose write then failed
/// (`refuse_commit`): its sends were refused, so the transaction may only abort.
#[tokio::test]
async fn a_transaction_that_lost_a_registration_can_only_abort() {
    let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
    let tc = coordinator(store.clone(), "b1", 1, quick()).await;
    tc.connect(0).await.unwrap();
    let t = tc.new_txn(0, 60_000).await.unwrap();
    assert!(tc.knows_open(t));
    tc.refuse_commit(t);
    assert!(matches!(
        tc.end_txn(t, EndAction::Commit).await,
        Err(TxnError::InvalidStatus(_))
    ));
    assert!(tc.knows_open(t), "a refused commit decides nothing");
    tc.end_txn(t, EndAction::Abort).await.unwrap();
    assert!(!tc.knows_open(t));
    assert_eq!(tc.stats()[0].aborted, 1);
    // Others are not affected.
    let u = tc.new_txn(0, 60_000).await.unwrap();
    tc.end_txn(u, EndAction::Commit).await.unwrap();
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Participants served in the coordinator's own broker.
struct AllLocal(std::sync::Mutex<Vec<(TxnId, TxnState)>>);

#[async_trait::async_trait]
impl strobe_txn::LocalParticipants for AllLocal {
    async fn apply(&self, t: TxnId, state: TxnState, who: Vec<Participant>) -> Vec<Participant> {
        self.0.lock().unwrap().push((t, state));
        who
    }
}

/// END_TXN tells the participants served here directly and answers once they applied it,
/// without waiting for their records; the decided header then leaves the store, and a retried
/// END_TXN and the admin API still find it (in memory).
#[tokio::test]
async fn local_participants_are_told_directly_and_the_header_is_forgotten() {
    let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
    let tc = coordinator(store.clone(), "b1", 1, quick()).await;
    let local = Arc::new(AllLocal(Default::default()));
    tc.set_local(local.clone());
    tc.connect(0).await.unwrap();
    let topic = "persistent://public/default/t".to_string();
    let t = tc.new_txn(0, 60_000).await.unwrap();
    tc.add_participants(t, std::slice::from_ref(&topic), &[])
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    tc.end_txn(t, EndAction::Commit).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(150),
        "answered without waiting for the participant's record ({:?})",
        started.elapsed()
    );
    assert_eq!(*local.0.lock().unwrap(), vec![(t, TxnState::Committed)]);
    let path = format!("/txn/id/{}_{}", t.most_sig_bits, t.least_sig_bits);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while store.get(&path).await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "the header stays");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tc.end_txn(t, EndAction::Commit).await.unwrap();
    assert!(matches!(
        tc.end_txn(t, EndAction::Abort).await,
        Err(TxnError::InvalidStatus(_))
    ));
    let h = tc.header(t).await.unwrap().expect("kept in memory");
    assert_eq!((h.state, h.partitions), (TxnState::Committed, vec![topic]));
}

/// Participants served elsewhere, whose brokers answer a push (`answer`) or not.
struct Elsewhere {
    answer: bool,
    pushed: std::sync::Mutex<Vec<(TxnId, TxnState, Vec<Participant>)>>,
}

#[async_trait::async_trait]
impl strobe_txn::LocalParticipants for Elsewhere {
    async fn apply(&self, _: TxnId, _: TxnState, _: Vec<Participant>) -> Vec<Participant> {
        Vec::new()
    }

    async fn push(&self, t: TxnId, state: TxnState, who: Vec<Participant>) -> Vec<Participant> {
        self.pushed.lock().unwrap().push((t, state, who.clone()));
        if self.answer { who } else { Vec::new() }
    }
}

/// END_TXN pushes the outcome to the participants served elsewhere and answers once their
/// brokers said they applied it, without waiting for their records; a participant whose broker
/// does not answer is waited for through its record (here never deleted: up to `end_wait`).
#[tokio::test]
async fn remote_participants_are_told_by_push() {
    for answer in [true, false] {
        let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
        let mut cfg = quick();
        cfg.end_wait = Duration::from_millis(1500);
        let tc = coordinator(store.clone(), "b1", 1, cfg).await;
        let remote = Arc::new(Elsewhere {
            answer,
            pushed: Default::default(),
        });
        tc.set_local(remote.clone());
        tc.connect(0).await.unwrap();
        let topic = "persistent://public/default/t".to_string();
        let sub = SubRef {
            topic: topic.clone(),
            subscription: "s".into(),
        };
        let t = tc.new_txn(0, 60_000).await.unwrap();
        tc.add_participants(t, std::slice::from_ref(&topic), std::slice::from_ref(&sub))
            .await
            .unwrap();
        let started = tokio::time::Instant::now();
        tc.end_txn(t, EndAction::Commit).await.unwrap();
        let took = started.elapsed();
        let pushed = remote.pushed.lock().unwrap().clone();
        assert_eq!(pushed.len(), 1, "{pushed:?}");
        assert_eq!((pushed[0].0, pushed[0].1), (t, TxnState::Committed));
        assert_eq!(pushed[0].2.len(), 2, "both participants: {pushed:?}");
        if answer {
            assert!(took < Duration::from_millis(500), "waited {took:?}");
        } else {
            assert!(
                took >= Duration::from_millis(1400),
                "did not wait: {took:?}"
            );
        }
    }
}

/// Finding 27 (seed 105): a subscription's pending acks written by a topic
/// instance whose bundle had moved on (a transactional ack stored after the
/// next owner read the records) were never applied by the commit. The
/// records are written, and deleted, only while the fence holds.
#[tokio::test]
async fn participant_records_are_written_only_under_their_fence() {
    use strobe_metadata::{Expect, Op};
    let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
    let bundle = "/namespace/t/ns/0x00000000_0xffffffff";
    let v = store
        .put(bundle, b"mine", Expect::Absent)
        .await
        .unwrap()
        .version;
    let fence = vec![Op::check(bundle, Expect::Version(v))];
    let (topic, sub) = ("persistent://t/ns/x", "s");
    let t = TxnId {
        most_sig_bits: 1,
        least_sig_bits: 7,
    };
    let acks = strobe_txn::pending_ack::TxnAcks::default();
    participant::save_pending_acks(&*store, topic, sub, t, &acks, &fence)
        .await
        .unwrap();
    assert!(
        participant::pending_acks_of(&*store, topic, sub, t)
            .await
            .unwrap()
            .is_some()
    );

    // The bundle moves on: another owner's record.
    store.put(bundle, b"theirs", Expect::Any).await.unwrap();
    let late = TxnId {
        most_sig_bits: 1,
        least_sig_bits: 8,
    };
    assert!(
        participant::save_pending_acks(&*store, topic, sub, late, &acks, &fence)
            .await
            .is_err()
    );
    assert!(
        participant::pending_acks_of(&*store, topic, sub, late)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        participant::delete_pending_acks(&*store, topic, sub, t, &fence)
            .await
            .is_err()
    );
    assert!(
        participant::pending_acks_of(&*store, topic, sub, t)
            .await
            .unwrap()
            .is_some(),
        "the record stays for the owner to apply"
    );
    let me = Participant::Subscription {
        topic: topic.into(),
        subscription: sub.into(),
    };
    store
        .put(&strobe_txn::paths::part_path(t, &me), b"", Expect::Any)
        .await
        .unwrap();
    assert!(participant::applied(&*store, t, &me, &fence).await.is_err());
    assert!(
        store
            .get(&strobe_txn::paths::part_path(t, &me))
            .await
            .unwrap()
            .is_some()
    );
    // Unfenced (standalone), they go.
    participant::delete_pending_acks(&*store, topic, sub, t, &[])
        .await
        .unwrap();
    participant::applied(&*store, t, &me, &[]).await.unwrap();
    assert!(
        participant::pending_acks_of(&*store, topic, sub, t)
            .await
            .unwrap()
            .is_none()
    );
}
