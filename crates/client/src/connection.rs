//! One TCP connection to one broker (Pulsar's `ClientCnx`) and the pool that
//! shares connections between producers and consumers (`ConnectionPool`).
//!
//! A connection runs two tasks: a reader that routes every incoming frame to
//! the request, producer, consumer or watcher it belongs to, and a writer that
//! coalesces queued frames into one `write` per wake-up. Keepalive follows
//! Pulsar: PING after an idle interval, close when the peer stays silent for
//! another one; every PING from the broker is answered with PONG.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use strobe_wire::proto::{self, FeatureFlags, ServerError};
use strobe_wire::{Command, FrameCodec, OutFrame, commands, decode_frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::FramedRead;
use tracing::{debug, warn};

use crate::error::{Error, Result};

/// What the reader hands a producer.
#[derive(Debug)]
pub(crate) enum ProducerEvent {
    Receipt(proto::CommandSendReceipt),
    SendError(proto::CommandSendError),
    /// The broker closed the producer, or the connection died.
    Closed,
}

/// What the reader hands a consumer.
#[derive(Debug)]
pub(crate) enum ConsumerEvent {
    Message(proto::CommandMessage, Bytes),
    ActiveChange(bool),
    EndOfTopic,
    /// The broker closed the consumer, or the connection died.
    Closed,
}

/// Connection settings.
#[derive(Debug, Clone)]
pub(crate) struct ConnOptions {
    pub keepalive: Duration,
    pub operation_timeout: Duration,
    pub connect_timeout: Duration,
    pub auth: Option<(String, Bytes)>,
}

#[derive(Default)]
struct Routes {
    pending: HashMap<u64, oneshot::Sender<Command>>,
    producers: HashMap<u64, mpsc::UnboundedSender<ProducerEvent>>,
    consumers: HashMap<u64, mpsc::UnboundedSender<ConsumerEvent>>,
    watchers: HashMap<u64, mpsc::UnboundedSender<Command>>,
}

/// A live connection. Cheap to share (`Arc`); it closes when its reader sees
/// EOF, an error or a keepalive timeout, and then tells everyone routed through it.
pub(crate) struct Connection {
    pub addr: String,
    tx: mpsc::UnboundedSender<OutFrame>,
    routes: Mutex<Routes>,
    closed: AtomicBool,
    next_request: AtomicU64,
    pub features: FeatureFlags,
    pub max_message_size: usize,
    pub server_version: String,
    operation_timeout: Duration,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.addr)
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl Connection {
    /// Connects, performs the CONNECT/CONNECTED handshake and starts the tasks.
    pub async fn connect(addr: &str, opts: &ConnOptions) -> Result<Arc<Connection>> {
        let fut = Self::connect_inner(addr, opts);
        tokio::time::timeout(opts.connect_timeout, fut)
            .await
            .map_err(|_| Error::Timeout("connect"))?
    }

    async fn connect_inner(addr: &str, opts: &ConnOptions) -> Result<Arc<Connection>> {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let auth = opts.auth.as_ref().map(|(m, d)| (m.as_str(), d.clone()));
        let connect = commands::connect(concat!("strobe-client ", env!("CARGO_PKG_VERSION")), auth);
        stream
            .write_all(&OutFrame::command(connect).to_bytes())
            .await?;
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let limit = strobe_wire::DEFAULT_MAX_MESSAGE_SIZE + strobe_wire::FRAME_PADDING;
        let connected = loop {
            if let Some(frame) = decode_frame(&mut buf, limit)? {
                match frame.command {
                    Command::Connected(c) => break c,
                    Command::Error(e) => {
                        return Err(Error::Server {
                            code: ServerError::try_from(e.error)
                                .unwrap_or(ServerError::UnknownError),
                            message: e.message,
                        });
                    }
                    Command::Ping(_) => {
                        stream
                            .write_all(&OutFrame::command(commands::pong()).to_bytes())
                            .await?;
                        continue;
                    }
                    other => {
                        return Err(Error::Unexpected(format!(
                            "{:?} before CONNECTED",
                            other.kind()
                        )));
                    }
                }
            }
            if stream.read_buf(&mut buf).await? == 0 {
                return Err(Error::Disconnected(addr.to_owned()));
            }
        };
        let max_message_size = connected
            .max_message_size
            .map(|s| s.max(0) as usize)
            .unwrap_or(strobe_wire::DEFAULT_MAX_MESSAGE_SIZE);
        let (read, write) = stream.into_split();
        let (tx, rx) = mpsc::unbounded_channel();
        let conn = Arc::new(Connection {
            addr: addr.to_owned(),
            tx,
            routes: Mutex::new(Routes::default()),
            closed: AtomicBool::new(false),
            next_request: AtomicU64::new(1),
            features: connected.feature_flags.unwrap_or_default(),
            max_message_size,
            server_version: connected.server_version,
            operation_timeout: opts.operation_timeout,
        });
        let mut framed =
            FramedRead::with_capacity(read, FrameCodec::new(max_message_size), 256 * 1024);
        // Frames that came in with CONNECTED are handled first: FramedRead
        // would not look at its buffer before the socket is readable again.
        let mut early = Vec::new();
        while let Some(f) = decode_frame(&mut buf, limit)? {
            early.push(f);
        }
        framed.read_buffer_mut().extend_from_slice(&buf);
        tokio::spawn(writer(write, rx, conn.addr.clone()));
        tokio::spawn(reader(
            early,
            framed,
            Arc::downgrade(&conn),
            conn.tx.clone(),
            opts.keepalive,
        ));
        debug!(addr, "connected");
        Ok(conn)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn next_request_id(&self) -> u64 {
        self.next_request.fetch_add(1, Ordering::Relaxed)
    }

    /// Queues a frame for the writer. Fails only when the connection is closed.
    pub fn send(&self, frame: OutFrame) -> Result<()> {
        if self.is_closed() {
            return Err(Error::Disconnected(self.addr.clone()));
        }
        self.tx
            .send(frame)
            .map_err(|_| Error::Disconnected(self.addr.clone()))
    }

    pub fn send_command(&self, cmd: impl Into<Command>) -> Result<()> {
        self.send(OutFrame::command(cmd))
    }

    /// Sends a request (whose `request_id` the caller took from
    /// [`Connection::next_request_id`]) and waits for its answer. A broker
    /// `Error` answer becomes [`Error::Server`].
    pub async fn request(&self, request_id: u64, cmd: impl Into<Command>) -> Result<Command> {
        let (tx, rx) = oneshot::channel();
        self.routes
            .lock()
            .expect("routes lock")
            .pending
            .insert(request_id, tx);
        if let Err(e) = self.send_command(cmd) {
            self.routes
                .lock()
                .expect("routes lock")
                .pending
                .remove(&request_id);
            return Err(e);
        }
        let reply = match tokio::time::timeout(self.operation_timeout, rx).await {
            Ok(Ok(c)) => c,
            Ok(Err(_)) => return Err(Error::Disconnected(self.addr.clone())),
            Err(_) => {
                self.routes
                    .lock()
                    .expect("routes lock")
                    .pending
                    .remove(&request_id);
                return Err(Error::Timeout("request"));
            }
        };
        match reply {
            Command::Error(e) => Err(server_error(e.error, e.message)),
            other => Ok(other),
        }
    }

    pub fn register_producer(&self, id: u64, tx: mpsc::UnboundedSender<ProducerEvent>) {
        let mut r = self.routes.lock().expect("routes lock");
        r.producers.insert(id, tx);
        if self.is_closed()
            && let Some(tx) = r.producers.remove(&id)
        {
            let _ = tx.send(ProducerEvent::Closed);
        }
    }

    pub fn unregister_producer(&self, id: u64) {
        self.routes
            .lock()
            .expect("routes lock")
            .producers
            .remove(&id);
    }

    pub fn register_consumer(&self, id: u64, tx: mpsc::UnboundedSender<ConsumerEvent>) {
        let mut r = self.routes.lock().expect("routes lock");
        r.consumers.insert(id, tx);
        if self.is_closed()
            && let Some(tx) = r.consumers.remove(&id)
        {
            let _ = tx.send(ConsumerEvent::Closed);
        }
    }

    pub fn unregister_consumer(&self, id: u64) {
        self.routes
            .lock()
            .expect("routes lock")
            .consumers
            .remove(&id);
    }

    pub fn register_watcher(&self, id: u64, tx: mpsc::UnboundedSender<Command>) {
        self.routes
            .lock()
            .expect("routes lock")
            .watchers
            .insert(id, tx);
    }

    pub fn unregister_watcher(&self, id: u64) {
        self.routes
            .lock()
            .expect("routes lock")
            .watchers
            .remove(&id);
    }

    /// Marks the connection closed and tells everyone routed through it.
    fn shut(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let routes = std::mem::take(&mut *self.routes.lock().expect("routes lock"));
        for (_, p) in routes.producers {
            let _ = p.send(ProducerEvent::Closed);
        }
        for (_, c) in routes.consumers {
            let _ = c.send(ConsumerEvent::Closed);
        }
        // Pending requests and watchers see their senders dropped.
        debug!(addr = %self.addr, "connection closed");
    }

    /// Closes the connection from our side.
    pub fn close(&self) {
        self.shut();
        // An empty frame tells the writer to stop.
        let _ = self.tx.send(OutFrame {
            head: Bytes::new(),
            body: Bytes::new(),
        });
    }

    fn route(&self, frame: strobe_wire::Frame) {
        let mut routes = self.routes.lock().expect("routes lock");
        match frame.command {
            Command::Message(m) => {
                let payload = frame.payload.unwrap_or_default();
                if let Some(c) = routes.consumers.get(&m.consumer_id) {
                    let _ = c.send(ConsumerEvent::Message(m, payload));
                }
            }
            Command::SendReceipt(r) => {
                if let Some(p) = routes.producers.get(&r.producer_id) {
                    let _ = p.send(ProducerEvent::Receipt(r));
                }
            }
            Command::SendError(e) => {
                if let Some(p) = routes.producers.get(&e.producer_id) {
                    let _ = p.send(ProducerEvent::SendError(e));
                }
            }
            Command::CloseProducer(c) => {
                if let Some(p) = routes.producers.remove(&c.producer_id) {
                    let _ = p.send(ProducerEvent::Closed);
                }
            }
            Command::CloseConsumer(c) => {
                if let Some(p) = routes.consumers.remove(&c.consumer_id) {
                    let _ = p.send(ConsumerEvent::Closed);
                }
            }
            Command::ActiveConsumerChange(c) => {
                if let Some(p) = routes.consumers.get(&c.consumer_id) {
                    let _ = p.send(ConsumerEvent::ActiveChange(c.is_active.unwrap_or(false)));
                }
            }
            Command::ReachedEndOfTopic(c) => {
                if let Some(p) = routes.consumers.get(&c.consumer_id) {
                    let _ = p.send(ConsumerEvent::EndOfTopic);
                }
            }
            Command::WatchTcAssignmentsUpdate(u) => {
                if let Some(w) = routes.watchers.get(&u.watch_id) {
                    let _ = w.send(Command::WatchTcAssignmentsUpdate(u));
                }
            }
            Command::ScalableTopicUpdate(u) => {
                if let Some(w) = routes.watchers.get(&u.session_id) {
                    let _ = w.send(Command::ScalableTopicUpdate(u));
                }
            }
            Command::ScalableTopicAssignmentUpdate(u) => {
                if let Some(w) = routes.watchers.get(&u.consumer_id) {
                    let _ = w.send(Command::ScalableTopicAssignmentUpdate(u));
                }
            }
            Command::AckResponse(a) => {
                if let Some(tx) = a.request_id.and_then(|id| routes.pending.remove(&id)) {
                    let _ = tx.send(Command::AckResponse(a));
                }
            }
            cmd => {
                let id = match &cmd {
                    Command::Success(c) => Some(c.request_id),
                    Command::Error(c) => Some(c.request_id),
                    Command::ProducerSuccess(c) => Some(c.request_id),
                    Command::LookupResponse(c) => Some(c.request_id),
                    Command::PartitionedMetadataResponse(c) => Some(c.request_id),
                    Command::GetLastMessageIdResponse(c) => Some(c.request_id),
                    Command::ConsumerStatsResponse(c) => Some(c.request_id),
                    Command::GetTopicsOfNamespaceResponse(c) => Some(c.request_id),
                    Command::GetSchemaResponse(c) => Some(c.request_id),
                    Command::GetOrCreateSchemaResponse(c) => Some(c.request_id),
                    Command::TcClientConnectResponse(c) => Some(c.request_id),
                    Command::NewTxnResponse(c) => Some(c.request_id),
                    Command::AddPartitionToTxnResponse(c) => Some(c.request_id),
                    Command::AddSubscriptionToTxnResponse(c) => Some(c.request_id),
                    Command::EndTxnResponse(c) => Some(c.request_id),
                    Command::ScalableTopicSubscribeResponse(c) => Some(c.request_id),
                    _ => None,
                };
                match id.and_then(|id| routes.pending.remove(&id)) {
                    Some(tx) => {
                        let _ = tx.send(cmd);
                    }
                    None => debug!(addr = %self.addr, kind = ?cmd.kind(), "unrouted frame"),
                }
            }
        }
    }
}

pub(crate) fn server_error(code: i32, message: String) -> Error {
    Error::Server {
        code: ServerError::try_from(code).unwrap_or(ServerError::UnknownError),
        message,
    }
}

/// Bodies at least this large are written from their own buffer (vectored
/// write) instead of being copied next to the small frames around them.
const ZERO_COPY_BODY: usize = 8 * 1024;

async fn writer(
    mut write: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<OutFrame>,
    addr: String,
) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut chunks: VecDeque<Bytes> = VecDeque::new();
    let mut stop = false;
    while !stop {
        let Some(frame) = rx.recv().await else { break };
        let mut queued = 0;
        let mut next = Some(frame);
        while let Some(f) = next.take() {
            if f.is_empty() {
                stop = true;
                break;
            }
            queued += f.len();
            buf.put_slice(&f.head);
            if f.body.len() >= ZERO_COPY_BODY {
                chunks.push_back(buf.split().freeze());
                chunks.push_back(f.body);
            } else {
                buf.put_slice(&f.body);
            }
            if queued < 4 * 1024 * 1024 {
                next = rx.try_recv().ok();
            }
        }
        if !buf.is_empty() {
            chunks.push_back(buf.split().freeze());
        }
        if let Err(e) = write_chunks(&mut write, &mut chunks).await {
            warn!(addr, error = %e, "write failed");
            break;
        }
    }
    let _ = write.shutdown().await;
}

/// Writes every chunk, as few `writev` calls as the kernel allows.
async fn write_chunks(
    write: &mut tokio::net::tcp::OwnedWriteHalf,
    chunks: &mut VecDeque<Bytes>,
) -> std::io::Result<()> {
    use bytes::Buf;
    while !chunks.is_empty() {
        let slices: Vec<std::io::IoSlice<'_>> = chunks
            .iter()
            .take(64)
            .map(|c| std::io::IoSlice::new(c))
            .collect();
        let mut n = write.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let front = chunks.front_mut().expect("written bytes come from a chunk");
            if n >= front.len() {
                n -= front.len();
                chunks.pop_front();
            } else {
                front.advance(n);
                n = 0;
            }
        }
    }
    Ok(())
}

