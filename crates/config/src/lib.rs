//! Broker configuration (Pulsar's `ServiceConfiguration`): the keys of
//! `config/standalone.toml` and `config/cluster.toml`. Every key has a
//! default; an unknown key is an error that names it; values are checked
//! together (`BrokerConfig::validate`) before a broker starts. Pure: it
//! reads the file it is given and nothing else.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
pub use strobe_cluster::AdvertisedListener;

mod cpus;
mod error;
#[cfg(test)]
mod listener_tests;
mod listeners;
mod tenancy;

pub use cpus::{MAX_CPUS, cpu_list};
pub use error::ConfigError;
pub use listeners::parse_advertised_listeners;

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BrokerConfig {
    /// Name of the cluster this broker belongs to.
    pub cluster_name: String,
    /// Address the binary protocol and HTTP listeners bind to.
    pub bind_address: String,
    /// Host name clients are told to connect to (lookups, PIP-307 redirects).
    pub advertised_address: String,
    /// Named addresses this broker is reached at from different networks
    /// (Pulsar: advertisedListeners), e.g.
    /// `"internal:pulsar://broker-1:6650,external:pulsar://localhost:6652"`;
    /// a name may carry a `pulsar://` and a `pulsar+ssl://` URL. A client
    /// picks one by name (`listenerName`); empty: only `advertised_address`.
    pub advertised_listeners: String,
    /// The listener other brokers and clients that name none are given
    /// (Pulsar: internalListenerName); empty: the first one.
    pub internal_listener_name: String,
    /// Binary protocol port (Pulsar: brokerServicePort).
    pub broker_port: u16,
    /// HTTP port: admin API, lookups, metrics (Pulsar: webServicePort).
    pub http_port: u16,
    /// Where topic data and embedded metadata live.
    pub data_dir: PathBuf,
    /// Largest message a producer may send, announced in CONNECTED (bytes).
    pub max_message_size: usize,
    /// Seconds without traffic before a PING, and again before closing.
    pub keepalive_interval_secs: u64,
    /// Seconds a client has to complete CONNECT after the TCP connection opens.
    pub handshake_timeout_secs: u64,
    /// Most connections served at once; further ones are refused.
    pub max_connections: usize,
    /// Threads of the async runtime that serve connections (Pulsar:
    /// numIOThreads); 0: one per core. At most 1024.
    pub worker_threads: usize,
    /// CPUs the broker's threads run on, in Linux's list format (`"0"`,
    /// `"0-3"`, `"0,2,4-5"`, as `taskset -c` takes); empty: wherever the
    /// kernel puts them. With `worker_threads = 0` the runtime gets one
    /// thread per listed CPU. A message's path crosses threads (the
    /// connection's, the group commit's, the subscription's); keeping them
    /// on few CPUs keeps those hand-offs from waking an idle CPU, which on a
    /// VM costs several times a local switch (`docs/performance.md`).
    pub cpu_affinity: String,
    /// Cluster mode only: etcd endpoints, comma separated, optionally with
    /// an `etcd:` prefix (`etcd:http://127.0.0.1:2379,http://…`).
    pub metadata_store_url: String,
    /// Cluster mode only: seconds after a broker dies (or loses etcd) until
    /// its registration and bundle locks vanish and others take its topics
    /// (Pulsar: metadataStoreSessionTimeoutMillis). At least 3.
    pub metadata_session_timeout_secs: u64,
    /// Cluster mode only: run the load manager (one broker, elected, moves
    /// bundles off a busy broker by PIP-307 transfers).
    pub load_balancer_enabled: bool,
    /// Cluster mode only: seconds between the load manager's rounds.
    pub load_balancer_interval_secs: u64,
    /// Cluster mode only: a bundle moves when the most loaded broker owns
    /// more than this many bundles beyond the least loaded one.
    pub load_balancer_bundle_threshold: u32,
    /// Cluster mode only: minutes the load manager leaves a bundle where a
    /// transfer (an operator's or its own) put it (Pulsar:
    /// loadBalancerSheddingGracePeriodMinutes).
    pub load_balancer_shedding_grace_period_minutes: u64,
    /// Cluster mode only: rounds in a row a broker must be found overloaded
    /// before the load manager moves a bundle off it (Pulsar:
    /// loadBalancerSheddingConditionHitCountThreshold).
    pub load_balancer_shedding_condition_hit_count_threshold: u32,
    /// Cluster mode only: a bundle's owner splits it in two when it holds
    /// more than `load_balancer_namespace_bundle_max_topics` loaded topics or
    /// carries more than `load_balancer_namespace_bundle_max_msg_rate`
    /// messages per second in and out (Pulsar's
    /// loadBalancerAutoBundleSplitEnabled and its limits), while the
    /// namespace has fewer than `load_balancer_namespace_maximum_bundles`.
    pub load_balancer_auto_bundle_split_enabled: bool,
    pub load_balancer_namespace_bundle_max_topics: u32,
    pub load_balancer_namespace_bundle_max_msg_rate: u64,
    pub load_balancer_namespace_maximum_bundles: u32,
    /// Cluster mode only, object storage: milliseconds a topic's flush waits
    /// for more entries before its put (0: put as soon as the previous put of
    /// the topic returned; entries arriving meanwhile share the next one).
    pub storage_flush_delay_ms: u64,
    /// Cluster mode only, object storage: the most bytes one put (one flush
    /// of one topic) carries.
    pub storage_max_put_bytes: u64,
    /// Cluster mode only, object storage: MiB of entries read back from the
    /// store kept in memory for re-reads.
    pub storage_cache_mb: u64,
    /// Cluster mode only: this broker's unique id (default: advertised address and port).
    pub broker_id: String,
    /// Where topic data lives: "file" (under data_dir, the default), "memory"
    /// (lost on exit), or a storage URL (`file:///dir`, `memory:`).
    pub storage: String,
    /// When a message counts as durable, and so when its producer gets the receipt:
    /// "always" (fdatasync before the receipt, group committed; the default),
    /// "interval(MS)" (written to the OS, synced at least every MS ms) or "never".
    pub sync: strobe_ledger::SyncMode,
    /// With sync = "always": a group commit's fdatasync starts no sooner than
    /// this many microseconds after the previous one started, so producers
    /// that send one message at a time share syncs instead of taking one
    /// each (0: sync as soon as anything is queued; at most 100,000).
    pub sync_min_interval_us: u64,
    /// How far stalled syncs may raise that interval, in microseconds (at or
    /// below sync_min_interval_us: fixed; at most 100,000).
    pub sync_max_interval_us: u64,
    /// MiB of each segment's newest bytes kept in the page cache once on the
    /// disk; older pages are dropped, so a fast producer does not fill all
    /// free memory with page cache (0: left to the kernel; else at least 16).
    pub page_cache_window_mb: u64,
    /// MiB of all topics' segments together kept in the page cache that way:
    /// each topic that wrote to the disk in the last 10 s keeps the smaller
    /// of page_cache_window_mb and its share of this, but at least 1 MiB (0: no budget, every topic keeps the
    /// whole window; at most 1048576).
    pub page_cache_budget_mb: u64,
    /// Segment files the local file backend keeps open at most: over it, a
    /// segment's file is closed once its bytes are synced and opened again
    /// on demand, so descriptors do not grow with the topic count (0: no
    /// limit).
    pub max_open_segment_files: usize,
    /// At this share of the data directory's file system used (blocks or inodes), the
    /// broker takes no new writes: producers are refused with
    /// ProducerBlockedQuotaExceededException, reads and acks go on (Pulsar's bookies:
    /// diskUsageThreshold).
    pub disk_usage_threshold: f64,
    /// Under this share writes are taken again (Pulsar: diskUsageLwmThreshold).
    pub disk_usage_lwm_threshold: f64,
    /// How often the disk's usage is read (Pulsar: diskCheckInterval).
    pub disk_check_interval_ms: u64,
    /// Create a topic on first use by a producer or consumer (Pulsar: allowAutoTopicCreation).
    pub allow_auto_topic_creation: bool,
    /// "non-partitioned" or "partitioned" (Pulsar: allowAutoTopicCreationType).
    pub auto_topic_creation_type: String,
    /// Partitions of an auto-created partitioned topic (Pulsar: defaultNumPartitions).
    pub default_num_partitions: u32,
    /// Serve Pulsar 5's scalable topics (PIP-460): CONNECTED advertises
    /// `supports_scalable_topics` and the scalable-topic commands are served
    /// (Pulsar: scalableTopicsEnabled).
    pub scalable_topics_enabled: bool,
    /// PIP-486 entry buckets a new scalable topic's segments share (each gets
    /// at least one; Pulsar: scalableTopicEntryBucketBudget), 1 to 1024.
    pub scalable_topic_entry_bucket_budget: u32,
    /// How often a scalable topic's controller prunes sealed segments that
    /// are past the namespace's retention and drained by every subscription
    /// (Pulsar's controller ticks every 60 s). 0 turns pruning off.
    pub scalable_topic_gc_interval_secs: u64,
    /// How long a stream or checkpoint consumer that disconnected keeps its
    /// place (and its segments) in its subscription's assignment (Pulsar:
    /// scalableTopicConsumerSessionGracePeriodSeconds).
    pub scalable_topic_consumer_session_grace_period_secs: u64,
    /// PIP-483: the controller splits hot segments and merges cold ones by
    /// itself (Pulsar: scalableTopicAutoScaleEnabled), every
    /// `scalable_topic_auto_scale_interval_secs`, within these bounds.
    pub scalable_topic_auto_scale_enabled: bool,
    pub scalable_topic_auto_scale_interval_secs: u64,
    pub scalable_topic_min_segments: u32,
    pub scalable_topic_max_segments: u32,
    /// Merges in one segment's lineage at most (stops split/merge flip-flop).
    pub scalable_topic_max_dag_depth: u32,
    pub scalable_topic_split_cooldown_secs: u64,
    pub scalable_topic_merge_cooldown_secs: u64,
    /// How long both segments of a merge must have been cold.
    pub scalable_topic_merge_window_secs: u64,
    /// A segment over any of these is split (msg/s, B/s, in and out).
    pub scalable_topic_split_msg_rate_in_threshold: f64,
    pub scalable_topic_split_bytes_rate_in_threshold: f64,
    pub scalable_topic_split_msg_rate_out_threshold: f64,
    pub scalable_topic_split_bytes_rate_out_threshold: f64,
    /// Two adjacent segments under all of these are merged.
    pub scalable_topic_merge_msg_rate_in_threshold: f64,
    pub scalable_topic_merge_bytes_rate_in_threshold: f64,
    pub scalable_topic_merge_msg_rate_out_threshold: f64,
    pub scalable_topic_merge_bytes_rate_out_threshold: f64,
    /// For recovery tests only: the broker aborts (as a kill -9 would stop
    /// it) at this step of its next split or merge: "after-record",
    /// "after-create", "after-terminate" or "after-commit". Empty: never.
    pub scalable_topic_failpoint: String,
    /// Deduplication for namespaces that do not set it (Pulsar: brokerDeduplicationEnabled).
    pub deduplication_enabled: bool,
    /// Most messages a consumer may hold unacknowledged before dispatch to it pauses
    /// (Pulsar: maxUnackedMessagesPerConsumer; 0 = no limit).
    pub max_unacked_messages_per_consumer: u32,
    /// Entries read from storage at once for one subscription.
    pub dispatcher_max_read_batch: usize,
    /// Key_Shared AUTO_SPLIT spreads hashes by consistent hashing (else by
    /// splitting ranges) (Pulsar: subscriptionKeySharedUseConsistentHashing).
    pub key_shared_use_consistent_hashing: bool,
    /// Seconds after which unacknowledged messages expire, for namespaces that
    /// set no TTL (Pulsar: ttlDurationDefaultInSeconds; 0 = never).
    pub message_ttl_secs: u64,
    /// Bundles of a namespace created without its own count
    /// (Pulsar: defaultNumberOfNamespaceBundles).
    pub default_number_of_namespace_bundles: u32,
    /// Seconds between updates of the rates in topic stats and /metrics
    /// (Pulsar: statsUpdateFrequencyInSecs).
    pub stats_update_interval_secs: u64,
    /// Per-topic series on /metrics (Pulsar: exposeTopicLevelMetricsInPrometheus);
    /// false: each namespace's topics summed into one series a family (labels cluster
    /// and namespace), for a broker of many topics (the page has ~30 series a topic).
    pub expose_topic_level_metrics_in_prometheus: bool,
    /// Seconds between backlog quota checks (evictions, producer disconnects)
    /// (Pulsar: backlogQuotaCheckIntervalInSeconds).
    pub backlog_quota_check_interval_secs: u64,
    /// Producers a topic takes at most; 0 = no limit (Pulsar: maxProducersPerTopic).
    pub max_producers_per_topic: i32,
    /// Consumers a topic takes at most, all subscriptions together; 0 = no
    /// limit (Pulsar: maxConsumersPerTopic).
    pub max_consumers_per_topic: i32,
    /// Consumers a subscription takes at most; 0 = no limit (Pulsar:
    /// maxConsumersPerSubscription).
    pub max_consumers_per_subscription: i32,
    /// Subscriptions a topic takes at most; 0 = no limit (Pulsar: maxSubscriptionsPerTopic).
    pub max_subscriptions_per_topic: i32,
    /// Topics a namespace holds at most, partitions counted one by one; 0 =
    /// no limit (Pulsar: maxTopicsPerNamespace).
    pub max_topics_per_namespace: i32,
    /// Messages per second a topic takes from its producers; 0 = no limit
    /// (Pulsar: maxPublishRatePerTopicInMessages).
    pub max_publish_rate_per_topic_in_messages: i32,
    /// Bytes per second a topic takes; 0 = no limit (Pulsar: maxPublishRatePerTopicInBytes).
    pub max_publish_rate_per_topic_in_bytes: i64,
    /// Messages per second a topic dispatches, all subscriptions together; 0
    /// = no limit (Pulsar: dispatchThrottlingRatePerTopicInMsg).
    pub dispatch_throttling_rate_per_topic_in_msg: i32,
    /// Bytes per second a topic dispatches (Pulsar: dispatchThrottlingRatePerTopicInByte).
    pub dispatch_throttling_rate_per_topic_in_byte: i64,
    /// Messages per second a subscription dispatches (Pulsar:
    /// dispatchThrottlingRatePerSubscriptionInMsg).
    pub dispatch_throttling_rate_per_subscription_in_msg: i32,
    /// Bytes per second a subscription dispatches (Pulsar:
    /// dispatchThrottlingRatePerSubscriptionInByte).
    pub dispatch_throttling_rate_per_subscription_in_byte: i64,
    /// Dispatch message rates count the messages inside batches; off, an
    /// entry (a batch) counts as one, as Pulsar does by default (Pulsar:
    /// dispatchThrottlingOnBatchMessageEnabled).
    pub dispatch_throttling_on_batch_message_enabled: bool,
    /// Subscribes one consumer may make per period; 0 = no limit (Pulsar:
    /// subscribeThrottlingRatePerConsumer).
    pub subscribe_throttling_rate_per_consumer: i32,
    /// That period, in seconds (Pulsar: subscribeRatePeriodPerConsumerInSecond).
    pub subscribe_rate_period_per_consumer_in_second: i32,
    /// Topic loads (opening a topic's log, its subscriptions' cursors) run at most this
    /// many at a time; more wait their turn (Pulsar: maxConcurrentTopicLoadRequest). A
    /// broker that takes over a lost broker's bundles, or restarts, loads its topics
    /// without letting every request open storage at once.
    pub max_concurrent_topic_load_request: usize,
    /// Delete topics nothing uses (Pulsar: brokerDeleteInactiveTopicsEnabled).
    pub broker_delete_inactive_topics_enabled: bool,
    /// Seconds between inactive-topic checks (Pulsar: brokerDeleteInactiveTopicsFrequencySeconds).
    pub broker_delete_inactive_topics_frequency_seconds: u64,
    /// What "nothing uses" means (Pulsar: brokerDeleteInactiveTopicsMode):
    /// "delete_when_no_subscriptions" or "delete_when_subscriptions_caught_up".
    pub broker_delete_inactive_topics_mode: strobe_tenancy::InactiveTopicDeleteMode,
    /// Seconds a topic stays inactive before it goes; unset: the check's
    /// period (Pulsar: brokerDeleteInactiveTopicsMaxInactiveDurationSeconds).
    pub broker_delete_inactive_topics_max_inactive_duration_seconds: Option<i32>,
    /// Once every partition of a partitioned topic went as inactive, delete
    /// the partitioned topic too (Pulsar:
    /// brokerDeleteInactivePartitionedTopicMetadataEnabled).
    pub broker_delete_inactive_partitioned_topic_metadata_enabled: bool,
    /// TLS port of the binary protocol; 0 = no TLS listener (Pulsar: brokerServicePortTls).
    pub broker_port_tls: u16,
    /// TLS port of the HTTP API; 0 = none (Pulsar: webServicePortTls).
    pub http_port_tls: u16,
    /// PEM certificate chain the TLS listeners present (Pulsar: tlsCertificateFilePath).
    pub tls_certificate_file: String,
    /// PEM private key, PKCS#8 or PKCS#1 (Pulsar: tlsKeyFilePath).
    pub tls_key_file: String,
    /// PEM CA certificates client certificates are checked against
    /// (Pulsar: tlsTrustCertsFilePath); empty = client certificates are not asked for.
    pub tls_trust_certs_file: String,
    /// Refuse TLS clients without a trusted certificate
    /// (Pulsar: tlsRequireTrustedClientCertOnConnect).
    pub tls_require_trusted_client_cert: bool,
    /// Clients must authenticate (Pulsar: authenticationEnabled).
    pub authentication_enabled: bool,
    /// Any of "token", "basic", "tls" (Pulsar: authenticationProviders).
    pub authentication_providers: Vec<String>,
    /// HMAC key for tokens: `file:///path`, `data:;base64,...` or base64 (Pulsar: tokenSecretKey).
    pub token_secret_key: String,
    /// Public key for RSA/EC-signed tokens, same forms (Pulsar: tokenPublicKey).
    pub token_public_key: String,
    /// Algorithm of token_public_key (Pulsar: tokenPublicAlg).
    pub token_public_alg: String,
    /// The token claim that names the role (Pulsar: tokenAuthClaim).
    pub token_auth_claim: String,
    /// The token this broker presents when it calls another broker's admin
    /// API itself (a scalable topic's controller acting on a segment's
    /// owner); its role must be a superuser when authentication is on
    /// (Pulsar: brokerClientAuthenticationParameters with a token).
    pub broker_client_token: String,
    /// htpasswd file for basic authentication, apr1-MD5 or bcrypt hashes
    /// (Pulsar: the PULSAR_AUTH_BASIC_CONF file).
    pub basic_auth_htpasswd_file: String,
    /// Role of clients that present no credentials; empty = they are refused
    /// (Pulsar: anonymousUserRole).
    pub anonymous_user_role: String,
    /// Check roles' permissions (Pulsar: authorizationEnabled).
    pub authorization_enabled: bool,
    /// Roles allowed everything (Pulsar: superUserRoles).
    pub superuser_roles: Vec<String>,
    /// Seconds between checks of connections' credentials; an expired token gets an
    /// AUTH_CHALLENGE (Pulsar: authenticationRefreshCheckSeconds).
    pub auth_refresh_check_secs: u64,
    /// Serve transactions: this broker campaigns for the coordinator partitions and its topics
    /// take transactional sends and acks (Pulsar: transactionCoordinatorEnabled).
    pub transaction_coordinator_enabled: bool,
    /// Coordinator partitions, fixed cluster-wide at the first start (Pulsar:
    /// transactionCoordinatorScalableTopicsParallelism).
    pub transaction_coordinator_parallelism: u32,
    /// The coordinator partitions this broker may lead, e.g. "0,4-7" (empty: all). Brokers
    /// left out of a partition never lead it.
    pub transaction_coordinator_partitions: String,
    /// Timeout of a transaction whose client asks for none, in milliseconds.
    pub transaction_default_timeout_ms: u64,
    /// Longest transaction timeout granted, in milliseconds (longer asks are cut to it).
    pub transaction_max_timeout_ms: u64,
    /// How long END_TXN waits for the participants to apply the outcome before it answers.
    pub transaction_end_wait_ms: u64,
    /// Seconds a decided transaction stays queryable once every participant applied it
    /// (Pulsar: transactionCoordinatorScalableTopicsGcRetentionSeconds).
    pub transaction_retention_secs: u64,
}

