//! One client connection: Pulsar's `ServerCnx`. It runs the CONNECT handshake,
//! keeps the connection alive with PING/PONG, and answers every command with
//! a reply or a clear error. A client that breaks the protocol is
//! disconnected; nothing it sends can take the broker down.
//!
//! This module reads frames and hands each command to its family's handler
//! ([`handshake`], [`lookup`], [`produce`], [`consume`], [`schema`],
//! [`txn`], [`scalable`]); a
//! handler returns its reply or a [`BrokerError`], and [`answer`] builds the
//! error reply in the shape the command's client waits for, here and nowhere
//! else.

mod consume;
mod handshake;
mod lookup;
mod produce;
mod producer;
mod scalable;
mod scalable_subscribe;
mod scalable_watch;
mod schema;
mod session;
mod txn;
mod writer;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use strobe_security::tls::rustls::pki_types::CertificateDer;
use strobe_wire::proto::ServerError;
use strobe_wire::{Command, Frame, FrameCodec, OutFrame, WireError, commands};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::BrokerError;
use crate::service::BrokerService;
use producer::ProducerRef;
use session::{Authenticated, ConsumerRef};

/// What the reader does after a frame.
enum Next {
    Continue,
    Close(&'static str),
}

/// The frame read after a run of SENDs, still to be handled: the next item
/// of the frame stream (`None`: the stream ended).
type NextFrame = Option<Result<Frame, WireError>>;

/// What a handler wants done once it returns. Lives on the stack for a
/// moment; boxing the reply would allocate for every answer.
#[allow(clippy::large_enum_variant)]
enum Outcome {
    /// Send this reply.
    Reply(Command),
    /// Nothing to send (FLOW, PONG, an ACK without a request id, or a reply
    /// that a task sends later).
    Nothing,
    /// Close the connection.
    Close(&'static str),
}

/// Which reply a request's error takes: clients wait for the error in the
/// reply shape of the command they sent.
#[derive(Debug, Clone, Copy)]
enum ReplyTo {
    Lookup(u64),
    PartitionedMetadata(u64),
    Send {
        producer_id: u64,
        sequence_id: u64,
    },
    GetSchema(u64),
    GetOrCreateSchema(u64),
    ConsumerStats(u64),
    Ack {
        consumer_id: u64,
        request_id: u64,
    },
    /// Any other request: the generic ERROR.
    Request(u64),
}

impl ReplyTo {
    /// The reply shape of `command`'s error, if the command expects a reply.
    fn of(command: &Command) -> Option<ReplyTo> {
        Some(match command {
            Command::Lookup(c) => ReplyTo::Lookup(c.request_id),
            Command::PartitionedMetadata(c) => ReplyTo::PartitionedMetadata(c.request_id),
            Command::Send(c) => ReplyTo::Send {
                producer_id: c.producer_id,
                sequence_id: c.sequence_id,
            },
            Command::GetSchema(c) => ReplyTo::GetSchema(c.request_id),
            Command::GetOrCreateSchema(c) => ReplyTo::GetOrCreateSchema(c.request_id),
            other => ReplyTo::Request(other.request_id()?),
        })
    }

