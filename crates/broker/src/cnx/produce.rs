//! Producers on a connection: PRODUCER, CLOSE_PRODUCER and SEND. A run of
//! SENDs is stored as one append batch, and each producer's task answers its
//! sends in order, once each is durable.

use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use strobe_model::TopicName;
use strobe_wire::proto::{self, ServerError};
use strobe_wire::{Command, Frame, FrameCodec, OutFrame, commands};
use tokio::io::AsyncRead;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tracing::{Instrument, info};

use super::producer::{PENDING_SENDS, PendingSend, ProducerRef, Stored, producer_task};
use super::{Next, NextFrame, Outcome, ServerCnx};
use crate::BrokerError;
use crate::security::Operation;
use crate::topic::{AddProducer, Published};

/// What a SEND's section is stored as, and the CRC-32C of that: the section
/// itself when it carries a checksum (every MESSAGE frame then reuses the
/// bytes), else the section behind a `[0x0e01][crc]` prefix. The CRC comes
/// from the section's checksum (verified by `parse`, or computed for the
/// prefix), so the storage need not read the bytes once more.
fn checksummed(section: Bytes, parsed: &strobe_wire::payload::Payload) -> (Bytes, u32) {
    use strobe_ledger::crc::combine;
    use strobe_wire::payload::{crc32c, prefix_for_checksum};
    if let (None, Some(sum)) = (&parsed.broker_entry_metadata, parsed.checksum) {
        // `[0x0e01][sum]` opens the section (`parse` found it there).
        let crc = combine(crc32c(&section[..6]), sum, section.len() as u64 - 6);
        return (section, crc);
    }
    let prefix = prefix_for_checksum(crc32c(&section));
    let sum = u32::from_be_bytes([prefix[2], prefix[3], prefix[4], prefix[5]]);
    let crc = combine(crc32c(&prefix), sum, section.len() as u64);
    let mut b = bytes::BytesMut::with_capacity(section.len() + 6);
    b.extend_from_slice(&prefix);
    b.extend_from_slice(&section);
    (b.freeze(), crc)
}

