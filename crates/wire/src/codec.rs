//! A tokio-util codec over [`decode_frame`] and [`OutFrame`].

use bytes::{BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::frame::{DEFAULT_MAX_MESSAGE_SIZE, FRAME_PADDING, Frame, OutFrame, decode_frame};
use crate::{Command, WireError};

/// Frames in, frames out. The limit is `max_message_size + FRAME_PADDING`, as
/// Pulsar's `LengthFieldBasedFrameDecoder`.
#[derive(Debug, Clone)]
pub struct FrameCodec {
    max_frame_size: usize,
}

impl FrameCodec {
    pub fn new(max_message_size: usize) -> FrameCodec {
        FrameCodec {
            max_frame_size: max_message_size.saturating_add(FRAME_PADDING),
        }
    }

    /// Adopts the peer's announced max message size (CONNECTED.max_message_size).
    pub fn set_max_message_size(&mut self, max_message_size: usize) {
        self.max_frame_size = max_message_size.saturating_add(FRAME_PADDING);
    }

    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }
}

impl Default for FrameCodec {
    fn default() -> Self {
        FrameCodec::new(DEFAULT_MAX_MESSAGE_SIZE)
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = WireError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, WireError> {
        decode_frame(src, self.max_frame_size)
    }
}

impl Encoder<OutFrame> for FrameCodec {
    type Error = WireError;

    fn encode(&mut self, item: OutFrame, dst: &mut BytesMut) -> Result<(), WireError> {
        dst.reserve(item.len());
        dst.put_slice(&item.head);
        dst.put_slice(&item.body);
        Ok(())
    }
}

impl Encoder<Frame> for FrameCodec {
    type Error = WireError;

    fn encode(&mut self, item: Frame, dst: &mut BytesMut) -> Result<(), WireError> {
        let base = item.command.into_base();
        match item.payload {
            None => crate::encode_command(&base, dst),
            Some(p) => crate::encode_payload_command(&base, &p, dst),
        }
        Ok(())
    }
}

impl Encoder<Command> for FrameCodec {
    type Error = WireError;

    fn encode(&mut self, item: Command, dst: &mut BytesMut) -> Result<(), WireError> {
        crate::encode_command(&item.into_base(), dst);
        Ok(())
    }
}
