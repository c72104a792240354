//! One client connection: Pulsar's `ServerCnx`. It runs the CONNECT handshake,
//! keeps the connection alive with PING/PONG, and answers every command with
//! a reply or a clear error. A client that breaks the protocol is
//! disconnected; nothing it sends can take the broker down.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use strobe_security::tls::rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use std::collections::HashMap;

use bytes::Bytes;
use strobe_ledger::InitialPosition;
use strobe_model::{SubType, TopicName};
use strobe_wire::proto::command_get_topics_of_namespace::Mode as GetTopicsMode;
use strobe_wire::proto::command_subscribe::SubType as SubscribeType;
use strobe_wire::proto::{self, CommandConsumerStatsResponse, FeatureFlags, ServerError};
use strobe_wire::{Command, Frame, FrameCodec, OutFrame, WireError, commands};

use crate::BrokerError;
use crate::security::Operation;
use crate::service::BrokerService;
use crate::subscription::{
    AdminOp, AdminReply, ConsumerSpec, KeySharedSpec, SeekTarget, StartPosition, SubscriptionHandle,
};
use crate::topic::{AddProducer, Published, Topic};
use strobe_dispatch::key_shared::HashRange;

/// Frames queued for the socket before the reader waits for the writer.
const WRITE_QUEUE: usize = 1024;