impl ServerCnx {
    /// PRODUCER: registers the producer on its topic and answers with
    /// PRODUCER_SUCCESS (twice for WaitForExclusive: not ready, then ready).
    pub(super) async fn create_producer(
        &mut self,
        c: proto::CommandProducer,
    ) -> Result<(), BrokerError> {
        let topic_name = TopicName::parse(&c.topic)?;
        self.service
            .authorize(self.role(), Operation::Produce(&topic_name))
            .await?;
        if let Some(existing) = self.producers.get(&c.producer_id) {
            if existing.topic.has_producer((self.id, c.producer_id)) {
                // The client asks again for a producer it has (its first
                // request timed out, the answer came late): as Pulsar's
                // broker, answer with the one there is. A refusal would
                // fail every retry for as long as the connection lives.
                if existing.topic.name != topic_name {
                    return Err(BrokerError::ProducerBusy(format!(
                        "producer id {} is already in use on this connection for {}",
                        c.producer_id, existing.topic.name
                    )));
                }
                info!(topic = %topic_name, producer = %existing.name, "producer with the same id is already created");
                let last = existing.topic.last_sequence_id(&existing.name);
                let name = existing.name.clone();
                self.send(commands::producer_success(
                    c.request_id,
                    &name,
                    last,
                    None,
                    None,
                    true,
                ))
                .await;
                return Ok(());
            }
            // Closed by the broker (fenced, topic closed): the client re-creates it.
            self.producers.remove(&c.producer_id);
        }
        if !c.encrypted()
            && self
                .service
                .namespace_policies(topic_name.namespace())
                .and_then(|p| p.encryption_required)
                .unwrap_or(false)
        {
            return Err(BrokerError::NotAllowed(format!(
                "Encryption is required in {topic_name}: this producer does not encrypt"
            )));
        }
        if topic_name.is_persistent() {
            self.service.refuse_if_read_only()?;
        }
        let topic = self.service.topic(&topic_name, true).await?;
        let schema = c
            .schema
            .as_ref()
            .map(crate::schemas::from_wire)
            .transpose()?;
        let schema_version = self
            .service
            .schemas
            .producer_schema(&topic_name, schema.as_ref())
            .await?
            .map(|v| Bytes::copy_from_slice(&v.to_bytes()));
        let user_named = c.producer_name.as_deref().is_some_and(|n| !n.is_empty());
        let name = match c.producer_name.clone().filter(|n| !n.is_empty()) {
            Some(n) => n,
            None => self.service.generate_producer_name(),
        };
        let grant = topic.add_producer(AddProducer {
            key: (self.id, c.producer_id),
            name: name.clone(),
            user_named,
            mode: c.producer_access_mode(),
            topic_epoch: c.topic_epoch,
            tx: &self.tx,
            v5_managed: super::consume::v5_managed(&c.metadata),
        })?;
        let (ptx, prx) = mpsc::channel(PENDING_SENDS);
        let task = tokio::spawn(
            producer_task(topic.clone(), name.clone(), c.producer_id, prx, self.tx.clone())
                .instrument(tracing::info_span!("producer", topic = %topic_name, producer_id = c.producer_id, producer = %name)),
        );
        self.producers.insert(
            c.producer_id,
            ProducerRef {
                topic: topic.clone(),
                name: name.clone(),
                pending: ptx,
                task,
            },
        );
        self.recently_closed.remove(&c.producer_id);
        match grant.wait {
            None => {
                info!(topic = %topic_name, producer = %name, "producer created");
                self.send(commands::producer_success(
                    c.request_id,
                    &name,
                    grant.last_sequence_id,
                    schema_version,
                    grant.topic_epoch,
                    true,
                ))
                .await;
            }
            Some(wait) => {
                // WaitForExclusive: not ready yet; a second PRODUCER_SUCCESS follows.
                self.send(commands::producer_success(
                    c.request_id,
                    &name,
                    grant.last_sequence_id,
                    schema_version.clone(),
                    None,
                    false,
                ))
                .await;
                let tx = self.tx.clone();
                let (rid, last) = (c.request_id, grant.last_sequence_id);
                tokio::spawn(async move {
                    let reply = match wait.await {
                        Ok(Ok(epoch)) => commands::producer_success(
                            rid,
                            &name,
                            last,
                            schema_version,
                            Some(epoch),
                            true,
                        ),
                        Ok(Err(e)) => commands::error(rid, e.server_error(), e.to_string()),
                        // The waiter was dropped without an answer: only `remove_producer`
                        // does that, when the client closed this producer (or its
                        // connection). Telling it CLOSE_PRODUCER now would be about a
                        // handle it no longer has (the topic's own ends answer with an
                        // error instead).
                        Err(_) => return,
                    };
                    let _ = tx.send(OutFrame::command(reply)).await;
                });
            }
        }
        Ok(())
    }

    /// CLOSE_PRODUCER. As Pulsar does, the SUCCESS comes once every SEND
    /// before the close is answered: a client fails what is still pending
    /// when its close succeeds.
    pub(super) fn close_producer(&mut self, c: proto::CommandCloseProducer) -> Outcome {
        let Some(p) = self.producers.remove(&c.producer_id) else {
            return Outcome::Reply(commands::success(c.request_id));
        };
        // Remembered for one keep-alive interval, as Pulsar does, and bounded.
        let keep = self.service.config.keepalive_interval();
        self.recently_closed.retain(|_, at| at.elapsed() < keep);
        if self.recently_closed.len() < 10_000 {
            self.recently_closed.insert(c.producer_id, Instant::now());
        }
        p.topic.remove_producer((self.id, c.producer_id));
        let ProducerRef { pending, task, .. } = p;
        drop(pending);
        let (tx, request_id) = (self.tx.clone(), c.request_id);
        tokio::spawn(async move {
            let _ = task.await;
            let _ = tx
                .send(OutFrame::command(commands::success(request_id)))
                .await;
        });
        Outcome::Nothing
    }

