//! Constructors for the commands Strobe sends, so handlers never assemble
//! protobuf by hand. Broker replies first, then the requests a client sends.

use bytes::Bytes;

use crate::frame::{Command, OutFrame};
use crate::payload;
use crate::proto::{self, *};
use crate::{PROTOCOL_VERSION, WireError};

// ---------------------------------------------------------------------------
// Broker -> client
// ---------------------------------------------------------------------------

/// CONNECTED, at `min(ours, theirs)` protocol version.
pub fn connected(
    server_version: &str,
    client_protocol_version: i32,
    max_message_size: Option<usize>,
    feature_flags: FeatureFlags,
) -> Command {
    CommandConnected {
        server_version: server_version.to_owned(),
        protocol_version: Some(client_protocol_version.clamp(0, PROTOCOL_VERSION)),
        max_message_size: max_message_size.map(|s| s.min(i32::MAX as usize) as i32),
        feature_flags: Some(feature_flags),
    }
    .into()
}

pub fn ping() -> Command {
    CommandPing {}.into()
}

pub fn pong() -> Command {
    CommandPong {}.into()
}

pub fn success(request_id: u64) -> Command {
    CommandSuccess {
        request_id,
        schema: None,
    }
    .into()
}

/// ERROR for a request. Use `request_id = u64::MAX` (Java's -1) when the error
/// is not tied to a request, e.g. a failed CONNECT.
pub fn error(request_id: u64, error: ServerError, message: impl Into<String>) -> Command {
    CommandError {
        request_id,
        error: error as i32,
        message: message.into(),
    }
    .into()
}

pub fn auth_challenge(
    server_version: &str,
    method: &str,
    data: Bytes,
    protocol_version: i32,
) -> Command {
    CommandAuthChallenge {
        server_version: Some(server_version.to_owned()),
        challenge: Some(AuthData {
            auth_method_name: Some(method.to_owned()),
            auth_data: Some(data),
        }),
        protocol_version: Some(protocol_version),
    }
    .into()
}

pub fn partitioned_metadata(request_id: u64, partitions: u32) -> Command {
    CommandPartitionedTopicMetadataResponse {
        partitions: Some(partitions),
        request_id,
        response: Some(command_partitioned_topic_metadata_response::LookupType::Success as i32),
        error: None,
        message: None,
    }
    .into()
}

pub fn partitioned_metadata_failed(
    request_id: u64,
    error: ServerError,
    message: impl Into<String>,
) -> Command {
    CommandPartitionedTopicMetadataResponse {
        partitions: None,
        request_id,
        response: Some(command_partitioned_topic_metadata_response::LookupType::Failed as i32),
        error: Some(error as i32),
        message: Some(message.into()),
    }
    .into()
}

/// LOOKUP answered with Connect (this broker, or the one given, serves the topic).
pub fn lookup_connect(
    request_id: u64,
    url: &str,
    url_tls: Option<&str>,
    proxy_through_service_url: bool,
) -> Command {
    lookup(
        request_id,
        command_lookup_topic_response::LookupType::Connect,
        url,
        url_tls,
        true,
        proxy_through_service_url,
    )
}

/// LOOKUP answered with Redirect: ask `url` next.
pub fn lookup_redirect(
    request_id: u64,
    url: &str,
    url_tls: Option<&str>,
    authoritative: bool,
) -> Command {
    lookup(
        request_id,
        command_lookup_topic_response::LookupType::Redirect,
        url,
        url_tls,
        authoritative,
        false,
    )
}

fn lookup(
    request_id: u64,
    kind: command_lookup_topic_response::LookupType,
    url: &str,
    url_tls: Option<&str>,
    authoritative: bool,
    proxy_through_service_url: bool,
) -> Command {
    CommandLookupTopicResponse {
        broker_service_url: Some(url.to_owned()),
        broker_service_url_tls: url_tls.map(str::to_owned),
        response: Some(kind as i32),
        request_id,
        authoritative: Some(authoritative),
        error: None,
        message: None,
        proxy_through_service_url: Some(proxy_through_service_url),
    }
    .into()
}

pub fn lookup_failed(request_id: u64, error: ServerError, message: impl Into<String>) -> Command {
    CommandLookupTopicResponse {
        response: Some(command_lookup_topic_response::LookupType::Failed as i32),
        request_id,
        error: Some(error as i32),
        message: Some(message.into()),
        ..Default::default()
    }
    .into()
}

pub fn producer_success(
    request_id: u64,
    producer_name: &str,
    last_sequence_id: i64,
    schema_version: Option<Bytes>,
    topic_epoch: Option<u64>,
    producer_ready: bool,
) -> Command {
    CommandProducerSuccess {
        request_id,
        producer_name: producer_name.to_owned(),
        last_sequence_id: Some(last_sequence_id),
        schema_version,
        topic_epoch,
        producer_ready: Some(producer_ready),
    }
    .into()
}

