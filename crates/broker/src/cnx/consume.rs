//! Consumers on a connection: SUBSCRIBE and everything a consumer sends
//! afterwards (FLOW, ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES, SEEK,
//! UNSUBSCRIBE, CLOSE_CONSUMER, GET_LAST_MESSAGE_ID, CONSUMER_STATS). The
//! subscription's dispatcher does the work; these hand the command over.

use std::sync::Arc;

use strobe_dispatch::key_shared::HashRange;
use strobe_ledger::InitialPosition;
use strobe_model::{SubType, TopicName};
use strobe_wire::proto::command_subscribe::SubType as SubscribeType;
use strobe_wire::proto::{self, CommandConsumerStatsResponse};
use strobe_wire::{Command, commands};
use tracing::info;

use super::session::ConsumerRef;
use super::{Outcome, ServerCnx};
use crate::BrokerError;
use crate::security::Operation;
use crate::subscription::{
    AdminOp, AdminReply, ConsumerSpec, KeySharedSpec, SeekTarget, StartPosition,
};

fn consumer_missing() -> BrokerError {
    BrokerError::ConsumerNotFound("consumer not found".into())
}

impl ServerCnx {
    fn consumer(&self, consumer_id: u64) -> Result<&ConsumerRef, BrokerError> {
        self.consumers
            .get(&consumer_id)
            .ok_or_else(consumer_missing)
    }