    /// A SEND and the SEND frames that arrived with it (complete in the read
    /// buffer, or readable without waiting; at most [`MAX_SEND_RUN`] frames
    /// and about [`MAX_SEND_RUN_BYTES`] of payload) are
    /// stored as one [`strobe_ledger::append_batch`]: the group commit is
    /// woken once, after the last of them is queued, and syncs them together
    /// instead of syncing the first alone while the rest wait for a second
    /// sync. Returns the first frame after the run that is not a SEND (or
    /// the end of the stream, or its error), to be handled next.
    pub(super) async fn handle_sends<R: AsyncRead + Unpin>(
        &mut self,
        c: proto::CommandSend,
        payload: Option<Bytes>,
        frames: &mut FramedRead<R, FrameCodec>,
    ) -> (Next, Option<NextFrame>) {
        let mut bytes = payload.as_ref().map_or(0, Bytes::len);
        let mut run = vec![(c, payload)];
        let mut after = None;
        while run.len() < MAX_SEND_RUN && bytes < MAX_SEND_RUN_BYTES {
            match frames.next().now_or_never() {
                None => break,
                Some(Some(Ok(Frame {
                    command: Command::Send(c),
                    payload,
                }))) => {
                    bytes += payload.as_ref().map_or(0, Bytes::len);
                    run.push((c, payload));
                }
                Some(other) => {
                    after = Some(other);
                    break;
                }
            }
        }
        let stored: Vec<Stored> = strobe_ledger::append_batch(|| {
            let mut stored = Vec::with_capacity(run.len());
            for (c, payload) in &mut run {
                tracing::trace!(command = ?c, "received");
                let s = self.store_send(c, payload.take());
                let unknown = matches!(s, Stored::UnknownProducer);
                stored.push(s);
                if unknown {
                    // The connection closes: what follows is not stored.
                    break;
                }
            }
            stored
        });
        let mut stored = run.iter().map(|(c, _)| c).zip(stored);
        while let Some((c, s)) = stored.next() {
            if let Next::Close(reason) = self.finish_send(c, s).await {
                // Stored but never to be answered.
                for (c, s) in stored {
                    if let Stored::Queued(p) = s {
                        self.abandon(c, p);
                    }
                }
                return (Next::Close(reason), None);
            }
        }
        (Next::Continue, after)
    }

    /// A stored SEND that will not be answered (its producer's task is
    /// gone): the topic forgets it (its in-flight count, which a terminate
    /// waits on, and the sequence id deduplication took as pushed), as for
    /// a failed append. The client resends it after reconnecting.
    fn abandon(&self, c: &proto::CommandSend, p: PendingSend) {
        if let Ok(Published::Stored(..)) = p.outcome
            && let Some(producer) = self.producers.get(&c.producer_id)
        {
            producer
                .topic
                .published(&producer.name, p.highest_sequence_id as i64, false);
        }
    }