pub fn message_id(ledger_id: u64, entry_id: u64) -> MessageIdData {
    MessageIdData {
        ledger_id,
        entry_id,
        ..Default::default()
    }
}

pub fn send_receipt(
    producer_id: u64,
    sequence_id: u64,
    highest_sequence_id: u64,
    id: MessageIdData,
) -> Command {
    CommandSendReceipt {
        producer_id,
        sequence_id,
        message_id: Some(id),
        highest_sequence_id: Some(highest_sequence_id),
    }
    .into()
}

pub fn send_error(
    producer_id: u64,
    sequence_id: u64,
    error: ServerError,
    message: impl Into<String>,
) -> Command {
    CommandSendError {
        producer_id,
        sequence_id,
        error: error as i32,
        message: message.into(),
    }
    .into()
}

/// CLOSE_PRODUCER from the broker (`request_id` -1). With an assigned broker
/// (PIP-307) the client reconnects there without a lookup.
pub fn close_producer(
    producer_id: u64,
    assigned_url: Option<&str>,
    assigned_url_tls: Option<&str>,
) -> Command {
    CommandCloseProducer {
        producer_id,
        request_id: u64::MAX,
        assigned_broker_service_url: assigned_url.map(str::to_owned),
        assigned_broker_service_url_tls: assigned_url_tls.map(str::to_owned),
    }
    .into()
}

/// CLOSE_CONSUMER from the broker; see [`close_producer`].
pub fn close_consumer(
    consumer_id: u64,
    assigned_url: Option<&str>,
    assigned_url_tls: Option<&str>,
) -> Command {
    CommandCloseConsumer {
        consumer_id,
        request_id: u64::MAX,
        assigned_broker_service_url: assigned_url.map(str::to_owned),
        assigned_broker_service_url_tls: assigned_url_tls.map(str::to_owned),
    }
    .into()
}

/// A MESSAGE frame for a stored entry. The entry's bytes are shared, not
/// copied; broker entry metadata is dropped unless the client asked for it,
/// and a checksum is added when the producer sent none.
pub fn message_frame(
    consumer_id: u64,
    id: MessageIdData,
    redelivery_count: u32,
    ack_set: Vec<i64>,
    consumer_epoch: Option<u64>,
    entry: &Bytes,
    keep_entry_metadata: bool,
) -> Result<OutFrame, WireError> {
    let (prefix, body) = payload::for_delivery(entry, keep_entry_metadata)?;
    let cmd = CommandMessage {
        consumer_id,
        message_id: id,
        redelivery_count: (redelivery_count > 0).then_some(redelivery_count),
        ack_set,
        consumer_epoch,
    };
    Ok(OutFrame::with_payload(cmd, &prefix, body))
}

pub fn active_consumer_change(consumer_id: u64, is_active: bool) -> Command {
    CommandActiveConsumerChange {
        consumer_id,
        is_active: Some(is_active),
    }
    .into()
}

pub fn reached_end_of_topic(consumer_id: u64) -> Command {
    CommandReachedEndOfTopic { consumer_id }.into()
}

pub fn ack_response(
    consumer_id: u64,
    request_id: u64,
    error: Option<(ServerError, String)>,
) -> Command {
    let (error, message) = match error {
        Some((e, m)) => (Some(e as i32), Some(m)),
        None => (None, None),
    };
    CommandAckResponse {
        consumer_id,
        request_id: Some(request_id),
        error,
        message,
        ..Default::default()
    }
    .into()
}

pub fn get_last_message_id_response(
    request_id: u64,
    last: MessageIdData,
    mark_delete: Option<MessageIdData>,
) -> Command {
    CommandGetLastMessageIdResponse {
        last_message_id: last,
        request_id,
        consumer_mark_delete_position: mark_delete,
    }
    .into()
}

/// GET_TOPICS_OF_NAMESPACE_RESPONSE. When the client's hash is still current,
/// `changed` is false and no topics are sent.
pub fn topics_of_namespace(
    request_id: u64,
    topics: Vec<String>,
    filtered: bool,
    hash: String,
    changed: bool,
) -> Command {
    CommandGetTopicsOfNamespaceResponse {
        request_id,
        topics: if changed { topics } else { Vec::new() },
        filtered: Some(filtered),
        topics_hash: Some(hash),
        changed: Some(changed),
    }
    .into()
}

pub fn watch_topic_list_success(
    request_id: u64,
    watcher_id: u64,
    topics: Vec<String>,
    hash: String,
) -> Command {
    CommandWatchTopicListSuccess {
        request_id,
        watcher_id,
        topic: topics,
        topics_hash: hash,
    }
    .into()
}

