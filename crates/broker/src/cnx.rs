//! One client connection: Pulsar's `ServerCnx`. It runs the CONNECT handshake,
//! keeps the connection alive with PING/PONG, and answers every command with
//! a reply or a clear error. A client that breaks the protocol is
//! disconnected; nothing it sends can take the broker down.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use strobe_wire::proto::{FeatureFlags, ServerError};
use strobe_wire::{Command, Frame, FrameCodec, OutFrame, WireError, commands};

use crate::server::Shared;

/// Frames queued for the socket before the reader waits for the writer.
const WRITE_QUEUE: usize = 1024;

/// What the reader does after a frame.
enum Next {
    Continue,
    Close(&'static str),
}

pub(crate) async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    let span = info_span!("cnx", remote = %peer, client = tracing::field::Empty);
    async move {
        debug!("connection opened");
        let (read, write) = stream.into_split();
        let (tx, rx) = mpsc::channel::<OutFrame>(WRITE_QUEUE);
        let writer = tokio::spawn(write_loop(write, rx));
        let mut cnx = ServerCnx {
            shared: shared.clone(),
            tx,
            state: State::AwaitingConnect,
        };
        let reason = cnx.run(read, &shutdown).await;
        debug!(reason, "closing connection");
        drop(cnx); // closes the queue, so the writer drains what is left and stops
        let _ = writer.await;
        info!(reason, "connection closed");
    }
    .instrument(span)
    .await
}

async fn write_loop(mut write: OwnedWriteHalf, mut rx: mpsc::Receiver<OutFrame>) {
    while let Some(frame) = rx.recv().await {
        let mut buf = frame.into_buf();
        if let Err(e) = write.write_all_buf(&mut buf).await {
            debug!(error = %e, "write failed");
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
    shared: Arc<Shared>,
    tx: mpsc::Sender<OutFrame>,
    state: State,
}

impl ServerCnx {
    async fn run(
        &mut self,
        read: tokio::net::tcp::OwnedReadHalf,
        shutdown: &CancellationToken,
    ) -> &'static str {
        let cfg = &self.shared.config;
        let mut frames = FramedRead::new(read, FrameCodec::new(cfg.max_message_size));
        let keepalive = cfg.keepalive_interval();
        let handshake_deadline = Instant::now() + Duration::from_secs(cfg.handshake_timeout_secs);
        let mut ticker = tokio::time::interval_at(Instant::now() + keepalive, keepalive);
        let mut heard_since_tick = true;
        let mut ping_outstanding = false;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return "broker shutting down",
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
                    match frame {
                        None => return "peer closed the connection",
                        Some(Err(e)) => {
                            self.protocol_error(&e).await;
                            return "protocol error";
                        }
                        Some(Ok(frame)) => match self.handle(frame).await {
                            Next::Continue => {}
                            Next::Close(reason) => return reason,
                        },
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
                let flags = FeatureFlags::default();
                let reply = commands::connected(
                    crate::SERVER_VERSION,
                    client_protocol,
                    Some(self.shared.config.max_message_size),
                    flags,
                );
                let protocol_version = client_protocol.clamp(0, strobe_wire::PROTOCOL_VERSION);
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
            (State::Connected { .. }, Command::Ping(_)) => {
                self.send(commands::pong()).await;
                Next::Continue
            }
            (State::Connected { .. }, Command::Pong(_)) => Next::Continue,
            (State::Connected { .. }, command) => {
                self.unsupported(command).await;
                Next::Continue
            }
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
            other => match other.request_id() {
                Some(id) => commands::error(id, ServerError::NotAllowedError, msg),
                None => return,
            },
        };
        self.send(reply).await;
    }
}