    /// The error reply: Pulsar's `ServerError` code and the message the client shows.
    fn error(self, code: ServerError, message: String) -> Command {
        match self {
            ReplyTo::Lookup(rid) => commands::lookup_failed(rid, code, message),
            ReplyTo::PartitionedMetadata(rid) => {
                commands::partitioned_metadata_failed(rid, code, message)
            }
            ReplyTo::Send {
                producer_id,
                sequence_id,
            } => commands::send_error(producer_id, sequence_id, code, message),
            ReplyTo::GetSchema(rid) => commands::get_schema_error(rid, code, message),
            ReplyTo::GetOrCreateSchema(rid) => {
                commands::get_or_create_schema_error(rid, code, message)
            }
            ReplyTo::ConsumerStats(rid) => commands::consumer_stats_error(rid, code, message),
            ReplyTo::Ack {
                consumer_id,
                request_id,
            } => commands::ack_response(consumer_id, request_id, Some((code, message))),
            ReplyTo::Request(rid) => commands::error(rid, code, message),
        }
    }
}

/// A handler's result as the reply to send: its own reply, or its error in
/// the shape `to` says.
fn answer(to: ReplyTo, result: Result<Command, BrokerError>) -> Outcome {
    Outcome::Reply(match result {
        Ok(reply) => reply,
        Err(e) => to.error(e.server_error(), e.to_string()),
    })
}

/// Frames queued for the socket before the reader waits for the writer.
const WRITE_QUEUE: usize = 1024;

/// Serves one connection, plain (`peer_certs` empty) or TLS (the client's
/// verified certificates, if it presented any).
pub(crate) async fn serve<R, W>(
    read: R,
    write: W,
    peer: SocketAddr,
    peer_certs: Vec<CertificateDer<'static>>,
    service: Arc<BrokerService>,
    shutdown: CancellationToken,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let span = info_span!("cnx", remote = %peer, client = tracing::field::Empty, role = tracing::field::Empty);
    async move {
        debug!("connection opened");
        let (tx, rx) = mpsc::channel::<OutFrame>(WRITE_QUEUE);
        let writer = tokio::spawn(writer::write_loop(write, rx));
        let mut cnx = ServerCnx {
            id: service.next_conn_id(),
            peer,
            paused_until: parking_lot::Mutex::new(None),
            service: service.clone(),
            tx,
            state: State::AwaitingConnect,
            producers: HashMap::new(),
            consumers: HashMap::new(),
            recently_closed: HashMap::new(),
            end_of_topic_ok: true,
            peer_certs,
            auth: None,
            challenge_sent: None,
            tc_watches: HashMap::new(),
            scalable_sessions: HashMap::new(),
            scalable_watches: HashMap::new(),
            scalable_consumers: HashMap::new(),
        };
        let reason = cnx.run(read, &shutdown).await;
        debug!(reason, "closing connection");
        cnx.cleanup().await;
        drop(cnx); // closes the queue, so the writer drains what is left and stops
        let _ = writer.await;
        info!(reason, "connection closed");
    }
    .instrument(span)
    .await
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitingConnect,
    Connected { protocol_version: i32 },
}

struct ServerCnx {
    id: u64,
    /// The client's address (the subscribe rate is per client host).
    peer: SocketAddr,
    /// A publish rate paused this connection's reads until then (a mutex:
    /// SENDs are stored through `&self`).
    paused_until: parking_lot::Mutex<Option<std::time::Instant>>,
    service: Arc<BrokerService>,
    tx: mpsc::Sender<OutFrame>,
    state: State,
    producers: HashMap<u64, ProducerRef>,
    consumers: HashMap<u64, ConsumerRef>,
    /// Producers the client closed: SENDs still in flight for them are dropped quietly.
    recently_closed: HashMap<u64, Instant>,
    /// Whether the client understands REACHED_END_OF_TOPIC (see `handshake`).
    end_of_topic_ok: bool,
    /// The client's verified TLS certificates (empty on a plain connection).
    peer_certs: Vec<CertificateDer<'static>>,
    /// Who the client is, once CONNECT authenticated it.
    auth: Option<Authenticated>,
    /// When an AUTH_CHALLENGE for expired credentials went out, unanswered.
    challenge_sent: Option<Instant>,
    /// Open WATCH_TC_ASSIGNMENTS watches.
    tc_watches: HashMap<u64, CancellationToken>,
    /// Open SCALABLE_TOPIC_LOOKUP sessions, by session id.
    scalable_sessions: HashMap<u64, CancellationToken>,
    /// Open WATCH_SCALABLE_TOPICS watches, by watch id.
    scalable_watches: HashMap<u64, CancellationToken>,
    /// Stream and checkpoint consumers registered on this connection, by
    /// consumer id: their coordinator and name.
    scalable_consumers: HashMap<u64, (Arc<crate::service::coordinator::Coordinator>, String)>,
}

impl ServerCnx {
    async fn run<R: AsyncRead + Unpin>(
        &mut self,
        read: R,
        shutdown: &CancellationToken,
    ) -> &'static str {
        let cfg = &self.service.config;
        let mut frames = FramedRead::new(read, FrameCodec::new(cfg.max_message_size));
        let keepalive = cfg.keepalive_interval();
        let handshake_deadline = Instant::now() + Duration::from_secs(cfg.handshake_timeout_secs);
        let mut ticker = tokio::time::interval_at(Instant::now() + keepalive, keepalive);
        let mut heard_since_tick = true;
        let mut ping_outstanding = false;
        let refresh_every = Duration::from_secs(cfg.auth_refresh_check_secs);
        let mut refresh = tokio::time::interval_at(Instant::now() + refresh_every, refresh_every);
        loop {
            let paused = *self.paused_until.lock();
            tokio::select! {
                _ = shutdown.cancelled() => return "broker shutting down",
                _ = tokio::time::sleep_until(paused.unwrap_or_else(std::time::Instant::now).into()), if paused.is_some() => {
                    *self.paused_until.lock() = None;
                    // Nothing was read while paused, on purpose.
                    heard_since_tick = true;
                }
                _ = refresh.tick() => {
                    if let Some(reason) = self.check_credentials().await {
                        return reason;
                    }
                }
                _ = tokio::time::sleep_until(handshake_deadline), if self.state == State::AwaitingConnect => {
                    return "no CONNECT within the handshake timeout";
                }
                _ = ticker.tick() => {
                    if heard_since_tick || paused.is_some() {
                        heard_since_tick = false;
                        ping_outstanding = false;
                    } else if ping_outstanding {
                        return "keep-alive timeout: no traffic after PING";
                    } else if matches!(self.state, State::Connected { .. }) {
                        ping_outstanding = true;
                        self.send(commands::ping()).await;
                    }
                }
                frame = frames.next(), if paused.is_none() => {
                    heard_since_tick = true;
                    let mut item = frame;
                    loop {
                        match item {
                            None => return "peer closed the connection",
                            Some(Err(e)) => {
                                self.protocol_error(&e).await;
                                return "protocol error";
                            }
                            Some(Ok(Frame { command: Command::Send(c), payload }))
                                if matches!(self.state, State::Connected { .. }) =>
                            {
                                match self.handle_sends(c, payload, &mut frames).await {
                                    (Next::Close(reason), _) => return reason,
                                    (Next::Continue, Some(after)) => item = after,
                                    (Next::Continue, None) => break,
                                }
                            }
                            Some(Ok(frame)) => match self.handle(frame).await {
                                Next::Continue => break,
                                Next::Close(reason) => return reason,
                            },
                        }
                    }
                }
            }
        }
    }