/// What the reader does after a frame.
enum Next {
    Continue,
    Close(&'static str),
}

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
        let writer = tokio::spawn(write_loop(write, rx));
        let mut cnx = ServerCnx {
            id: service.next_conn_id(),
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

/// Bytes gathered from queued frames before one write.
const WRITE_COALESCE: usize = 256 * 1024;
/// Payloads at least this large are written from their own buffer, not copied.
const WRITE_DIRECT: usize = 64 * 1024;

/// Writes the queued frames. Whatever is queued when the socket is free goes
/// out in one write (receipts and messages of a busy connection share a
/// syscall); large payloads are written where they are, without a copy.
async fn write_loop<W: AsyncWrite + Unpin>(mut write: W, mut rx: mpsc::Receiver<OutFrame>) {
    let mut buf = bytes::BytesMut::with_capacity(WRITE_COALESCE);
    while let Some(first) = rx.recv().await {
        // Let the tasks woken together with this one queue their frames
        // first: a storage completion wakes the producer (receipt) and the
        // subscription (the message) at once, and the scheduler runs this
        // task in between, so they would go out in two writes (and wake the
        // client twice) instead of one.
        tokio::task::yield_now().await;
        let mut next = Some(first);
        while let Some(frame) = next.take() {
            if frame.body.len() >= WRITE_DIRECT {
                if !buf.is_empty() && write.write_all(&buf).await.is_err() {
                    return;
                }
                buf.clear();
                let mut chain = frame.into_buf();
                if let Err(e) = write.write_all_buf(&mut chain).await {
                    debug!(error = %e, "write failed");
                    return;
                }
            } else {
                buf.extend_from_slice(&frame.head);
                buf.extend_from_slice(&frame.body);
            }
            if buf.len() < WRITE_COALESCE {
                next = rx.try_recv().ok();
            }
        }
        if !buf.is_empty() {
            if let Err(e) = write.write_all(&buf).await {
                debug!(error = %e, "write failed");
                return;
            }
            buf.clear();
            if buf.capacity() > 4 * WRITE_COALESCE {
                buf = bytes::BytesMut::with_capacity(WRITE_COALESCE);
            }
        }
        // A no-op on TCP; pushes buffered records out on TLS.
        if write.flush().await.is_err() {
            return;
        }
    }
    let _ = write.shutdown().await;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitingConnect,
    Connected { protocol_version: i32 },
}

struct ServerCnx {
    id: u64,
    service: Arc<BrokerService>,
    tx: mpsc::Sender<OutFrame>,
    state: State,
    producers: HashMap<u64, ProducerRef>,
    consumers: HashMap<u64, ConsumerRef>,
    /// Producers the client closed: SENDs still in flight for them are dropped quietly.
    recently_closed: HashMap<u64, Instant>,
    /// Whether the client understands REACHED_END_OF_TOPIC (see [`understands_end_of_topic`]).
    end_of_topic_ok: bool,
    /// The client's verified TLS certificates (empty on a plain connection).
    peer_certs: Vec<CertificateDer<'static>>,
    /// Who the client is, once CONNECT authenticated it.
    auth: Option<Authenticated>,
    /// When an AUTH_CHALLENGE for expired credentials went out, unanswered.
    challenge_sent: Option<Instant>,
}

/// The authenticated identity of a connection.
#[derive(Debug, Clone)]
struct Authenticated {
    role: Option<String>,
    method: String,
    expires_at: Option<std::time::SystemTime>,
}

/// Pulsar sends REACHED_END_OF_TOPIC to clients of protocol v9 and later. The
/// C++ client (and the Python, Node.js and other clients built on it, which all
/// announce `Pulsar-CPP-v…`) has no handler for it up to 4.2 and answers it by
/// dropping the connection, so a terminated topic would make it reconnect over
/// and over; those clients learn the end from has_message_available instead.
fn understands_end_of_topic(client_version: &str, protocol: i32) -> bool {
    protocol >= 9 && !client_version.starts_with("Pulsar-CPP-v")
}

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
            tokio::select! {
                _ = shutdown.cancelled() => return "broker shutting down",
                _ = refresh.tick() => {
                    if let Some(reason) = self.check_credentials().await {
                        return reason;
                    }
                }
                _ = tokio::time::sleep_until(handshake_deadline), if self.state == State::AwaitingConnect => {
                    return "no CONNECT within the handshake timeout";
                }
                _ = ticker.tick() => {
                    if heard_since_tick {
                        heard_since_tick = false;
                        ping_outstanding = false;
                    } else if ping_outstanding {
                        return "keep-alive timeout: no traffic after PING";
                    } else if matches!(self.state, State::Connected { .. }) {
                        ping_outstanding = true;
                        self.send(commands::ping()).await;
                    }
                }
                frame = frames.next() => {
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
            (State::AwaitingConnect, Command::Connect(connect)) => {
                let client_protocol = connect.protocol_version.unwrap_or(0);
                tracing::Span::current().record("client", connect.client_version.as_str());
                let method = connect.auth_method_name.clone().or_else(|| {
                    // The legacy enum of protocol v2 (AuthMethodNone/YcaV1/Athens).
                    connect.auth_method.map(|m| {
                        match m {
                            1 => "ycav1",
                            2 => "athens",
                            _ => "none",
                        }
                        .to_owned()
                    })
                });
                let result = self.service.security.authenticator.authenticate_connect(
                    method.as_deref(),
                    connect.auth_data.as_deref(),
                    &self.peer_certs,
                    std::time::SystemTime::now(),
                );
                match result {
                    Ok(a) => {
                        if let Some(r) = &a.role {
                            tracing::Span::current().record("role", r.as_str());
                        }
                        self.auth = Some(Authenticated {
                            role: a.role,
                            method: a.method.name().to_owned(),
                            expires_at: a.expires_at,
                        });
                    }
                    Err(e) => {
                        // The reason goes to the client; the credentials never reach the log.
                        warn!(method = ?method, error = %e, "authentication failed");
                        self.send(commands::error(
                            u64::MAX,
                            ServerError::AuthenticationError,
                            format!("authentication failed: {e}"),
                        ))
                        .await;
                        return Next::Close("authentication failed");
                    }
                }
                let flags = FeatureFlags {
                    supports_get_partitioned_metadata_without_auto_creation: Some(true),
                    ..Default::default()
                };
                let reply = commands::connected(
                    crate::SERVER_VERSION,
                    client_protocol,
                    Some(self.service.config.max_message_size),
                    flags,
                );
                let protocol_version = client_protocol.clamp(0, strobe_wire::PROTOCOL_VERSION);
                self.end_of_topic_ok =
                    understands_end_of_topic(&connect.client_version, protocol_version);
                self.state = State::Connected { protocol_version };
                info!(client_version = %connect.client_version, protocol_version, "connected");
                self.send(reply).await;
                Next::Continue
            }
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

    async fn handle_connected(
        &mut self,
        command: Command,
        payload: Option<Bytes>,
        protocol_version: i32,
    ) -> Next {
        tracing::trace!(?command, "received");
        match command {
            Command::Ping(_) => self.send(commands::pong()).await,
            Command::Pong(_) => {}
            Command::Lookup(c) => {
                let listener = c
                    .advertised_listener_name
                    .as_deref()
                    .filter(|l| !l.is_empty());
                let reply = match TopicName::parse(&c.topic) {
                    Err(e) => commands::lookup_failed(
                        c.request_id,
                        ServerError::InvalidTopicName,
                        e.to_string(),
                    ),
                    Ok(_) if listener.is_some() => commands::lookup_failed(
                        c.request_id,
                        ServerError::NotAllowedError,
                        format!(
                            "this broker has no advertised listener named {:?}",
                            listener.unwrap_or_default()
                        ),
                    ),
                    Ok(t) if !self.service.namespace_exists(t.namespace()) => {
                        commands::lookup_failed(
                            c.request_id,
                            ServerError::TopicNotFound,
                            format!("namespace {} does not exist", t.namespace()),
                        )
                    }
                    Ok(t) => match self
                        .service
                        .authorize(self.role(), Operation::Lookup(&t))
                        .await
                    {
                        Err(e) => {
                            commands::lookup_failed(c.request_id, e.server_error(), e.to_string())
                        }
                        Ok(()) => commands::lookup_connect(
                            c.request_id,
                            &self.service.service_url(),
                            self.service.service_url_tls().as_deref(),
                            false,
                        ),
                    },
                };
                self.send(reply).await;
            }
            Command::PartitionedMetadata(c) => {
                let create = c.metadata_auto_creation_enabled.unwrap_or(true);
                let reply = match TopicName::parse(&c.topic) {
                    Err(e) => commands::partitioned_metadata_failed(
                        c.request_id,
                        ServerError::InvalidTopicName,
                        e.to_string(),
                    ),
                    Ok(t) => {
                        let r = match self
                            .service
                            .authorize(self.role(), Operation::Lookup(&t))
                            .await
                        {
                            Ok(()) => self.service.partitioned_metadata(&t, create).await,
                            Err(e) => Err(e),
                        };
                        match r {
                            Ok(n) => commands::partitioned_metadata(c.request_id, n),
                            Err(e) => commands::partitioned_metadata_failed(
                                c.request_id,
                                e.server_error(),
                                e.to_string(),
                            ),
                        }
                    }
                };
                self.send(reply).await;
            }
            Command::GetTopicsOfNamespace(c) => {
                let (persistent, non_persistent) = match c.mode() {
                    GetTopicsMode::Persistent => (true, false),
                    GetTopicsMode::NonPersistent => (false, true),
                    GetTopicsMode::All => (true, true),
                };
                let listed = match self
                    .service
                    .authorize(self.role(), Operation::ListTopics(&c.namespace))
                    .await
                {
                    Ok(()) => {
                        self.service
                            .topics_of_namespace(&c.namespace, persistent, non_persistent)
                            .await
                    }
                    Err(e) => Err(e),
                };
                let reply = match listed {
                    Ok(topics) => {
                        let hash = crate::service::topics_hash(&topics);
                        let changed = c.topics_hash.as_deref() != Some(hash.as_str());
                        commands::topics_of_namespace(c.request_id, topics, false, hash, changed)
                    }
                    Err(e) => commands::error(c.request_id, e.server_error(), e.to_string()),
                };
                self.send(reply).await;
            }
            Command::Producer(c) => {
                let request_id = c.request_id;
                if let Err(e) = self.create_producer(c).await {
                    self.send(commands::error(request_id, e.server_error(), e.to_string()))
                        .await;
                }
            }
            // The read loop takes connected SENDs in runs (`handle_sends`);
            // this is for a SEND handled on its own.
            Command::Send(c) => {
                let stored = self.store_send(&c, payload);
                return self.finish_send(&c, stored).await;
            }
            Command::CloseProducer(c) => {
                if let Some(p) = self.producers.remove(&c.producer_id) {
                    // Remembered for one keep-alive interval, as Pulsar does, and bounded.
                    let keep = self.service.config.keepalive_interval();
                    self.recently_closed.retain(|_, at| at.elapsed() < keep);
                    if self.recently_closed.len() < 10_000 {
                        self.recently_closed.insert(c.producer_id, Instant::now());
                    }
                    p.topic.remove_producer((self.id, c.producer_id));
                    // As Pulsar does, the SUCCESS comes once every SEND before
                    // the close is answered: a client fails what is still
                    // pending when its close succeeds.
                    let ProducerRef { pending, task, .. } = p;
                    drop(pending);
                    let (tx, request_id) = (self.tx.clone(), c.request_id);
                    tokio::spawn(async move {
                        let _ = task.await;
                        let _ = tx
                            .send(OutFrame::command(commands::success(request_id)))
                            .await;
                    });
                    return Next::Continue;
                }
                self.send(commands::success(c.request_id)).await;
            }
            Command::Subscribe(c) => {
                let request_id = c.request_id;
                match self.subscribe(c, protocol_version).await {
                    Ok(()) => self.send(commands::success(request_id)).await,
                    Err(e) => {
                        self.send(commands::error(request_id, e.server_error(), e.to_string()))
                            .await
                    }
                }
            }
            Command::Flow(c) => {
                if let Some(k) = self.consumers.get(&c.consumer_id) {
                    k.sub.flow(self.id, c.consumer_id, c.message_permits).await;
                }
            }
            Command::Ack(c) => {
                let (cid, rid) = (c.consumer_id, c.request_id);
                if rid.is_none() {
                    if let Some(k) = self.consumers.get(&cid) {
                        k.sub.ack_no_reply(self.id, cid, c).await;
                    }
                    return Next::Continue;
                }
                let result = match self.consumers.get(&cid) {
                    Some(k) => k.sub.ack(self.id, cid, c).await,
                    None => Err(BrokerError::ConsumerNotFound(format!(
                        "consumer {cid} not found"
                    ))),
                };
                if let Some(rid) = rid {
                    let err = result.err().map(|e| (e.server_error(), e.to_string()));
                    self.send(commands::ack_response(cid, rid, err)).await;
                }
            }
            Command::RedeliverUnacknowledgedMessages(c) => {
                if let Some(k) = self.consumers.get(&c.consumer_id) {
                    k.sub.redeliver(self.id, c.consumer_id, c.message_ids).await;
                }
            }
            Command::Seek(c) => {
                let target = match (&c.message_id, c.message_publish_time) {
                    (Some(id), _) => Some(SeekTarget::Message(StartPosition::from_id(id))),
                    (None, Some(t)) => Some(SeekTarget::PublishTime(t)),
                    (None, None) => None,
                };
                let sent = match (self.consumers.get(&c.consumer_id), target) {
                    (Some(k), Some(t)) => k.sub.seek(self.id, c.consumer_id, c.request_id, t).await,
                    _ => false,
                };
                if !sent {
                    self.send(commands::error(
                        c.request_id,
                        ServerError::NotAllowedError,
                        "seek needs a known consumer and a message id or publish time",
                    ))
                    .await;
                }
            }
            Command::Unsubscribe(c) => {
                let reply = match self.consumers.get(&c.consumer_id) {
                    Some(k) => match k.sub.unsubscribe(self.id, c.consumer_id).await {
                        Ok(()) => {
                            self.consumers.remove(&c.consumer_id);
                            commands::success(c.request_id)
                        }
                        Err(e) => commands::error(c.request_id, e.server_error(), e.to_string()),
                    },
                    None => commands::error(
                        c.request_id,
                        ServerError::ConsumerNotFound,
                        "consumer not found",
                    ),
                };
                self.send(reply).await;
            }
            Command::CloseConsumer(c) => {
                if let Some(k) = self.consumers.remove(&c.consumer_id) {
                    k.sub.remove_consumer(self.id, c.consumer_id).await;
                }
                self.send(commands::success(c.request_id)).await;
            }
            Command::GetLastMessageId(c) => {
                let reply = match self.consumers.get(&c.consumer_id) {
                    Some(k) => {
                        let last = match k.topic.ledger.last_confirmed() {
                            Some(p) => commands::message_id(p.ledger_id, p.entry_id),
                            // An empty topic: entry -1 of the current ledger, as Pulsar answers.
                            None => commands::message_id(
                                k.topic.ledger.stats().current_ledger_id,
                                u64::MAX,
                            ),
                        };
                        let md = k
                            .sub
                            .cursor
                            .mark_delete_position()
                            .map(|p| commands::message_id(p.ledger_id, p.entry_id));
                        commands::get_last_message_id_response(c.request_id, last, md)
                    }
                    None => commands::error(
                        c.request_id,
                        ServerError::ConsumerNotFound,
                        "consumer not found",
                    ),
                };
                self.send(reply).await;
            }
            Command::ConsumerStats(c) => {
                let info = match self.consumers.get(&c.consumer_id) {
                    Some(k) => match k.sub.admin(AdminOp::Info).await {
                        Ok(AdminReply::Info(info)) => Ok(info),
                        Ok(_) => Err(BrokerError::ServiceNotReady("no stats".into())),
                        Err(e) => Err(e),
                    },
                    None => Err(BrokerError::ConsumerNotFound("consumer not found".into())),
                };
                let mine = info.and_then(|i| {
                    let me = i
                        .consumers
                        .iter()
                        .find(|k| (k.conn_id, k.consumer_id) == (self.id, c.consumer_id))
                        .cloned()
                        .ok_or_else(|| {
                            BrokerError::ConsumerNotFound("consumer not found".into())
                        })?;
                    Ok((i, me))
                });
                let reply = match mine {
                    Ok((i, me)) => CommandConsumerStatsResponse {
                        request_id: c.request_id,
                        consumer_name: Some(me.name),
                        available_permits: Some(me.permits.max(0) as u64),
                        unacked_messages: Some(me.unacked_messages),
                        msg_backlog: Some(i.backlog),
                        r#type: i.sub_type.map(|t| t.as_str().to_owned()),
                        ..Default::default()
                    }
                    .into(),
                    Err(e) => commands::consumer_stats_error(
                        c.request_id,
                        e.server_error(),
                        e.to_string(),
                    ),
                };
                self.send(reply).await;
            }
            Command::GetSchema(c) => {
                let reply = match self.get_schema(&c).await {
                    Ok((v, s)) => commands::get_schema_response(
                        c.request_id,
                        crate::schemas::to_wire(&c.topic, &s),
                        Bytes::copy_from_slice(&v.to_bytes()),
                    ),
                    Err(e) => {
                        commands::get_schema_error(c.request_id, e.server_error(), e.to_string())
                    }
                };
                self.send(reply).await;
            }
            Command::GetOrCreateSchema(c) => {
                let reply = match self.get_or_create_schema(&c).await {
                    Ok(v) => commands::get_or_create_schema_response(
                        c.request_id,
                        Bytes::copy_from_slice(&v.to_bytes()),
                    ),
                    Err(e) => commands::get_or_create_schema_error(
                        c.request_id,
                        e.server_error(),
                        e.to_string(),
                    ),
                };
                self.send(reply).await;
            }
            Command::AuthResponse(r) => {
                if let Some(reason) = self.auth_response(r).await {
                    return Next::Close(reason);
                }
            }
            command => self.unsupported(command).await,
        }
        Next::Continue
    }

    async fn get_schema(
        &self,
        c: &proto::CommandGetSchema,
    ) -> Result<(strobe_schema::SchemaVersion, strobe_schema::SchemaData), BrokerError> {
        let topic = TopicName::parse(&c.topic)?;
        self.service
            .authorize(self.role(), Operation::Lookup(&topic))
            .await?;
        let version = c
            .schema_version
            .as_deref()
            .filter(|v| !v.is_empty())
            .map(strobe_schema::SchemaVersion::from_bytes)
            .transpose()
            .map_err(crate::schemas::schema_err)?;
        let (v, s, _) = self.service.get_schema(&topic, version).await?;
        Ok((v, s))
    }

    async fn get_or_create_schema(
        &self,
        c: &proto::CommandGetOrCreateSchema,
    ) -> Result<strobe_schema::SchemaVersion, BrokerError> {
        let topic = TopicName::parse(&c.topic)?;
        self.service
            .authorize(self.role(), Operation::Produce(&topic))
            .await?;
        let schema = crate::schemas::from_wire(&c.schema)?;
        self.service
            .producer_schema(&topic, Some(&schema))
            .await
            .map(|v| v.expect("a schema was given"))
    }

    /// The connection's role (None: authentication is off, or anonymous without a role).
    fn role(&self) -> Option<&str> {
        self.auth.as_ref().and_then(|a| a.role.as_deref())
    }

    /// Pulsar's `refreshAuthenticationCredentials`: credentials that expired
    /// get an AUTH_CHALLENGE; one left unanswered until the next check, or a
    /// client that cannot refresh, closes the connection.
    async fn check_credentials(&mut self) -> Option<&'static str> {
        let State::Connected { protocol_version } = self.state else {
            return None;
        };
        let auth = self.auth.as_ref()?;
        let expired = auth
            .expires_at
            .is_some_and(|t| t <= std::time::SystemTime::now());
        if !expired {
            return None;
        }
        if self.challenge_sent.is_some() {
            return Some("credentials expired and the AUTH_CHALLENGE went unanswered");
        }
        let method = auth.method.clone();
        info!(method = %method, "credentials expired: asking the client to refresh them");
        self.challenge_sent = Some(Instant::now());
        self.send(commands::auth_challenge(
            crate::SERVER_VERSION,
            &method,
            Bytes::from_static(b"refresh"),
            protocol_version,
        ))
        .await;
        None
    }

    /// AUTH_RESPONSE to a refresh challenge: new credentials for the same role.
    async fn auth_response(&mut self, r: proto::CommandAuthResponse) -> Option<&'static str> {
        let data = r.response.as_ref();
        let method = data
            .and_then(|d| d.auth_method_name.clone())
            .or_else(|| self.auth.as_ref().map(|a| a.method.clone()));
        let result = self.service.security.authenticator.authenticate_connect(
            method.as_deref(),
            data.and_then(|d| d.auth_data.as_deref()),
            &self.peer_certs,
            std::time::SystemTime::now(),
        );
        match result {
            Ok(a) if a.role.as_deref() == self.role() => {
                if let Some(cur) = self.auth.as_mut() {
                    cur.expires_at = a.expires_at;
                }
                self.challenge_sent = None;
                debug!("credentials refreshed");
                None
            }
            Ok(a) => {
                warn!(new_role = ?a.role, "refreshed credentials name another role");
                self.send(commands::error(
                    u64::MAX,
                    ServerError::AuthenticationError,
                    "refreshed credentials must name the same role",
                ))
                .await;
                Some("refreshed credentials name another role")
            }
            Err(e) => {
                warn!(error = %e, "credential refresh failed");
                self.send(commands::error(
                    u64::MAX,
                    ServerError::AuthenticationError,
                    format!("authentication failed: {e}"),
                ))
                .await;
                Some("credential refresh failed")
            }
        }
    }

    async fn create_producer(&mut self, c: proto::CommandProducer) -> Result<(), BrokerError> {
        let topic_name = TopicName::parse(&c.topic)?;
        self.service
            .authorize(self.role(), Operation::Produce(&topic_name))
            .await?;
        if let Some(existing) = self.producers.get(&c.producer_id) {
            if existing.topic.has_producer((self.id, c.producer_id)) {
                return Err(BrokerError::ProducerBusy(format!(
                    "producer id {} is already in use on this connection",
                    c.producer_id
                )));
            }
            // Closed by the broker (fenced, topic closed): the client re-creates it.
            self.producers.remove(&c.producer_id);
        }
        let topic = self.service.topic(&topic_name, true).await?;
        let schema = c
            .schema
            .as_ref()
            .map(crate::schemas::from_wire)
            .transpose()?;
        let schema_version = self
            .service
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
                let (rid, pid, last) = (c.request_id, c.producer_id, grant.last_sequence_id);
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
                        Err(_) => commands::close_producer(pid, None, None),
                    };
                    let _ = tx.send(OutFrame::command(reply)).await;
                });
            }
        }
        Ok(())
    }

    /// A SEND and the SEND frames that arrived with it (complete in the read
    /// buffer, or readable without waiting; at most [`MAX_SEND_RUN`] frames
    /// and about [`MAX_SEND_RUN_BYTES`] of payload) are
    /// stored as one [`strobe_ledger::append_batch`]: the group commit is
    /// woken once, after the last of them is queued, and syncs them together
    /// instead of syncing the first alone while the rest wait for a second
    /// sync. Returns the first frame after the run that is not a SEND (or
    /// the end of the stream, or its error), to be handled next.
    async fn handle_sends<R: AsyncRead + Unpin>(
        &mut self,
        c: proto::CommandSend,
        payload: Option<Bytes>,
        frames: &mut FramedRead<R, FrameCodec>,
    ) -> (Next, Option<Option<Result<Frame, WireError>>>) {
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
    fn abandon(&self, c: &proto::CommandSend, p: Pending) {
        if let Ok(Published::Stored(_)) = p.outcome
            && let Some(producer) = self.producers.get(&c.producer_id)
        {
            producer
                .topic
                .published(&producer.name, p.highest_sequence_id as i64, false);
        }
    }

    /// The synchronous part of a SEND: checks it and hands the entry to the
    /// topic's ledger (see [`Self::finish_send`] for the rest).
    fn store_send(&self, c: &proto::CommandSend, payload: Option<Bytes>) -> Stored {
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
                    let r = p.topic.publish(
                        (self.id, c.producer_id),
                        &p.name,
                        highest as i64,
                        stored,
                        crc,
                    );
                    if r.is_ok() {
                        p.topic
                            .counters
                            .add_in(u64::from(c.num_messages.unwrap_or(1).max(1) as u32), len);
                    }
                    r
                }
            },
        };
        Stored::Queued(Pending {
            sequence_id: c.sequence_id,
            highest_sequence_id: highest,
            outcome,
            queued_at: std::time::Instant::now(),
        })
    }

    /// Answers an unknown producer's SEND, or queues a stored one's outcome
    /// for its producer's task (which answers once it is durable).
    async fn finish_send(&mut self, c: &proto::CommandSend, stored: Stored) -> Next {
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
                if let Err(mpsc::error::SendError(pending)) = p.pending.send(pending).await {
                    self.abandon(c, pending);
                    return Next::Close("producer task ended");
                }
                Next::Continue
            }
        }
    }

    async fn subscribe(
        &mut self,
        c: proto::CommandSubscribe,
        protocol_version: i32,
    ) -> Result<(), BrokerError> {
        if let Some(k) = self.consumers.get(&c.consumer_id) {
            if !k
                .closed_by_broker
                .load(std::sync::atomic::Ordering::Acquire)
            {
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
        Ok(())
    }

    /// Releases everything the connection held: producers leave their
    /// topics and consumers' unacked messages go back to their subscriptions.
    async fn cleanup(&mut self) {
        for (pid, p) in self.producers.drain() {
            p.topic.remove_producer((self.id, pid));
        }
        for (cid, k) in self.consumers.drain() {
            k.sub.remove_consumer(self.id, cid).await;
        }
    }

    /// A command this broker does not serve yet: the client gets an error it
    /// can act on, in the reply shape it waits for, never silence.
    async fn unsupported(&self, command: Command) {
        let kind = command.kind();
        let msg = format!("{kind:?} is not supported by this broker");
        debug!(command = ?kind, "unsupported command");
        let reply = match &command {
            Command::Lookup(c) => {
                commands::lookup_failed(c.request_id, ServerError::NotAllowedError, msg)
            }
            Command::PartitionedMetadata(c) => commands::partitioned_metadata_failed(
                c.request_id,
                ServerError::NotAllowedError,
                msg,
            ),
            Command::Send(c) => commands::send_error(
                c.producer_id,
                c.sequence_id,
                ServerError::NotAllowedError,
                msg,
            ),
            Command::GetSchema(c) => {
                commands::get_schema_error(c.request_id, ServerError::NotAllowedError, msg)
            }
            Command::GetOrCreateSchema(c) => commands::get_or_create_schema_error(
                c.request_id,
                ServerError::NotAllowedError,
                msg,
            ),
            other => match other.request_id() {
                Some(id) => commands::error(id, ServerError::NotAllowedError, msg),
                None => return,
            },
        };
        self.send(reply).await;
    }
}

/// Sends not yet answered per producer before the connection's reader waits
/// (plus at most one run of SENDs stored before the first wait: see
/// [`MAX_SEND_RUN`]).
const PENDING_SENDS: usize = 1000;

struct ProducerRef {
    topic: Arc<Topic>,
    name: String,
    pending: mpsc::Sender<Pending>,
    /// The producer's task: answers what is pending, then ends once
    /// `pending` is dropped.
    task: tokio::task::JoinHandle<()>,
}

struct ConsumerRef {
    topic: Arc<Topic>,
    sub: SubscriptionHandle,
    closed_by_broker: Arc<std::sync::atomic::AtomicBool>,
}

/// SEND frames at most stored as one append batch (see
/// [`ServerCnx::handle_sends`]).
const MAX_SEND_RUN: usize = 64;

/// A run of SENDs takes no further frame once its payloads reach this many
/// bytes: the run is stored before any of it is answered or waits for its
/// producer's pending limit, so it bounds what a connection holds decoded
/// beyond that limit, and the work done before the group commit is woken.
const MAX_SEND_RUN_BYTES: usize = 1 << 20;

/// What became of a SEND's synchronous part ([`ServerCnx::store_send`]).
enum Stored {
    /// For a producer that closed a moment ago: dropped without an answer.
    Dropped,
    /// For a producer this connection never had: an error, and the
    /// connection closes.
    UnknownProducer,
    /// Handed to the topic (or refused by it): the outcome to answer with.
    Queued(Pending),
}

struct Pending {
    sequence_id: u64,
    highest_sequence_id: u64,
    outcome: Result<Published, BrokerError>,
    /// When the append was queued (for the storage write latency metric).
    queued_at: std::time::Instant,
}

/// Answers one producer's sends in the order they arrived, each once it is durable.
async fn producer_task(
    topic: Arc<Topic>,
    name: String,
    producer_id: u64,
    mut rx: mpsc::Receiver<Pending>,
    tx: mpsc::Sender<OutFrame>,
) {
    let mut connected = true;
    while let Some(p) = rx.recv().await {
        let reply = match p.outcome {
            Ok(Published::Stored(fut)) => match fut.await {
                Ok(pos) => {
                    topic.counters.write_latency.record(p.queued_at.elapsed());
                    topic.published(&name, p.highest_sequence_id as i64, true);
                    commands::send_receipt(
                        producer_id,
                        p.sequence_id,
                        p.highest_sequence_id,
                        commands::message_id(pos.ledger_id, pos.entry_id),
                    )
                }
                Err(e) => {
                    topic.published(&name, p.highest_sequence_id as i64, false);
                    let e = BrokerError::from(e);
                    warn!(error = %e, sequence_id = p.sequence_id, "publish failed");
                    commands::send_error(
                        producer_id,
                        p.sequence_id,
                        e.server_error(),
                        e.to_string(),
                    )
                }
            },
            // Pulsar answers a duplicate with message id -1:-1.
            Ok(Published::Duplicate) => commands::send_receipt(
                producer_id,
                p.sequence_id,
                p.highest_sequence_id,
                commands::message_id(u64::MAX, u64::MAX),
            ),
            Err(e) => {
                commands::send_error(producer_id, p.sequence_id, e.server_error(), e.to_string())
            }
        };
        // With the connection gone, the rest are still awaited (and their
        // outcome recorded) but not answered.
        if connected && tx.send(OutFrame::command(reply)).await.is_err() {
            connected = false;
        }
    }
}

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