    /// SUBSCRIBE: checks, the schema, then the consumer joins its subscription.
    pub(super) async fn subscribe(
        &mut self,
        c: proto::CommandSubscribe,
        protocol_version: i32,
    ) -> Result<Command, BrokerError> {
        let request_id = c.request_id;
        if let Some(k) = self.consumers.get(&c.consumer_id) {
            if !k
                .closed_by_broker
                .load(std::sync::atomic::Ordering::Acquire)
            {
                // The client subscribes again with a consumer it has (its
                // first request timed out): as Pulsar's broker, the
                // consumer there is answers. Another topic or subscription
                // under the same id is the client's mistake.
                let same_topic = TopicName::parse(&c.topic).is_ok_and(|t| t == k.topic.name);
                if same_topic && k.sub.name == c.subscription {
                    info!(topic = %c.topic, subscription = %c.subscription, consumer_id = c.consumer_id, "consumer with the same id is already created");
                    return Ok(commands::success(request_id));
                }
                return Err(BrokerError::ConsumerBusy(format!(
                    "consumer id {} is already in use on this connection",
                    c.consumer_id
                )));
            }
            // The broker closed it (seek, topic closing): the client subscribes again.
            self.consumers.remove(&c.consumer_id);
        }
        let topic_name = TopicName::parse(&c.topic)?;
        self.service
            .authorize(
                self.role(),
                Operation::Consume(&topic_name, &c.subscription),
            )
            .await?;
        let create = c.force_topic_creation.unwrap_or(true);
        let topic = self.service.topic(&topic_name, create).await?;
        if let Some(schema) = c.schema.as_ref() {
            let schema = crate::schemas::from_wire(schema)?;
            let idle = topic.producer_names().is_empty()
                && topic
                    .subscriptions()
                    .iter()
                    .all(|s| s.consumer_count() == 0)
                && topic.ledger.stats().entries == 0;
            self.service
                .schemas
                .consumer_schema(&topic_name, &schema, idle)
                .await?;
        }
        let sub_type = match c.sub_type() {
            SubscribeType::Exclusive => SubType::Exclusive,
            SubscribeType::Shared => SubType::Shared,
            SubscribeType::Failover => SubType::Failover,
            SubscribeType::KeyShared => SubType::KeyShared,
        };
        if c.subscription.is_empty() {
            return Err(BrokerError::NotAllowed("empty subscription name".into()));
        }
        if c.read_compacted.unwrap_or(false)
            && (!topic_name.is_persistent()
                || matches!(sub_type, SubType::Shared | SubType::KeyShared))
        {
            return Err(BrokerError::NotAllowed(
                "read compacted can only be used with exclusive or failover persistent subscriptions"
                    .into(),
            ));
        }
        let durable = c.durable.unwrap_or(true);
        let initial = match c.initial_position() {
            proto::command_subscribe::InitialPosition::Earliest => InitialPosition::Earliest,
            proto::command_subscribe::InitialPosition::Latest => InitialPosition::Latest,
        };
        let start = c.start_message_id.as_ref().map(StartPosition::from_id);
        let name = c
            .consumer_name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("consumer-{}-{}", self.id, c.consumer_id));
        // The subscribe rate: per client host and consumer name.
        let key = strobe_tenancy::subscribe::ConsumerKey {
            host: self.peer.ip().to_string(),
            consumer_name: name.clone(),
        };
        if !topic.limits.try_subscribe(&key) {
            return Err(BrokerError::NotAllowed(
                "Subscribe limited by subscribe rate limit per consumer.".into(),
            ));
        }
        let closed_by_broker = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spec = ConsumerSpec {
            conn_id: self.id,
            consumer_id: c.consumer_id,
            name,
            priority_level: c.priority_level.unwrap_or(0),
            sub_type,
            tx: self.tx.clone(),
            keep_entry_metadata: false,
            protocol_version,
            end_of_topic_ok: self.end_of_topic_ok,
            read_compacted: c.read_compacted.unwrap_or(false),
            epoch: c.consumer_epoch,
            closed_by_broker: closed_by_broker.clone(),
            key_shared: c.key_shared_meta.as_ref().map(|m| KeySharedSpec {
                sticky: m.key_shared_mode() == proto::KeySharedMode::Sticky,
                ranges: m
                    .hash_ranges
                    .iter()
                    .map(|r| HashRange::new(r.start.max(0) as u32, r.end.max(0) as u32))
                    .collect(),
                allow_out_of_order: m.allow_out_of_order_delivery.unwrap_or(false),
                entry_buckets: m.entry_bucket_dispatch.unwrap_or(false),
            }),
            v5_managed: v5_managed(&c.metadata),
        };
        let sub = topic
            .subscribe(&c.subscription, durable, initial, start, spec)
            .await?;
        info!(topic = %topic_name, subscription = %c.subscription, consumer_id = c.consumer_id, sub_type = sub_type.as_str(), durable, "consumer subscribed");
        self.consumers.insert(
            c.consumer_id,
            ConsumerRef {
                topic,
                sub,
                closed_by_broker,
            },
        );
        Ok(commands::success(request_id))
    }

    pub(super) async fn flow(&self, c: proto::CommandFlow) -> Outcome {
        if let Some(k) = self.consumers.get(&c.consumer_id) {
            k.sub.flow(self.id, c.consumer_id, c.message_permits).await;
        }
        Outcome::Nothing
    }

    /// ACK: answered (ACK_RESPONSE) only when the client asked with a request id.
    pub(super) async fn ack(&self, c: proto::CommandAck) -> Outcome {
        let cid = c.consumer_id;
        let Some(rid) = c.request_id else {
            if let Some(k) = self.consumers.get(&cid) {
                k.sub.ack_no_reply(self.id, cid, c).await;
            }
            return Outcome::Nothing;
        };
        let result = match self.consumers.get(&cid) {
            Some(k) => k.sub.ack(self.id, cid, c).await,
            None => Err(BrokerError::ConsumerNotFound(format!(
                "consumer {cid} not found"
            ))),
        };
        super::answer(
            super::ReplyTo::Ack {
                consumer_id: cid,
                request_id: rid,
            },
            result.map(|()| commands::ack_response(cid, rid, None)),
        )
    }

    pub(super) async fn redeliver(
        &self,
        c: proto::CommandRedeliverUnacknowledgedMessages,
    ) -> Outcome {
        if let Some(k) = self.consumers.get(&c.consumer_id) {
            k.sub
                .redeliver(self.id, c.consumer_id, c.message_ids, c.consumer_epoch)
                .await;
        }
        Outcome::Nothing
    }

    /// SEEK: the subscription answers once the cursor moved (and closes the
    /// consumer, which subscribes again, as Pulsar does).
    pub(super) async fn seek(
        &self,
        c: &proto::CommandSeek,
    ) -> Result<Option<Command>, BrokerError> {
        let target = match (&c.message_id, c.message_publish_time) {
            (Some(id), _) => Some(SeekTarget::Message(StartPosition::from_id(id))),
            (None, Some(t)) => Some(SeekTarget::PublishTime(t)),
            (None, None) => None,
        };
        let sent = match (self.consumers.get(&c.consumer_id), target) {
            (Some(k), Some(t)) => k.sub.seek(self.id, c.consumer_id, c.request_id, t).await,
            _ => false,
        };
        if sent {
            Ok(None)
        } else {
            Err(BrokerError::NotAllowed(
                "seek needs a known consumer and a message id or publish time".into(),
            ))
        }
    }

    pub(super) async fn unsubscribe(
        &mut self,
        c: &proto::CommandUnsubscribe,
    ) -> Result<Command, BrokerError> {
        self.consumer(c.consumer_id)?
            .sub
            .unsubscribe(self.id, c.consumer_id)
            .await?;
        self.consumers.remove(&c.consumer_id);
        Ok(commands::success(c.request_id))
    }

    pub(super) async fn close_consumer(&mut self, c: &proto::CommandCloseConsumer) -> Command {
        if let Some(k) = self.consumers.remove(&c.consumer_id) {
            k.sub.remove_consumer(self.id, c.consumer_id).await;
        }
        commands::success(c.request_id)
    }

    pub(super) async fn last_message_id(
        &self,
        c: &proto::CommandGetLastMessageId,
    ) -> Result<Command, BrokerError> {
        let k = self.consumer(c.consumer_id)?;
        let last = match k.topic.last_dispatchable().await? {
            Some(p) => commands::message_id(p.ledger_id, p.entry_id),
            // An empty topic: entry -1 of the current ledger, as Pulsar answers.
            None => commands::message_id(k.topic.ledger.stats().current_ledger_id, u64::MAX),
        };
        let md = k
            .sub
            .cursor
            .mark_delete_position()
            .map(|p| commands::message_id(p.ledger_id, p.entry_id));
        Ok(commands::get_last_message_id_response(
            c.request_id,
            last,
            md,
        ))
    }

    /// CONSUMER_STATS: this consumer's line of its subscription's stats.
    pub(super) async fn consumer_stats(
        &self,
        c: &proto::CommandConsumerStats,
    ) -> Result<Command, BrokerError> {
        let info = match self
            .consumer(c.consumer_id)?
            .sub
            .admin(AdminOp::Info)
            .await?
        {
            AdminReply::Info(info) => info,
            _ => return Err(BrokerError::ServiceNotReady("no stats".into())),
        };
        let me = info
            .consumers
            .iter()
            .find(|k| (k.conn_id, k.consumer_id) == (self.id, c.consumer_id))
            .cloned()
            .ok_or_else(consumer_missing)?;
        Ok(CommandConsumerStatsResponse {
            request_id: c.request_id,
            consumer_name: Some(me.name),
            available_permits: Some(me.permits.max(0) as u64),
            unacked_messages: Some(me.unacked_messages),
            msg_backlog: Some(info.backlog),
            r#type: info.sub_type.map(|t| t.as_str().to_owned()),
            ..Default::default()
        }
        .into())
    }
}

/// Whether a producer's or consumer's metadata marks a V5 client on a
/// legacy segment (PIP-475's `__pulsar.v5.managed=true`).
pub(super) fn v5_managed(metadata: &[proto::KeyValue]) -> bool {
    metadata
        .iter()
        .any(|kv| kv.key == "__pulsar.v5.managed" && kv.value == "true")
}