    /// Reads nothing more until `until` (a publish rate's pause); the
    /// latest of overlapping pauses wins.
    fn pause_reads(&self, until: std::time::Instant) {
        let mut p = self.paused_until.lock();
        *p = Some(p.map_or(until, |cur| cur.max(until)));
    }

    async fn send(&self, command: Command) {
        // The writer only stops when the socket fails; then the reader ends soon too.
        let _ = self.tx.send(OutFrame::command(command)).await;
    }

    /// Tells the client why its bytes were refused, before the connection closes.
    async fn protocol_error(&self, e: &WireError) {
        warn!(error = %e, "closing connection: the byte stream cannot be trusted");
        let code = match e {
            WireError::FrameTooLarge { .. } => ServerError::NotAllowedError,
            WireError::ChecksumMismatch { .. } => ServerError::ChecksumError,
            _ => ServerError::UnknownError,
        };
        self.send(commands::error(u64::MAX, code, e.to_string()))
            .await;
    }

    async fn handle(&mut self, frame: Frame) -> Next {
        let kind = frame.command.kind();
        match (self.state, frame.command) {
            (State::AwaitingConnect, Command::Connect(connect)) => self.connect(connect).await,
            (State::AwaitingConnect, command) => {
                let request_id = command.request_id().unwrap_or(u64::MAX);
                warn!(command = ?kind, "command before the CONNECT handshake");
                self.send(commands::error(
                    request_id,
                    ServerError::NotAllowedError,
                    format!("received {kind:?} before the CONNECT handshake"),
                ))
                .await;
                Next::Close("command before CONNECT")
            }
            (State::Connected { .. }, Command::Connect(_)) => {
                self.send(commands::error(
                    u64::MAX,
                    ServerError::NotAllowedError,
                    "received CONNECT on a connection that is already connected",
                ))
                .await;
                Next::Close("second CONNECT")
            }
            (State::Connected { protocol_version }, command) => {
                self.handle_connected(command, frame.payload, protocol_version)
                    .await
            }
        }
    }