async fn reader(
    early: Vec<strobe_wire::Frame>,
    mut framed: FramedRead<tokio::net::tcp::OwnedReadHalf, FrameCodec>,
    conn: std::sync::Weak<Connection>,
    tx: mpsc::UnboundedSender<OutFrame>,
    keepalive: Duration,
) {
    let mut tick = tokio::time::interval(keepalive);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut heard = true;
    let mut pinged = false;
    if let Some(c) = conn.upgrade() {
        for frame in early {
            match frame.command {
                Command::Ping(_) => {
                    let _ = tx.send(OutFrame::command(commands::pong()));
                }
                Command::Pong(_) => {}
                _ => c.route(frame),
            }
        }
    }
    loop {
        tokio::select! {
            frame = framed.next() => {
                let Some(conn) = conn.upgrade() else { break };
                match frame {
                    Some(Ok(frame)) => {
                        heard = true;
                        match frame.command {
                            Command::Ping(_) => {
                                let _ = tx.send(OutFrame::command(commands::pong()));
                            }
                            Command::Pong(_) => {}
                            _ => conn.route(frame),
                        }
                    }
                    Some(Err(e)) => {
                        warn!(addr = %conn.addr, error = %e, "bad frame, closing");
                        conn.close();
                        break;
                    }
                    None => {
                        conn.shut();
                        break;
                    }
                }
            }
            _ = tick.tick() => {
                let Some(conn) = conn.upgrade() else { break };
                if conn.is_closed() {
                    break;
                }
                if heard {
                    heard = false;
                    pinged = false;
                } else if !pinged {
                    pinged = true;
                    let _ = tx.send(OutFrame::command(commands::ping()));
                } else {
                    warn!(addr = %conn.addr, "keepalive timeout, closing");
                    conn.close();
                    break;
                }
            }
        }
    }
    if let Some(conn) = conn.upgrade() {
        conn.close();
    }
}