pub fn watch_topic_update(
    watcher_id: u64,
    new_topics: Vec<String>,
    deleted_topics: Vec<String>,
    hash: String,
) -> Command {
    CommandWatchTopicUpdate {
        watcher_id,
        new_topics,
        deleted_topics,
        topics_hash: hash,
    }
    .into()
}

pub fn consumer_stats_error(
    request_id: u64,
    error: ServerError,
    message: impl Into<String>,
) -> Command {
    CommandConsumerStatsResponse {
        request_id,
        error_code: Some(error as i32),
        error_message: Some(message.into()),
        ..Default::default()
    }
    .into()
}

pub fn get_schema_response(request_id: u64, schema: Schema, version: Bytes) -> Command {
    CommandGetSchemaResponse {
        request_id,
        schema: Some(schema),
        schema_version: Some(version),
        ..Default::default()
    }
    .into()
}

pub fn get_schema_error(
    request_id: u64,
    error: ServerError,
    message: impl Into<String>,
) -> Command {
    CommandGetSchemaResponse {
        request_id,
        error_code: Some(error as i32),
        error_message: Some(message.into()),
        ..Default::default()
    }
    .into()
}

pub fn get_or_create_schema_response(request_id: u64, version: Bytes) -> Command {
    CommandGetOrCreateSchemaResponse {
        request_id,
        schema_version: Some(version),
        ..Default::default()
    }
    .into()
}

pub fn get_or_create_schema_error(
    request_id: u64,
    error: ServerError,
    message: impl Into<String>,
) -> Command {
    CommandGetOrCreateSchemaResponse {
        request_id,
        error_code: Some(error as i32),
        error_message: Some(message.into()),
        ..Default::default()
    }
    .into()
}

pub fn tc_client_connect_response(
    request_id: u64,
    error: Option<(ServerError, String)>,
) -> Command {
    let (error, message) = split_error(error);
    CommandTcClientConnectResponse {
        request_id,
        error,
        message,
    }
    .into()
}

pub fn new_txn_response(
    request_id: u64,
    txn: Option<(u64, u64)>,
    error: Option<(ServerError, String)>,
) -> Command {
    let (error, message) = split_error(error);
    CommandNewTxnResponse {
        request_id,
        txnid_most_bits: txn.map(|t| t.0),
        txnid_least_bits: txn.map(|t| t.1),
        error,
        message,
    }
    .into()
}

