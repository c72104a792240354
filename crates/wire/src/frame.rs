//! Frames: `[totalSize][cmdSize][BaseCommand][metadataAndPayload?]`, all
//! integers big-endian, and the typed [`Command`] inside.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;

use crate::WireError;
use crate::proto::{self, BaseCommand, base_command::Type};

/// The newest protocol version this crate speaks (`ProtocolVersion::V21`).
pub const PROTOCOL_VERSION: i32 = proto::ProtocolVersion::V21 as i32;

/// Pulsar's default `maxMessageSize` (5 MiB).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 5 * 1024 * 1024;
/// Room a frame may take beyond the max message size for its command and
/// metadata (`Commands.MESSAGE_SIZE_FRAME_PADDING`).
pub const FRAME_PADDING: usize = 10 * 1024;

/// One decoded frame: a command and, for SEND and MESSAGE, the
/// metadata-and-payload bytes exactly as they were on the wire (a slice of the
/// read buffer, not a copy).
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub command: Command,
    pub payload: Option<Bytes>,
}

impl Frame {
    pub fn new(command: impl Into<Command>) -> Frame {
        Frame {
            command: command.into(),
            payload: None,
        }
    }
}

/// Reads one frame from the front of `src`.
///
/// `Ok(None)` means more bytes are needed; the buffer then reserves room for
/// the rest of the frame, but only after the declared size has been checked
/// against `max_frame_size`, so a hostile size never allocates.
pub fn decode_frame(src: &mut BytesMut, max_frame_size: usize) -> Result<Option<Frame>, WireError> {
    if src.len() < 4 {
        return Ok(None);
    }
    let total = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
    if total > max_frame_size {
        return Err(WireError::FrameTooLarge {
            size: total,
            max: max_frame_size,
        });
    }
    if total < 4 {
        return Err(WireError::FrameTooSmall { size: total });
    }
    if src.len() < 4 + total {
        src.reserve(4 + total - src.len());
        return Ok(None);
    }
    let mut frame = src.split_to(4 + total).freeze();
    frame.advance(4);
    let command_size = frame.get_u32() as usize;
    if command_size > frame.len() {
        return Err(WireError::CommandSizeExceedsFrame {
            command_size,
            frame_size: total,
        });
    }
    let command_bytes = frame.split_to(command_size);
    let base = BaseCommand::decode(command_bytes).map_err(WireError::InvalidCommand)?;
    let command = Command::try_from(base)?;
    let payload = (!frame.is_empty()).then_some(frame);
    Ok(Some(Frame { command, payload }))
}

/// Appends a simple command frame to `dst`.
pub fn encode_command(command: &BaseCommand, dst: &mut BytesMut) {
    let len = command.encoded_len();
    dst.reserve(8 + len);
    dst.put_u32((4 + len) as u32);
    dst.put_u32(len as u32);
    command
        .encode(dst)
        .expect("reserved enough room for the command");
}

/// Appends a payload command frame (SEND, MESSAGE) to `dst`, copying `payload`.
/// Use [`OutFrame`] to send stored bytes without copying them.
pub fn encode_payload_command(command: &BaseCommand, payload: &[u8], dst: &mut BytesMut) {
    let len = command.encoded_len();
    dst.reserve(8 + len + payload.len());
    dst.put_u32((4 + len + payload.len()) as u32);
    dst.put_u32(len as u32);
    command
        .encode(dst)
        .expect("reserved enough room for the command");
    dst.put_slice(payload);
}

/// A frame ready to write: a small head (sizes, command, perhaps a checksum
/// prefix) and a body that is shared with storage, never copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutFrame {
    pub head: Bytes,
    pub body: Bytes,
}

impl OutFrame {
    /// A frame with no payload.
    pub fn command(command: impl Into<Command>) -> OutFrame {
        let mut head = BytesMut::new();
        encode_command(&command.into().into_base(), &mut head);
        OutFrame {
            head: head.freeze(),
            body: Bytes::new(),
        }
    }

    /// A payload frame whose payload is `prefix` (small, copied) followed by
    /// `body` (shared).
    pub fn with_payload(command: impl Into<Command>, prefix: &[u8], body: Bytes) -> OutFrame {
        let base = command.into().into_base();
        let len = base.encoded_len();
        let mut head = BytesMut::with_capacity(8 + len + prefix.len());
        head.put_u32((4 + len + prefix.len() + body.len()) as u32);
        head.put_u32(len as u32);
        base.encode(&mut head)
            .expect("reserved enough room for the command");
        head.put_slice(prefix);
        OutFrame {
            head: head.freeze(),
            body,
        }
    }

