use super::*;
use strobe_metadata::EmbeddedStore;

#[test]
fn topic_keys_round_trip() {
    let t = TopicName::parse("persistent://a/b/c-partition-2").unwrap();
    assert_eq!(
        paths::name_from_key(&paths::topic_key(&t)).as_deref(),
        Some("persistent://a/b/c-partition-2")
    );
    assert_eq!(
        paths::managed_ledger(&t),
        "/managed-ledgers/a/b/persistent/c-partition-2"
    );
    assert_eq!(paths::schema(&t), "/schemas/a/b/c");
}

#[tokio::test]
async fn a_corrupt_document_is_an_error_naming_its_path() {
    let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
    store
        .put("/admin/policies/t", b"{not json", Expect::Any)
        .await
        .unwrap();
    store
        .put("/admin/policies/t/bad", b"[1,2]", Expect::Any)
        .await
        .unwrap();
    store
        .put("/admin/policies/t/good", b"{}", Expect::Any)
        .await
        .unwrap();
    let r = Resources::load(store.clone()).await.unwrap();
    // The corrupt namespace is left out at load; the good one and the defaults are in.
    assert!(r.namespace_exists("t/good"));
    assert!(r.namespace_exists("public/default"));
    assert!(!r.namespace_exists("t/bad"));
    match r.tenant("t").await {
        Err(ResourcesError::Corrupt { path, .. }) => assert_eq!(path, "/admin/policies/t"),
        other => panic!("expected CorruptMetadata, got {other:?}"),
    }
    let t = TopicName::parse("persistent://t/good/x").unwrap();
    store
        .put(&paths::managed_ledger(&t), b"\"oops\"", Expect::Any)
        .await
        .unwrap();
    assert!(matches!(
        r.topic_meta(&t).await,
        Err(ResourcesError::Corrupt { .. })
    ));
}

#[tokio::test]
async fn deleting_a_topic_without_policies_says_no_policy_changed() {
    // Every deleted topic's policies are deleted; a change said for each
    // made every broker walk all its loaded topics once per deletion.
    let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
    let r = Resources::load(store).await.unwrap();
    let t = TopicName::parse("persistent://public/default/plain").unwrap();
    let g = r.policy_generation();
    r.delete_topic_policies(&t).await.unwrap();
    assert_eq!(r.policy_generation(), g);
    r.update_topic_policies(&t, |p| p.max_producer_per_topic = Some(3))
        .await
        .unwrap();
    let g = r.policy_generation();
    assert!(g > 0);
    r.delete_topic_policies(&t).await.unwrap();
    assert!(
        r.policy_generation() > g,
        "a delete of real policies is a change"
    );
}

#[tokio::test]
async fn a_topic_record_written_meanwhile_is_read_again_not_lost() {
    let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
    let r = Resources::load(store.clone()).await.unwrap();
    let t = TopicName::parse("persistent://public/default/meta").unwrap();
    r.record_topic(&t).await.unwrap();
    let calls = AtomicU64::new(0);
    r.update_topic_meta(&t, |m| {
        // The first time, another writer records a compaction between
        // this update's read and its write.
        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
            let (store, path) = (store.clone(), paths::managed_ledger(&t));
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                let meta = TopicMeta {
                    terminated: None,
                    compaction: Some(CompactionMeta {
                        horizon: StoredPosition::at(None),
                        ledger: "c".into(),
                        generation: 3,
                    }),
                };
                rt.block_on(store.put(&path, &encode(&meta), Expect::Any))
                    .unwrap();
            })
            .join()
            .unwrap();
        }
        m.terminated = Some(StoredPosition::at(Some(Position::new(1, 2))));
    })
    .await
    .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2, "read again once");
    let meta = r.topic_meta(&t).await.unwrap().unwrap().value;
    assert_eq!(meta.compaction.map(|c| c.generation), Some(3));
    assert!(meta.terminated.is_some());
}

#[tokio::test]
async fn creates_refuse_to_overwrite_and_caches_follow_the_store() {
    let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
    let r = Resources::load(store.clone()).await.unwrap();
    let t = TopicName::parse("persistent://public/default/p").unwrap();
    r.create_partitioned(&t, 3).await.unwrap();
    assert!(matches!(
        r.create_partitioned(&t, 4).await,
        Err(ResourcesError::AlreadyExists(_))
    ));
    assert_eq!(r.partitions(&t), Some(3));
    r.set_partitions(&t, 5).await.unwrap();
    // A second view of the same store loads what the first wrote.
    let again = Resources::load(store).await.unwrap();
    assert_eq!(again.partitions(&t), Some(5));
    r.delete_partitioned(&t).await.unwrap();
    assert_eq!(r.partitions(&t), None);
}
