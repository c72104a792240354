//! Pulsar's binary protocol, as bytes: frames (Pulsar's `Commands` and
//! `PulsarDecoder`), the typed commands inside them, message payloads (magic
//! 0x0e01 + CRC-32C + `MessageMetadata`), broker entry metadata (0x0e02) and
//! batches (`SingleMessageMetadata`).
//!
//! This crate never sees broker state, and it bounds every length it reads
//! before allocating for it. An incomplete frame is `Ok(None)`; a frame that
//! cannot be trusted is a [`WireError`] that says why.

#[allow(clippy::all, missing_debug_implementations)]
pub mod proto;

pub mod batch;
#[cfg(feature = "codec")]
mod codec;
pub mod commands;
pub mod compression;
mod error;
mod frame;
pub mod payload;

#[cfg(feature = "codec")]
pub use codec::FrameCodec;
pub use error::WireError;
pub use frame::{
    Command, DEFAULT_MAX_MESSAGE_SIZE, FRAME_PADDING, Frame, OutFrame, PROTOCOL_VERSION,
    decode_frame, encode_command, encode_payload_command,
};