macro_rules! txn_reply {
    ($(#[$doc:meta])* $name:ident, $ty:ident) => {
        $(#[$doc])*
        pub fn $name(request_id: u64, most: u64, least: u64, error: Option<(ServerError, String)>) -> Command {
            let (error, message) = split_error(error);
            $ty {
                request_id,
                txnid_most_bits: Some(most),
                txnid_least_bits: Some(least),
                error,
                message,
            }
            .into()
        }
    };
}

txn_reply!(
    add_partition_to_txn_response,
    CommandAddPartitionToTxnResponse
);
txn_reply!(
    add_subscription_to_txn_response,
    CommandAddSubscriptionToTxnResponse
);
txn_reply!(end_txn_response, CommandEndTxnResponse);
txn_reply!(
    end_txn_on_partition_response,
    CommandEndTxnOnPartitionResponse
);
txn_reply!(
    end_txn_on_subscription_response,
    CommandEndTxnOnSubscriptionResponse
);

fn split_error(error: Option<(ServerError, String)>) -> (Option<i32>, Option<String>) {
    match error {
        Some((e, m)) => (Some(e as i32), Some(m)),
        None => (None, None),
    }
}

/// PIP-473: a full snapshot of coordinator partition -> leader URLs.
pub fn watch_tc_assignments_update(
    watch_id: u64,
    parallelism: u32,
    assignments: Vec<TcAssignment>,
) -> Command {
    CommandWatchTcAssignmentsUpdate {
        watch_id,
        snapshot: Some(TcAssignmentsSnapshot {
            parallelism,
            assignments,
        }),
        error: None,
        message: None,
    }
    .into()
}

pub fn watch_tc_assignments_error(
    watch_id: u64,
    error: ServerError,
    message: impl Into<String>,
) -> Command {
    CommandWatchTcAssignmentsUpdate {
        watch_id,
        snapshot: None,
        error: Some(error as i32),
        message: Some(message.into()),
    }
    .into()
}

/// PIP-460: a scalable topic's layout for DAG watch session `session_id`,
/// with the name the lookup resolved to (`topic://tenant/ns/name`).
pub fn scalable_topic_update(
    session_id: u64,
    resolved_topic_name: &str,
    dag: ScalableTopicDag,
) -> Command {
    CommandScalableTopicUpdate {
        session_id,
        dag: Some(dag),
        error: None,
        message: None,
        resolved_topic_name: Some(resolved_topic_name.to_owned()),
    }
    .into()
}

/// PIP-460: DAG watch session `session_id` failed (or was refused).
pub fn scalable_topic_error(
    session_id: u64,
    error: ServerError,
    message: impl Into<String>,
) -> Command {
    CommandScalableTopicUpdate {
        session_id,
        dag: None,
        error: Some(error as i32),
        message: Some(message.into()),
        resolved_topic_name: None,
    }
    .into()
}

pub fn topic_migrated(
    resource_id: u64,
    consumer: bool,
    url: &str,
    url_tls: Option<&str>,
) -> Command {
    let kind = if consumer {
        command_topic_migrated::ResourceType::Consumer
    } else {
        command_topic_migrated::ResourceType::Producer
    };
    CommandTopicMigrated {
        resource_id,
        resource_type: kind as i32,
        broker_service_url: Some(url.to_owned()),
        broker_service_url_tls: url_tls.map(str::to_owned),
    }
    .into()
}

// ---------------------------------------------------------------------------
// Client -> broker
// ---------------------------------------------------------------------------

/// CONNECT with the flags the Java client sets.
pub fn connect(client_version: &str, auth: Option<(&str, Bytes)>) -> Command {
    let (auth_method_name, auth_data) = match auth {
        Some((m, d)) => (Some(m.to_owned()), Some(d)),
        None => (None, None),
    };
    CommandConnect {
        client_version: client_version.to_owned(),
        auth_method_name,
        auth_data,
        protocol_version: Some(PROTOCOL_VERSION),
        feature_flags: Some(FeatureFlags {
            supports_auth_refresh: Some(true),
            supports_broker_entry_metadata: Some(true),
            supports_partial_producer: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
    .into()
}

pub fn lookup_topic(request_id: u64, topic: &str, authoritative: bool) -> Command {
    CommandLookupTopic {
        topic: topic.to_owned(),
        request_id,
        authoritative: Some(authoritative),
        ..Default::default()
    }
    .into()
}

pub fn partitioned_metadata_request(request_id: u64, topic: &str) -> Command {
    CommandPartitionedTopicMetadata {
        topic: topic.to_owned(),
        request_id,
        ..Default::default()
    }
    .into()
}

pub fn producer(request_id: u64, producer_id: u64, topic: &str, name: Option<&str>) -> Command {
    CommandProducer {
        topic: topic.to_owned(),
        producer_id,
        request_id,
        producer_name: name.map(str::to_owned),
        user_provided_producer_name: Some(name.is_some()),
        ..Default::default()
    }
    .into()
}

/// A SEND frame: `section` is the metadata-and-payload built by [`payload::encode`].
pub fn send_frame(
    producer_id: u64,
    sequence_id: u64,
    num_messages: i32,
    section: Bytes,
) -> OutFrame {
    let cmd = CommandSend {
        producer_id,
        sequence_id,
        num_messages: (num_messages != 1).then_some(num_messages),
        ..Default::default()
    };
    OutFrame::with_payload(cmd, &[], section)
}

pub fn subscribe(
    request_id: u64,
    consumer_id: u64,
    topic: &str,
    subscription: &str,
    sub_type: command_subscribe::SubType,
) -> CommandSubscribe {
    CommandSubscribe {
        topic: topic.to_owned(),
        subscription: subscription.to_owned(),
        sub_type: sub_type as i32,
        consumer_id,
        request_id,
        ..Default::default()
    }
}

pub fn flow(consumer_id: u64, permits: u32) -> Command {
    CommandFlow {
        consumer_id,
        message_permits: permits,
    }
    .into()
}

pub fn ack(
    consumer_id: u64,
    cumulative: bool,
    ids: Vec<MessageIdData>,
    request_id: Option<u64>,
) -> Command {
    let kind = if cumulative {
        command_ack::AckType::Cumulative
    } else {
        command_ack::AckType::Individual
    };
    CommandAck {
        consumer_id,
        ack_type: kind as i32,
        message_id: ids,
        request_id,
        ..Default::default()
    }
    .into()
}

pub fn close_producer_request(request_id: u64, producer_id: u64) -> Command {
    proto::CommandCloseProducer {
        producer_id,
        request_id,
        ..Default::default()
    }
    .into()
}

pub fn close_consumer_request(request_id: u64, consumer_id: u64) -> Command {
    proto::CommandCloseConsumer {
        consumer_id,
        request_id,
        ..Default::default()
    }
    .into()
}