    /// The synchronous part of a SEND: checks it and hands the entry to the
    /// topic's ledger (see [`Self::finish_send`] for the rest).
    pub(super) fn store_send(&self, c: &proto::CommandSend, payload: Option<Bytes>) -> Stored {
        let Some(p) = self.producers.get(&c.producer_id) else {
            return if self.recently_closed.contains_key(&c.producer_id) {
                // In flight when the producer closed; Pulsar drops these too.
                Stored::Dropped
            } else {
                Stored::UnknownProducer
            };
        };
        let highest = c
            .highest_sequence_id
            .filter(|h| *h > c.sequence_id)
            .unwrap_or(c.sequence_id);
        let outcome = match payload {
            None => Err(BrokerError::NotAllowed("SEND without a payload".into())),
            Some(section) => match strobe_wire::payload::parse(&section) {
                Err(e) => Err(BrokerError::from(e)),
                Ok(parsed) => {
                    let (stored, crc) = checksummed(section, &parsed);
                    let len = stored.len() as u64;
                    let txn = match (c.txnid_most_bits, c.txnid_least_bits) {
                        (Some(m), Some(l)) => Some(strobe_model::TxnId {
                            most_sig_bits: m,
                            least_sig_bits: l,
                        }),
                        _ => None,
                    };
                    let r = p.topic.publish(
                        (self.id, c.producer_id),
                        &p.name,
                        highest as i64,
                        stored,
                        crc,
                        txn,
                    );
                    if r.is_ok() {
                        let msgs = u64::from(c.num_messages.unwrap_or(1).max(1) as u32);
                        p.topic.counters.add_in(msgs, len);
                        if p.topic.limits.publish_limited()
                            && let Some(until) = p.topic.limits.charge_publish(msgs, len)
                        {
                            self.pause_reads(until);
                        }
                    }
                    r
                }
            },
        };
        Stored::Queued(PendingSend {
            sequence_id: c.sequence_id,
            highest_sequence_id: highest,
            outcome,
            queued_at: std::time::Instant::now(),
        })
    }

    /// Answers an unknown producer's SEND, or queues a stored one's outcome
    /// for its producer's task (which answers once it is durable).
    pub(super) async fn finish_send(&mut self, c: &proto::CommandSend, stored: Stored) -> Next {
        match stored {
            Stored::Dropped => Next::Continue,
            Stored::UnknownProducer => {
                self.send(commands::send_error(
                    c.producer_id,
                    c.sequence_id,
                    ServerError::NotAllowedError,
                    format!(
                        "producer {} is not registered on this connection",
                        c.producer_id
                    ),
                ))
                .await;
                Next::Close("SEND for an unknown producer")
            }
            Stored::Queued(pending) => {
                // Still registered: nothing but SENDs ran since the store.
                let Some(p) = self.producers.get(&c.producer_id) else {
                    return Next::Continue;
                };
                if let Err(mpsc::error::SendError(pending)) =
                    p.pending.send(Box::new(pending)).await
                {
                    self.abandon(c, *pending);
                    return Next::Close("producer task ended");
                }
                Next::Continue
            }
        }
    }
}

/// SEND frames at most stored as one append batch (see
/// [`ServerCnx::handle_sends`]).
const MAX_SEND_RUN: usize = 64;

/// A run of SENDs takes no further frame once its payloads reach this many
/// bytes: the run is stored before any of it is answered or waits for its
/// producer's pending limit, so it bounds what a connection holds decoded
/// beyond that limit, and the work done before the group commit is woken.
const MAX_SEND_RUN_BYTES: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::checksummed;
    use strobe_wire::payload;
    use strobe_wire::proto::MessageMetadata;

    #[test]
    fn a_stored_section_has_a_checksum_and_its_crc_is_the_stored_bytes() {
        let meta = MessageMetadata {
            producer_name: "p".into(),
            sequence_id: 7,
            publish_time: 1,
            ..Default::default()
        };
        for len in [0usize, 1, 5, 1024, 70_001] {
            let body: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            for with_sum in [true, false] {
                let section = payload::encode(&meta, &body, with_sum);
                let parsed = payload::parse(&section).unwrap();
                let (stored, crc) = checksummed(section.clone(), &parsed);
                assert!(payload::has_checksum(&stored));
                assert_eq!(
                    crc,
                    payload::crc32c(&stored),
                    "len {len}, checksum {with_sum}"
                );
                let again = payload::parse(&stored).unwrap();
                assert_eq!(again.payload, body.as_slice());
                if with_sum {
                    assert_eq!(stored, section, "a checksummed section is stored as sent");
                }
            }
        }
    }
}
