//! SCALABLE_TOPIC_SUBSCRIBE and SCALABLE_TOPIC_UNSUBSCRIBE (82): stream and
//! checkpoint consumers registering with their subscription's coordinator
//! on the broker leading the topic's controller (`service::coordinator`).
//! The answer carries the consumer's assignment; later changes come as
//! SCALABLE_TOPIC_ASSIGNMENT_UPDATE. A connection that ends disconnects
//! its consumers (they keep their place for the grace period).

use strobe_layout::ReaderKind;
use strobe_wire::proto::{self, ScalableConsumerType, ServerError};
use strobe_wire::{Command, commands};
use tracing::debug;

use super::scalable::scalable_name;
use super::{Outcome, ServerCnx};
use crate::BrokerError;
use crate::security::Operation;
use crate::service::coordinator::Session;

/// Most stream and checkpoint consumers one connection may hold.
const MAX_CONSUMERS: usize = 1024;

fn response(
    request_id: u64,
    outcome: Result<proto::ScalableConsumerAssignment, BrokerError>,
) -> Command {
    let (error, message, assignment) = match outcome {
        Ok(a) => (None, None, Some(a)),
        Err(e) => (Some(e.server_error() as i32), Some(e.to_string()), None),
    };
    Command::ScalableTopicSubscribeResponse(proto::CommandScalableTopicSubscribeResponse {
        request_id,
        error,
        message,
        assignment,
    })
}

impl ServerCnx {
    pub(super) async fn scalable_topic_subscribe(
        &mut self,
        c: proto::CommandScalableTopicSubscribe,
    ) -> Outcome {
        let request_id = c.request_id;
        Outcome::Reply(response(request_id, self.register_scalable(c).await))
    }

    async fn register_scalable(
        &mut self,
        c: proto::CommandScalableTopicSubscribe,
    ) -> Result<proto::ScalableConsumerAssignment, BrokerError> {
        if !self.service.config.scalable_topics_enabled {
            return Err(BrokerError::NotAllowed(
                "scalable topics are disabled on this broker (scalable_topics_enabled)".into(),
            ));
        }
        let topic = scalable_name(&c.topic)?;
        if c.subscription.is_empty() || c.consumer_name.is_empty() {
            return Err(BrokerError::NotAllowed(
                "a scalable subscription needs a subscription and a consumer name".into(),
            ));
        }
        if self.scalable_consumers.len() >= MAX_CONSUMERS
            && !self.scalable_consumers.contains_key(&c.consumer_id)
        {
            return Err(BrokerError::NotAllowed(format!(
                "at most {MAX_CONSUMERS} scalable-topic consumers per connection"
            )));
        }
        self.service
            .authorize(self.role(), Operation::Consume(&topic, &c.subscription))
            .await?;
        let kind = match c.consumer_type() {
            ScalableConsumerType::Stream => ReaderKind::Stream,
            ScalableConsumerType::Checkpoint => ReaderKind::Checkpoint,
        };
        let coordinator = self
            .service
            .scalable_coordinator(&topic, &c.subscription, kind)
            .await?;
        let session = Session {
            conn_id: self.id,
            consumer_id: c.consumer_id,
            tx: self.tx.clone(),
        };
        let assignment = coordinator.register(&c.consumer_name, session).await?;
        if let Some((old, name)) = self
            .scalable_consumers
            .insert(c.consumer_id, (coordinator, c.consumer_name.clone()))
            && name != c.consumer_name
        {
            old.disconnect(&name, self.id, c.consumer_id);
        }
        Ok(assignment)
    }

    pub(super) async fn scalable_topic_unsubscribe(
        &mut self,
        c: proto::CommandScalableTopicUnsubscribe,
    ) -> Outcome {
        let Some((coordinator, name)) = self.scalable_consumers.remove(&c.consumer_id) else {
            return Outcome::Reply(commands::error(
                c.request_id,
                ServerError::ConsumerNotFound,
                format!(
                    "no scalable-topic consumer {} on this connection",
                    c.consumer_id
                ),
            ));
        };
        match coordinator.unsubscribe(&name, self.id, c.consumer_id).await {
            Ok(()) => Outcome::Reply(commands::success(c.request_id)),
            Err(e) => Outcome::Reply(commands::error(
                c.request_id,
                e.server_error(),
                e.to_string(),
            )),
        }
    }

    /// The connection ends: its scalable consumers keep their place for the
    /// grace period.
    pub(super) fn disconnect_scalable_consumers(&mut self) {
        for (cid, (coordinator, name)) in self.scalable_consumers.drain() {
            debug!(consumer_id = cid, consumer = %name, "scalable consumer disconnected");
            coordinator.disconnect(&name, self.id, cid);
        }
    }
}
