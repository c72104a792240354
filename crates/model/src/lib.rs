//! Strobe's domain vocabulary, shared by every crate that makes decisions:
//! topic names (Pulsar's `TopicName`), positions and message ids (`Position`,
//! `MessageIdImpl`), subscription types, transaction ids (`TxnID`) and the key
//! hashing that Key_Shared routing depends on (`Murmur3_32Hash`), and the
//! scalable topics' ring, hash ranges and segment descriptors (`HashRange`,
//! `SegmentTopicName`'s descriptor).
//!
//! No I/O and no protobuf here: the wire crate maps its types to these.

mod hash;
pub mod hex;
mod id;
pub mod scalable;
mod topic;

pub use hash::{murmur3_32, sticky_hash_consistent, sticky_hash_low16};
pub use id::{MessageId, Position, SubType, TxnId};
pub use topic::{Domain, TopicName, TopicNameError};
