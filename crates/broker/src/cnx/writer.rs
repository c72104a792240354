//! The connection's writer: frames queued by the reader, the producers'
//! tasks and the subscriptions go out coalesced into few writes.

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tracing::debug;

use strobe_wire::OutFrame;

/// Bytes gathered from queued frames before one write.
const WRITE_COALESCE: usize = 256 * 1024;
/// Payloads at least this large are written from their own buffer, not copied.
const WRITE_DIRECT: usize = 64 * 1024;

/// Writes the queued frames. Whatever is queued when the socket is free goes
/// out in one write (receipts and messages of a busy connection share a
/// syscall); large payloads are written where they are, without a copy.
pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
    mut write: W,
    mut rx: mpsc::Receiver<OutFrame>,
) {
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