impl BrokerConfig {
    /// `transaction_coordinator_partitions` as a list (`None`: all).
    pub fn coordinator_partitions(&self) -> Result<Option<Vec<u32>>, ConfigError> {
        let spec = self.transaction_coordinator_partitions.trim();
        if spec.is_empty() {
            return Ok(None);
        }
        let bad = || {
            ConfigError::Invalid(format!(
                "transaction_coordinator_partitions {spec:?}: expected numbers and ranges like \"0,4-7\", below transaction_coordinator_parallelism ({})",
                self.transaction_coordinator_parallelism
            ))
        };
        let mut out = Vec::new();
        for part in spec.split(',') {
            let part = part.trim();
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (a.trim(), b.trim()),
                None => (part, part),
            };
            let (a, b): (u32, u32) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
            if a > b || b >= self.transaction_coordinator_parallelism {
                return Err(bad());
            }
            out.extend(a..=b);
        }
        out.sort_unstable();
        out.dedup();
        Ok(Some(out))
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        // The storage keys default to the file backend's own defaults.
        let storage = strobe_ledger::FileBackendConfig::new("");
        BrokerConfig {
            cluster_name: "standalone".into(),
            bind_address: "0.0.0.0".into(),
            advertised_address: "localhost".into(),
            advertised_listeners: String::new(),
            internal_listener_name: String::new(),
            broker_port: 6650,
            http_port: 8080,
            data_dir: PathBuf::from("data"),
            max_message_size: strobe_wire::DEFAULT_MAX_MESSAGE_SIZE,
            keepalive_interval_secs: 30,
            handshake_timeout_secs: 30,
            max_connections: 10_000,
            worker_threads: 0,
            cpu_affinity: String::new(),
            metadata_store_url: String::new(),
            metadata_session_timeout_secs: 10,
            transaction_coordinator_enabled: true,
            transaction_coordinator_parallelism: 16,
            transaction_coordinator_partitions: String::new(),
            transaction_default_timeout_ms: 60_000,
            transaction_max_timeout_ms: 3 * 3600 * 1000,
            transaction_end_wait_ms: 5_000,
            transaction_retention_secs: 300,
            load_balancer_enabled: true,
            load_balancer_interval_secs: 10,
            load_balancer_bundle_threshold: 1,
            load_balancer_shedding_grace_period_minutes: 30,
            load_balancer_shedding_condition_hit_count_threshold: 3,
            load_balancer_auto_bundle_split_enabled: true,
            load_balancer_namespace_bundle_max_topics: 1000,
            load_balancer_namespace_bundle_max_msg_rate: 30_000,
            load_balancer_namespace_maximum_bundles: 128,
            storage_flush_delay_ms: 0,
            storage_max_put_bytes: 8 << 20,
            storage_cache_mb: 64,
            broker_id: String::new(),
            storage: "file".into(),
            sync: strobe_ledger::SyncMode::Always,
            sync_min_interval_us: storage.min_sync_interval.as_micros() as u64,
            sync_max_interval_us: storage.max_sync_interval.as_micros() as u64,
            page_cache_window_mb: storage.page_cache_window >> 20,
            page_cache_budget_mb: storage.page_cache_budget >> 20,
            max_open_segment_files: storage.max_open_segment_files,
            disk_usage_threshold: 0.95,
            disk_usage_lwm_threshold: 0.90,
            disk_check_interval_ms: 1000,
            allow_auto_topic_creation: true,
            auto_topic_creation_type: "non-partitioned".into(),
            default_num_partitions: 1,
            scalable_topics_enabled: true,
            scalable_topic_entry_bucket_budget: 4,
            scalable_topic_gc_interval_secs: 60,
            scalable_topic_consumer_session_grace_period_secs: 60,
            scalable_topic_auto_scale_enabled: true,
            scalable_topic_auto_scale_interval_secs: 60,
            scalable_topic_min_segments: 1,
            scalable_topic_max_segments: 64,
            scalable_topic_max_dag_depth: 10,
            scalable_topic_split_cooldown_secs: 60,
            scalable_topic_merge_cooldown_secs: 300,
            scalable_topic_merge_window_secs: 300,
            scalable_topic_split_msg_rate_in_threshold: 10_000.0,
            scalable_topic_split_bytes_rate_in_threshold: 50_000_000.0,
            scalable_topic_split_msg_rate_out_threshold: 50_000.0,
            scalable_topic_split_bytes_rate_out_threshold: 250_000_000.0,
            scalable_topic_merge_msg_rate_in_threshold: 1_000.0,
            scalable_topic_merge_bytes_rate_in_threshold: 5_000_000.0,
            scalable_topic_merge_msg_rate_out_threshold: 5_000.0,
            scalable_topic_merge_bytes_rate_out_threshold: 25_000_000.0,
            scalable_topic_failpoint: String::new(),
            broker_client_token: String::new(),
            deduplication_enabled: false,
            max_unacked_messages_per_consumer: 50_000,
            dispatcher_max_read_batch: 100,
            key_shared_use_consistent_hashing: true,
            message_ttl_secs: 0,
            default_number_of_namespace_bundles: 4,
            stats_update_interval_secs: 15,
            expose_topic_level_metrics_in_prometheus: true,
            backlog_quota_check_interval_secs: 60,
            max_producers_per_topic: 0,
            max_consumers_per_topic: 0,
            max_consumers_per_subscription: 0,
            max_subscriptions_per_topic: 0,
            max_topics_per_namespace: 0,
            max_publish_rate_per_topic_in_messages: 0,
            max_publish_rate_per_topic_in_bytes: 0,
            dispatch_throttling_rate_per_topic_in_msg: 0,
            dispatch_throttling_rate_per_topic_in_byte: 0,
            dispatch_throttling_rate_per_subscription_in_msg: 0,
            dispatch_throttling_rate_per_subscription_in_byte: 0,
            dispatch_throttling_on_batch_message_enabled: false,
            subscribe_throttling_rate_per_consumer: 0,
            subscribe_rate_period_per_consumer_in_second: 30,
            broker_delete_inactive_topics_enabled: true,
            broker_delete_inactive_topics_frequency_seconds: 60,
            max_concurrent_topic_load_request: 5000,
            broker_delete_inactive_topics_mode: Default::default(),
            broker_delete_inactive_topics_max_inactive_duration_seconds: None,
            broker_delete_inactive_partitioned_topic_metadata_enabled: false,
            broker_port_tls: 0,
            http_port_tls: 0,
            tls_certificate_file: String::new(),
            tls_key_file: String::new(),
            tls_trust_certs_file: String::new(),
            tls_require_trusted_client_cert: false,
            authentication_enabled: false,
            authentication_providers: Vec::new(),
            token_secret_key: String::new(),
            token_public_key: String::new(),
            token_public_alg: "RS256".into(),
            token_auth_claim: "sub".into(),
            basic_auth_htpasswd_file: String::new(),
            anonymous_user_role: String::new(),
            authorization_enabled: false,
            superuser_roles: Vec::new(),
            auth_refresh_check_secs: 60,
        }
    }
}