    /// One command of a connected client, handed to its family's handler.
    async fn handle_connected(
        &mut self,
        command: Command,
        payload: Option<Bytes>,
        protocol_version: i32,
    ) -> Next {
        tracing::trace!(?command, "received");
        let outcome = match command {
            Command::Ping(_) => Outcome::Reply(commands::pong()),
            Command::Pong(_) => Outcome::Nothing,
            Command::AuthResponse(r) => match self.auth_response(r).await {
                Some(reason) => Outcome::Close(reason),
                None => Outcome::Nothing,
            },
            Command::Lookup(c) => answer(ReplyTo::Lookup(c.request_id), self.lookup(&c).await),
            Command::PartitionedMetadata(c) => answer(
                ReplyTo::PartitionedMetadata(c.request_id),
                self.partitioned_metadata(&c).await,
            ),
            Command::GetTopicsOfNamespace(c) => answer(
                ReplyTo::Request(c.request_id),
                self.topics_of_namespace(&c).await,
            ),
            Command::Producer(c) => {
                let to = ReplyTo::Request(c.request_id);
                match self.create_producer(c).await {
                    Ok(()) => Outcome::Nothing,
                    Err(e) => answer(to, Err(e)),
                }
            }
            // The read loop takes connected SENDs in runs (`handle_sends`);
            // this is for a SEND handled on its own.
            Command::Send(c) => {
                let stored = self.store_send(&c, payload);
                return self.finish_send(&c, stored).await;
            }
            Command::CloseProducer(c) => self.close_producer(c),
            Command::Subscribe(c) => answer(
                ReplyTo::Request(c.request_id),
                self.subscribe(c, protocol_version).await,
            ),
            Command::Flow(c) => self.flow(c).await,
            Command::Ack(c) => self.ack(c).await,
            Command::RedeliverUnacknowledgedMessages(c) => self.redeliver(c).await,
            Command::Seek(c) => match self.seek(&c).await {
                Ok(_) => Outcome::Nothing,
                Err(e) => answer(ReplyTo::Request(c.request_id), Err(e)),
            },
            Command::Unsubscribe(c) => {
                answer(ReplyTo::Request(c.request_id), self.unsubscribe(&c).await)
            }
            Command::CloseConsumer(c) => Outcome::Reply(self.close_consumer(&c).await),
            Command::GetLastMessageId(c) => answer(
                ReplyTo::Request(c.request_id),
                self.last_message_id(&c).await,
            ),
            Command::ConsumerStats(c) => answer(
                ReplyTo::ConsumerStats(c.request_id),
                self.consumer_stats(&c).await,
            ),
            Command::GetSchema(c) => answer(
                ReplyTo::GetSchema(c.request_id),
                self.schema_reply(&c).await,
            ),
            Command::GetOrCreateSchema(c) => answer(
                ReplyTo::GetOrCreateSchema(c.request_id),
                self.get_or_create_schema_reply(&c).await,
            ),
            Command::TcClientConnectRequest(c) => self.tc_client_connect(c),
            Command::NewTxn(c) => self.new_txn(c),
            Command::AddPartitionToTxn(c) => self.add_partition_to_txn(c),
            Command::AddSubscriptionToTxn(c) => self.add_subscription_to_txn(c),
            Command::EndTxn(c) => self.end_txn(c),
            Command::WatchTcAssignments(c) => self.watch_tc_assignments(c),
            Command::WatchTcAssignmentsClose(c) => self.watch_tc_assignments_close(c),
            Command::ScalableTopicLookup(c) => self.scalable_topic_lookup(c),
            Command::ScalableTopicClose(c) => self.scalable_topic_close(c),
            Command::WatchScalableTopics(c) => self.watch_scalable_topics(c),
            Command::ScalableTopicSubscribe(c) => self.scalable_topic_subscribe(c).await,
            Command::ScalableTopicUnsubscribe(c) => self.scalable_topic_unsubscribe(c).await,
            Command::WatchScalableTopicsClose(c) => self.watch_scalable_topics_close(c),
            command => self.unsupported(command),
        };
        match outcome {
            Outcome::Reply(reply) => self.send(reply).await,
            Outcome::Nothing => {}
            Outcome::Close(reason) => return Next::Close(reason),
        }
        Next::Continue
    }

    /// Releases everything the connection held: producers leave their
    /// topics and consumers' unacked messages go back to their subscriptions.
    async fn cleanup(&mut self) {
        for (_, w) in self
            .tc_watches
            .drain()
            .chain(self.scalable_sessions.drain())
            .chain(self.scalable_watches.drain())
        {
            w.cancel();
        }
        self.disconnect_scalable_consumers();
        for (pid, p) in self.producers.drain() {
            p.topic.remove_producer((self.id, pid));
        }
        for (cid, k) in self.consumers.drain() {
            k.sub.remove_consumer(self.id, cid).await;
        }
    }

    /// A command this broker does not serve yet: the client gets an error it
    /// can act on, in the reply shape it waits for, never silence.
    fn unsupported(&self, command: Command) -> Outcome {
        let kind = command.kind();
        debug!(command = ?kind, "unsupported command");
        match ReplyTo::of(&command) {
            Some(to) => Outcome::Reply(to.error(
                ServerError::NotAllowedError,
                format!("{kind:?} is not supported by this broker"),
            )),
            None => Outcome::Nothing,
        }
    }
}
