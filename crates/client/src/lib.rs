//! `strobe-client`: an async (tokio) client for Apache Pulsar's binary
//! protocol, mirroring the Java client's `PulsarClientImpl`, `ProducerImpl`,
//! `ConsumerImpl` and `ReaderImpl`, with an API in the spirit of pulsar-rs.
//!
//! It serves Strobe's own tests, `strobe perf`, and the protocol parts that no
//! official client speaks yet: the PIP-486 entry-bucket producer
//! ([`BatchingType::EntryBucket`]) and consumer
//! ([`ConsumerBuilder::entry_bucket_dispatch`]), and the PIP-473
//! `WatchTcAssignments` watcher ([`Client::watch_tc_assignments`]). It does not
//! replace the official clients.
//!
//! What it does:
//! - connections with the CONNECT handshake, keepalive (PING/PONG) and
//!   reconnection with exponential backoff; lookups that follow redirects;
//! - producers with batching by time, count and bytes, key-based batching,
//!   LZ4 and ZSTD compression, a send timeout and a pending-message limit;
//! - consumers of every subscription type with flow control (permits),
//!   grouped individual and cumulative acks, batch-index acks, negative acks
//!   and redelivery; readers and seek.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use strobe_client::{Client, Compression, SubType};
//!
//! # async fn run() -> Result<(), strobe_client::Error> {
//! let client = Client::builder("pulsar://127.0.0.1:6650").build().await?;
//!
//! let mut producer = client
//!     .producer("my-topic")
//!     .batching(Duration::from_millis(1), 1000, 128 * 1024)
//!     .compression(Compression::Lz4)
//!     .create()
//!     .await?;
//! // `send` queues the message and returns a future of its receipt.
//! let receipt = producer.send(b"hello".to_vec()).await?;
//! producer.flush().await?;
//! println!("stored as {:?}", receipt.await?);
//!
//! let mut consumer = client
//!     .consumer("my-topic", "my-subscription")
//!     .sub_type(SubType::Shared)
//!     .subscribe()
//!     .await?;
//! let msg = consumer.recv().await?;
//! assert_eq!(&msg.payload[..], b"hello");
//! consumer.ack(&msg)?;
//! consumer.close().await?;
//! producer.close().await?;
//! client.close().await;
//! # Ok(())
//! # }
//! ```

mod checkpoint;
mod client;
mod compression;
mod connection;
mod consumer;
mod dag;
mod epoch;
mod error;
mod message;
mod producer;
mod reader;
mod scalable_checkpoint;
mod scalable_consumer;
mod scalable_producer;
mod scalable_stream;
mod tc;
mod txn;
mod util;

pub use checkpoint::{Checkpoint, CheckpointKind};
pub use client::{Client, ClientBuilder};
pub use compression::Compression;
pub use consumer::{Consumer, ConsumerBuilder, InitialPosition, Message, SeekTo};
pub use dag::{Dag, DagSegment, DagWatch};
pub use error::{Error, Result};
pub use message::{BatchingType, ProducerMessage, entry_bucket_of, entry_hash};
pub use message::{entry_bucket_ranges, equal_width_splits};
pub use producer::{Producer, ProducerBuilder, SendFuture};
pub use reader::{Reader, ReaderBuilder};
pub use scalable_checkpoint::{ScalableCheckpointConsumer, ScalableCheckpointConsumerBuilder};
pub use scalable_consumer::{ScalableMessage, ScalableQueueConsumer, ScalableQueueConsumerBuilder};
pub use scalable_producer::{
    ScalableMessageId, ScalableProducer, ScalableProducerBuilder, ScalableSendFuture,
};
pub use scalable_stream::{ScalableStreamConsumer, ScalableStreamConsumerBuilder};
pub use strobe_model::{MessageId, Position, SubType};
pub use strobe_wire::proto;
pub use tc::{TcAssignment, TcAssignmentsWatcher};
pub use txn::{TC_ASSIGN_TOPIC, TcDiscovery, Transaction};