/// Connections by broker address, shared by everything one client opens.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    conns: tokio::sync::Mutex<HashMap<String, Arc<Connection>>>,
}

impl Pool {
    pub async fn get(&self, addr: &str, opts: &ConnOptions) -> Result<Arc<Connection>> {
        let mut conns = self.conns.lock().await;
        if let Some(c) = conns.get(addr)
            && !c.is_closed()
        {
            return Ok(c.clone());
        }
        let c = Connection::connect(addr, opts).await?;
        conns.insert(addr.to_owned(), c.clone());
        Ok(c)
    }

    pub async fn close_all(&self) {
        for (_, c) in self.conns.lock().await.drain() {
            c.close();
        }
    }
}

/// `pulsar://host:port` (or `host:port`) to `host:port`.
pub(crate) fn socket_addr(url: &str) -> Result<String> {
    let rest = url
        .strip_prefix("pulsar://")
        .or_else(|| url.strip_prefix("pulsar+ssl://").map(|_| ""))
        .unwrap_or(url);
    if rest.is_empty() {
        return Err(Error::Invalid(format!(
            "unsupported service URL {url} (TLS is not supported)"
        )));
    }
    let rest = rest.trim_end_matches('/');
    let rest = rest.split(',').next().unwrap_or(rest);
    if rest.contains(':') {
        Ok(rest.to_owned())
    } else {
        Ok(format!("{rest}:6650"))
    }
}
