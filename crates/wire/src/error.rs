use crate::proto::{CompressionType, base_command::Type};

/// Why bytes from the wire (or from storage) could not be turned into a frame,
/// a command, a payload or a batch.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge { size: usize, max: usize },
    #[error("frame of {size} bytes is too small to hold a command")]
    FrameTooSmall { size: usize },
    #[error("command size {command_size} exceeds the frame's {frame_size} bytes")]
    CommandSizeExceedsFrame {
        command_size: usize,
        frame_size: usize,
    },
    #[error("command does not parse: {0}")]
    InvalidCommand(#[source] prost::DecodeError),
    #[error("unknown command type {0}")]
    UnknownCommandType(i32),
    #[error("command {0:?} lacks its body")]
    MissingCommandBody(Type),
    #[error("payload truncated: {0}")]
    Truncated(&'static str),
    #[error("checksum mismatch: the frame says {expected:#010x}, the bytes give {computed:#010x}")]
    ChecksumMismatch { expected: u32, computed: u32 },
    #[error("message metadata does not parse: {0}")]
    InvalidMetadata(#[source] prost::DecodeError),
    #[error("the batch is compressed ({0:?}); it cannot be read without decompressing")]
    CompressedBatch(CompressionType),
    #[error("compression: {0}")]
    Compression(String),
    #[error("the batch is encrypted; it cannot be read")]
    EncryptedBatch,
    #[error("message metadata of {size} bytes exceeds the limit of {max} bytes")]
    MetadataTooLarge { size: usize, max: usize },
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}
