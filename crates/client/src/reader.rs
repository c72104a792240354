//! Readers (Pulsar's `ReaderImpl`): a non-durable, exclusive consumer that
//! starts at a message id and reads on, with `has_message_available`.

use std::time::Duration;

use strobe_model::MessageId;

use crate::client::Client;
use crate::consumer::{
    Consumer, ConsumerBuilder, Message, SeekTo, earliest_id, id_data, latest_id, rand_u64,
};
use crate::error::Result;

/// Builds a [`Reader`]: a non-durable, exclusive consumer that starts at a
/// message id.
#[derive(Debug, Clone)]
pub struct ReaderBuilder {
    inner: ConsumerBuilder,
}

impl ReaderBuilder {
    pub(crate) fn new(client: Client, topic: &str) -> Self {
        let sub = format!("reader-{:016x}", rand_u64());
        let mut inner = ConsumerBuilder::new(client, topic, &sub);
        inner.cfg.durable = false;
        inner.cfg.start_message_id = Some(latest_id());
        ReaderBuilder { inner }
    }

    pub fn start_earliest(mut self) -> Self {
        self.inner.cfg.start_message_id = Some(earliest_id());
        self
    }

    pub fn start_latest(mut self) -> Self {
        self.inner.cfg.start_message_id = Some(latest_id());
        self
    }

    /// Start after `id`, or at it when `inclusive`.
    pub fn start_at(mut self, id: MessageId, inclusive: bool) -> Self {
        self.inner.cfg.start_message_id = Some(id_data(&id));
        self.inner.cfg.start_inclusive = inclusive;
        self
    }

    pub fn receiver_queue_size(mut self, n: u32) -> Self {
        self.inner = self.inner.receiver_queue_size(n);
        self
    }

    pub fn subscription_name(mut self, s: &str) -> Self {
        self.inner.subscription = s.to_owned();
        self
    }

    /// The non-durable consumer this reader is (segment readers of a
    /// checkpoint consumer are driven as consumers).
    pub(crate) fn into_consumer_builder(self) -> ConsumerBuilder {
        self.inner
    }

    pub async fn create(self) -> Result<Reader> {
        Ok(Reader {
            consumer: self.inner.subscribe().await?,
            last_in_broker: None,
        })
    }
}

/// A reader: reads a topic from a message id without a durable subscription.
#[derive(Debug)]
pub struct Reader {
    consumer: Consumer,
    /// The topic's last message as the broker last told it (Pulsar's
    /// `lastMessageIdInBroker`): while it is past the last message returned,
    /// more is there without asking again. A topic only grows under a reader,
    /// so what was there stays there; a seek forgets it.
    last_in_broker: Option<MessageId>,
}

impl Reader {
    pub async fn recv(&mut self) -> Result<Message> {
        self.consumer.recv().await
    }

    pub async fn recv_timeout(&mut self, t: Duration) -> Result<Option<Message>> {
        self.consumer.recv_timeout(t).await
    }

    pub async fn seek(&mut self, to: SeekTo) -> Result<()> {
        self.last_in_broker = None;
        self.consumer.seek(to).await
    }

    /// Whether a message after the last one returned exists on the topic.
    pub async fn has_message_available(&mut self) -> Result<bool> {
        if !self.consumer.queue.is_empty() {
            return Ok(true);
        }
        if let (Some(known), Some(d)) = (self.last_in_broker, self.consumer.last_dequeued)
            && known.position > d.position
        {
            return Ok(true);
        }
        let (last, mark_delete) = self.consumer.last_and_mark_delete().await?;
        if last.position.ledger_id >= i64::MAX as u64 || last.position.entry_id == u64::MAX {
            return Ok(false);
        }
        self.last_in_broker = Some(last);
        Ok(match (self.consumer.last_dequeued, mark_delete) {
            (Some(d), _) => last.position > d.position,
            // Nothing read yet (or a seek since): more is there if the
            // topic ends past where the cursor starts, so that a seek by
            // publish time past the last message finds nothing.
            (None, Some(md)) => last.position > md.position,
            (None, None) => true,
        })
    }

    pub async fn close(self) -> Result<()> {
        self.consumer.close().await
    }
}

impl Client {
    pub fn reader(&self, topic: &str) -> ReaderBuilder {
        ReaderBuilder::new(self.clone(), topic)
    }
}