    pub fn len(&self) -> usize {
        self.head.len() + self.body.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame as one `Buf`, for vectored writes.
    pub fn into_buf(self) -> bytes::buf::Chain<Bytes, Bytes> {
        self.head.chain(self.body)
    }

    /// The frame as contiguous bytes (copies the body; for tests and tools).
    pub fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(self.len());
        b.put_slice(&self.head);
        b.put_slice(&self.body);
        b.freeze()
    }
}

macro_rules! commands {
    ($($variant:ident => $field:ident : $ty:ident),* $(,)?) => {
        /// A command with its body, typed: what a `BaseCommand` carries once its
        /// `type` and the matching field have been checked to agree.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Command {
            $($variant(proto::$ty),)*
        }

        impl Command {
            /// The `BaseCommand.type` of this command.
            pub fn kind(&self) -> Type {
                match self {
                    $(Command::$variant(_) => Type::$variant,)*
                }
            }

            pub fn into_base(self) -> BaseCommand {
                let mut base = BaseCommand {
                    r#type: self.kind() as i32,
                    ..Default::default()
                };
                match self {
                    $(Command::$variant(body) => base.$field = Some(body),)*
                }
                base
            }
        }

        impl TryFrom<BaseCommand> for Command {
            type Error = WireError;

            fn try_from(mut base: BaseCommand) -> Result<Command, WireError> {
                let kind = Type::try_from(base.r#type)
                    .map_err(|_| WireError::UnknownCommandType(base.r#type))?;
                // PING and PONG have empty bodies; some clients leave them out.
                match kind {
                    Type::Ping => { base.ping.get_or_insert_default(); }
                    Type::Pong => { base.pong.get_or_insert_default(); }
                    _ => {}
                }
                match kind {
                    $(Type::$variant => base
                        .$field
                        .map(Command::$variant)
                        .ok_or(WireError::MissingCommandBody(kind)),)*
                }
            }
        }

        $(impl From<proto::$ty> for Command {
            fn from(body: proto::$ty) -> Command {
                Command::$variant(body)
            }
        })*
    };
}

commands! {
    Connect => connect: CommandConnect,
    Connected => connected: CommandConnected,
    Subscribe => subscribe: CommandSubscribe,
    Producer => producer: CommandProducer,
    Send => send: CommandSend,
    SendReceipt => send_receipt: CommandSendReceipt,
    SendError => send_error: CommandSendError,
    Message => message: CommandMessage,
    Ack => ack: CommandAck,
    Flow => flow: CommandFlow,
    Unsubscribe => unsubscribe: CommandUnsubscribe,
    Success => success: CommandSuccess,
    Error => error: CommandError,
    CloseProducer => close_producer: CommandCloseProducer,
    CloseConsumer => close_consumer: CommandCloseConsumer,
    ProducerSuccess => producer_success: CommandProducerSuccess,
    Ping => ping: CommandPing,
    Pong => pong: CommandPong,
    RedeliverUnacknowledgedMessages => redeliver_unacknowledged_messages: CommandRedeliverUnacknowledgedMessages,
    PartitionedMetadata => partition_metadata: CommandPartitionedTopicMetadata,
    PartitionedMetadataResponse => partition_metadata_response: CommandPartitionedTopicMetadataResponse,
    Lookup => lookup_topic: CommandLookupTopic,
    LookupResponse => lookup_topic_response: CommandLookupTopicResponse,
    ConsumerStats => consumer_stats: CommandConsumerStats,
    ConsumerStatsResponse => consumer_stats_response: CommandConsumerStatsResponse,
    ReachedEndOfTopic => reached_end_of_topic: CommandReachedEndOfTopic,
    Seek => seek: CommandSeek,
    GetLastMessageId => get_last_message_id: CommandGetLastMessageId,
    GetLastMessageIdResponse => get_last_message_id_response: CommandGetLastMessageIdResponse,
    ActiveConsumerChange => active_consumer_change: CommandActiveConsumerChange,
    GetTopicsOfNamespace => get_topics_of_namespace: CommandGetTopicsOfNamespace,
    GetTopicsOfNamespaceResponse => get_topics_of_namespace_response: CommandGetTopicsOfNamespaceResponse,
    GetSchema => get_schema: CommandGetSchema,
    GetSchemaResponse => get_schema_response: CommandGetSchemaResponse,
    AuthChallenge => auth_challenge: CommandAuthChallenge,
    AuthResponse => auth_response: CommandAuthResponse,
    AckResponse => ack_response: CommandAckResponse,
    GetOrCreateSchema => get_or_create_schema: CommandGetOrCreateSchema,
    GetOrCreateSchemaResponse => get_or_create_schema_response: CommandGetOrCreateSchemaResponse,
    NewTxn => new_txn: CommandNewTxn,
    NewTxnResponse => new_txn_response: CommandNewTxnResponse,
    AddPartitionToTxn => add_partition_to_txn: CommandAddPartitionToTxn,
    AddPartitionToTxnResponse => add_partition_to_txn_response: CommandAddPartitionToTxnResponse,
    AddSubscriptionToTxn => add_subscription_to_txn: CommandAddSubscriptionToTxn,
    AddSubscriptionToTxnResponse => add_subscription_to_txn_response: CommandAddSubscriptionToTxnResponse,
    EndTxn => end_txn: CommandEndTxn,
    EndTxnResponse => end_txn_response: CommandEndTxnResponse,
    EndTxnOnPartition => end_txn_on_partition: CommandEndTxnOnPartition,
    EndTxnOnPartitionResponse => end_txn_on_partition_response: CommandEndTxnOnPartitionResponse,
    EndTxnOnSubscription => end_txn_on_subscription: CommandEndTxnOnSubscription,
    EndTxnOnSubscriptionResponse => end_txn_on_subscription_response: CommandEndTxnOnSubscriptionResponse,
    TcClientConnectRequest => tc_client_connect_request: CommandTcClientConnectRequest,
    TcClientConnectResponse => tc_client_connect_response: CommandTcClientConnectResponse,
    WatchTopicList => watch_topic_list: CommandWatchTopicList,
    WatchTopicListSuccess => watch_topic_list_success: CommandWatchTopicListSuccess,
    WatchTopicUpdate => watch_topic_update: CommandWatchTopicUpdate,
    WatchTopicListClose => watch_topic_list_close: CommandWatchTopicListClose,
    TopicMigrated => topic_migrated: CommandTopicMigrated,
    ScalableTopicLookup => scalable_topic_lookup: CommandScalableTopicLookup,
    ScalableTopicUpdate => scalable_topic_update: CommandScalableTopicUpdate,
    ScalableTopicClose => scalable_topic_close: CommandScalableTopicClose,
    ScalableTopicSubscribe => scalable_topic_subscribe: CommandScalableTopicSubscribe,
    ScalableTopicSubscribeResponse => scalable_topic_subscribe_response: CommandScalableTopicSubscribeResponse,
    ScalableTopicAssignmentUpdate => scalable_topic_assignment_update: CommandScalableTopicAssignmentUpdate,
    WatchScalableTopics => watch_scalable_topics: CommandWatchScalableTopics,
    WatchScalableTopicsUpdate => watch_scalable_topics_update: CommandWatchScalableTopicsUpdate,
    WatchScalableTopicsClose => watch_scalable_topics_close: CommandWatchScalableTopicsClose,
    WatchTcAssignments => watch_tc_assignments: CommandWatchTcAssignments,
    WatchTcAssignmentsUpdate => watch_tc_assignments_update: CommandWatchTcAssignmentsUpdate,
    WatchTcAssignmentsClose => watch_tc_assignments_close: CommandWatchTcAssignmentsClose,
    ScalableTopicUnsubscribe => scalable_topic_unsubscribe: CommandScalableTopicUnsubscribe,
}

impl From<Command> for BaseCommand {
    fn from(c: Command) -> BaseCommand {
        c.into_base()
    }
}

impl Command {
    /// The client-chosen request id of a request command, when it has one.
    pub fn request_id(&self) -> Option<u64> {
        use Command as C;
        Some(match self {
            C::Subscribe(c) => c.request_id,
            C::Producer(c) => c.request_id,
            C::Unsubscribe(c) => c.request_id,
            C::CloseProducer(c) => c.request_id,
            C::CloseConsumer(c) => c.request_id,
            C::PartitionedMetadata(c) => c.request_id,
            C::Lookup(c) => c.request_id,
            C::ConsumerStats(c) => c.request_id,
            C::Seek(c) => c.request_id,
            C::GetLastMessageId(c) => c.request_id,
            C::GetTopicsOfNamespace(c) => c.request_id,
            C::GetSchema(c) => c.request_id,
            C::GetOrCreateSchema(c) => c.request_id,
            C::NewTxn(c) => c.request_id,
            C::AddPartitionToTxn(c) => c.request_id,
            C::AddSubscriptionToTxn(c) => c.request_id,
            C::EndTxn(c) => c.request_id,
            C::EndTxnOnPartition(c) => c.request_id,
            C::EndTxnOnSubscription(c) => c.request_id,
            C::TcClientConnectRequest(c) => c.request_id,
            C::WatchTopicList(c) => c.request_id,
            C::WatchTopicListClose(c) => c.request_id,
            C::ScalableTopicSubscribe(c) => c.request_id,
            C::Ack(c) => return c.request_id,
            _ => return None,
        })
    }
}