impl BrokerConfig {
    pub fn from_toml_str(text: &str, path: &Path) -> Result<BrokerConfig, ConfigError> {
        let cfg: BrokerConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn load(path: &Path) -> Result<BrokerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        BrokerConfig::from_toml_str(&text, path)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_message_size == 0
            || self.max_message_size > (i32::MAX as usize) - strobe_wire::FRAME_PADDING
        {
            return Err(ConfigError::Invalid(format!(
                "max_message_size must be between 1 and {} bytes, not {}",
                (i32::MAX as usize) - strobe_wire::FRAME_PADDING,
                self.max_message_size
            )));
        }
        if self.stats_update_interval_secs == 0 || self.backlog_quota_check_interval_secs == 0 {
            return Err(ConfigError::Invalid(
                "stats_update_interval_secs and backlog_quota_check_interval_secs must be at least 1"
                    .into(),
            ));
        }
        if self.max_concurrent_topic_load_request == 0 {
            return Err(ConfigError::Invalid(
                "max_concurrent_topic_load_request must be at least 1".into(),
            ));
        }
        if self.broker_delete_inactive_topics_frequency_seconds == 0 {
            return Err(ConfigError::Invalid(
                "broker_delete_inactive_topics_frequency_seconds must be at least 1".into(),
            ));
        }
        if !(1..=1024).contains(&self.default_number_of_namespace_bundles) {
            return Err(ConfigError::Invalid(format!(
                "default_number_of_namespace_bundles must be between 1 and 1024, not {}",
                self.default_number_of_namespace_bundles
            )));
        }
        for (key, v) in [
            ("sync_min_interval_us", self.sync_min_interval_us),
            ("sync_max_interval_us", self.sync_max_interval_us),
        ] {
            if v > 100_000 {
                return Err(ConfigError::Invalid(format!(
                    "{key} must be at most 100000 (100 ms), not {v}"
                )));
            }
        }
        if self.worker_threads > 1024 {
            return Err(ConfigError::Invalid(format!(
                "worker_threads must be at most 1024 (0: one per core), not {}",
                self.worker_threads
            )));
        }
        cpu_list(&self.cpu_affinity)?;
        let min_window = strobe_ledger::file::MIN_PAGE_CACHE_WINDOW >> 20;
        if self.page_cache_window_mb != 0
            && !(min_window..=1 << 20).contains(&self.page_cache_window_mb)
        {
            return Err(ConfigError::Invalid(format!(
                "page_cache_window_mb must be 0 or between {min_window} and 1048576, not {}",
                self.page_cache_window_mb
            )));
        }
        if !(1..=1024).contains(&self.scalable_topic_entry_bucket_budget) {
            return Err(ConfigError::Invalid(format!(
                "scalable_topic_entry_bucket_budget must be in 1..=1024, not {}",
                self.scalable_topic_entry_bucket_budget
            )));
        }
        if !matches!(
            self.scalable_topic_failpoint.as_str(),
            "" | "after-record" | "after-create" | "after-terminate" | "after-commit"
        ) {
            return Err(ConfigError::Invalid(format!(
                "scalable_topic_failpoint must be empty, after-record, after-create, after-terminate or after-commit, not {:?}",
                self.scalable_topic_failpoint
            )));
        }
        strobe_ledger::disk::Watermarks::new(
            self.disk_usage_threshold,
            self.disk_usage_lwm_threshold,
        )
        .map_err(ConfigError::Invalid)?;
        if self.disk_check_interval_ms == 0 {
            return Err(ConfigError::Invalid(
                "disk_check_interval_ms must be at least 1".into(),
            ));
        }
        if self.page_cache_budget_mb > 1 << 20 {
            return Err(ConfigError::Invalid(format!(
                "page_cache_budget_mb must be at most 1048576, not {}",
                self.page_cache_budget_mb
            )));
        }
        if self.keepalive_interval_secs == 0 {
            return Err(ConfigError::Invalid(
                "keepalive_interval_secs must be at least 1".into(),
            ));
        }
        self.storage_url()?;
        if !matches!(
            self.auto_topic_creation_type.as_str(),
            "non-partitioned" | "partitioned"
        ) {
            return Err(ConfigError::Invalid(format!(
                "auto_topic_creation_type must be \"non-partitioned\" or \"partitioned\", not {:?}",
                self.auto_topic_creation_type
            )));
        }
        if self.default_num_partitions == 0 {
            return Err(ConfigError::Invalid(
                "default_num_partitions must be at least 1".into(),
            ));
        }
        if self.dispatcher_max_read_batch == 0 {
            return Err(ConfigError::Invalid(
                "dispatcher_max_read_batch must be at least 1".into(),
            ));
        }
        if (self.broker_port_tls != 0 || self.http_port_tls != 0)
            && (self.tls_certificate_file.is_empty() || self.tls_key_file.is_empty())
        {
            return Err(ConfigError::Invalid(
                "a TLS port needs tls_certificate_file and tls_key_file".into(),
            ));
        }
        if let Some(p) = self
            .authentication_providers
            .iter()
            .find(|p| !matches!(p.as_str(), "token" | "basic" | "tls"))
        {
            return Err(ConfigError::Invalid(format!(
                "authentication_providers: unknown provider {p:?} (token, basic or tls)"
            )));
        }
        let has = |p: &str| self.authentication_providers.iter().any(|x| x == p);
        if has("token") && self.token_secret_key.is_empty() && self.token_public_key.is_empty() {
            return Err(ConfigError::Invalid(
                "the token provider needs token_secret_key or token_public_key".into(),
            ));
        }
        if has("basic") && self.basic_auth_htpasswd_file.is_empty() {
            return Err(ConfigError::Invalid(
                "the basic provider needs basic_auth_htpasswd_file".into(),
            ));
        }
        if self.auth_refresh_check_secs == 0 {
            return Err(ConfigError::Invalid(
                "auth_refresh_check_secs must be at least 1".into(),
            ));
        }
        if self.metadata_session_timeout_secs < 3 {
            return Err(ConfigError::Invalid(format!(
                "metadata_session_timeout_secs must be at least 3 (etcd rounds leases to whole seconds), not {}",
                self.metadata_session_timeout_secs
            )));
        }
        if self.transaction_coordinator_parallelism == 0
            || self.transaction_coordinator_parallelism > strobe_metadata::tc::MAX_PARALLELISM
        {
            return Err(ConfigError::Invalid(format!(
                "transaction_coordinator_parallelism must be in 1..={}, not {}",
                strobe_metadata::tc::MAX_PARALLELISM,
                self.transaction_coordinator_parallelism
            )));
        }
        self.coordinator_partitions()?;
        if self.load_balancer_interval_secs == 0 {
            return Err(ConfigError::Invalid(
                "load_balancer_interval_secs must be at least 1".into(),
            ));
        }
        if self.storage_max_put_bytes < (self.max_message_size + strobe_wire::FRAME_PADDING) as u64
        {
            return Err(ConfigError::Invalid(format!(
                "storage_max_put_bytes ({}) must hold the largest message (max_message_size {})",
                self.storage_max_put_bytes, self.max_message_size
            )));
        }
        if self.advertised_address.is_empty() {
            return Err(ConfigError::Invalid(
                "advertised_address must not be empty".into(),
            ));
        }
        let listeners = self.listeners()?;
        if !self.internal_listener_name.is_empty()
            && !listeners
                .iter()
                .any(|l| l.name == self.internal_listener_name)
        {
            return Err(ConfigError::Invalid(format!(
                "internal_listener_name {:?} is not one of advertised_listeners",
                self.internal_listener_name
            )));
        }
        if let Some(l) = self.internal_listener()
            && l.broker_service_url.is_none()
        {
            return Err(ConfigError::Invalid(format!(
                "the internal listener {:?} needs a pulsar:// URL (other brokers use it)",
                l.name
            )));
        }
        Ok(())
    }

    /// The listeners of `advertised_listeners` (empty when it is).
    pub fn listeners(&self) -> Result<Vec<AdvertisedListener>, ConfigError> {
        parse_advertised_listeners(&self.advertised_listeners)
    }

    /// The listener brokers and clients that name none get: the one
    /// `internal_listener_name` names, else the first; `None` without listeners.
    pub fn internal_listener(&self) -> Option<AdvertisedListener> {
        let listeners = self.listeners().ok()?;
        let name = &self.internal_listener_name;
        listeners
            .iter()
            .find(|l| !name.is_empty() && &l.name == name)
            .or(listeners.first())
            .cloned()
    }

    /// The storage the `storage` key names: "file" is the file backend
    /// under `data_dir/ledgers`, "memory" the memory backend, anything else
    /// a storage URL.
    pub fn storage_url(&self) -> Result<strobe_ledger::StorageUrl, ConfigError> {
        match self.storage.as_str() {
            "file" => Ok(strobe_ledger::StorageUrl::File(
                self.data_dir.join("ledgers"),
            )),
            other => strobe_ledger::StorageUrl::parse(other)
                .map_err(|e| ConfigError::Invalid(format!("storage: {e}"))),
        }
    }

    /// The etcd endpoints of `metadata_store_url`.
    pub fn etcd_endpoints(&self) -> Result<Vec<String>, ConfigError> {
        let url = self.metadata_store_url.trim();
        let list = url.strip_prefix("etcd:").unwrap_or(url);
        let eps: Vec<String> = list
            .split(',')
            .map(|e| e.trim().to_string())
            .filter(|e| !e.is_empty())
            .collect();
        if eps.is_empty() {
            return Err(ConfigError::Invalid(
                "metadata_store_url must name the etcd endpoints (etcd:http://host:2379[,…]) for a cluster broker".into(),
            ));
        }
        if let Some(bad) = eps
            .iter()
            .find(|e| !(e.starts_with("http://") || e.starts_with("https://")))
        {
            return Err(ConfigError::Invalid(format!(
                "metadata_store_url: {bad:?} is not an etcd endpoint (http://host:port)"
            )));
        }
        Ok(eps)
    }

    pub fn broker_listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        format!("{}:{}", self.bind_address, self.broker_port)
            .parse()
            .map_err(|e| ConfigError::Invalid(format!("bind_address {:?}: {e}", self.bind_address)))
    }

    pub fn keepalive_interval(&self) -> Duration {
        Duration::from_secs(self.keepalive_interval_secs)
    }

    /// `pulsar+ssl://host:port` when the TLS listener is on (the internal
    /// advertised listener's TLS URL if it has one).
    pub fn broker_service_url_tls(&self, port: u16) -> Option<String> {
        self.internal_listener()
            .and_then(|l| l.broker_service_url_tls)
            .or_else(|| {
                (self.broker_port_tls != 0)
                    .then(|| format!("pulsar+ssl://{}:{port}", self.advertised_address))
            })
    }

    /// `pulsar://host:port` as clients that name no listener (and other
    /// brokers) should reach this broker: the internal advertised listener's
    /// URL, else the advertised address.
    pub fn broker_service_url(&self, port: u16) -> String {
        self.internal_listener()
            .and_then(|l| l.broker_service_url)
            .unwrap_or_else(|| format!("pulsar://{}:{}", self.advertised_address, port))
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod shipped_files;
