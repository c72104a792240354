//! Frames the broker sends a client on its own initiative (CLOSE_PRODUCER,
//! CLOSE_CONSUMER, ACTIVE_CONSUMER_CHANGE, REACHED_END_OF_TOPIC) from places
//! that hold a lock and cannot wait for room in the connection's queue.

use strobe_wire::OutFrame;
use tokio::sync::mpsc::{self, error::TrySendError};

/// Queues `frame` on a connection. A full queue (a busy connection's
/// receipts and messages) must not lose it: a producer that never gets its
/// CLOSE_PRODUCER keeps sending to a topic that no longer stores for it, and
/// waits for receipts forever. So it is sent from a task once there is room.
/// A closed queue needs nothing: the client sees the connection end.
pub(crate) fn tell(tx: &mpsc::Sender<OutFrame>, frame: OutFrame) {
    if let Err(TrySendError::Full(frame)) = tx.try_send(frame) {
        let tx = tx.clone();
        tokio::spawn(async move {
            let _ = tx.send(frame).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::tell;
    use strobe_wire::{OutFrame, commands};
    use tokio::sync::mpsc;

    #[tokio::test]
    async fn a_frame_told_to_a_full_queue_arrives_once_there_is_room() {
        let (tx, mut rx) = mpsc::channel(1);
        tx.try_send(OutFrame::command(commands::pong())).unwrap();
        tell(
            &tx,
            OutFrame::command(commands::close_producer(7, None, None)),
        );
        let first = rx.recv().await.unwrap();
        let second = rx.recv().await.unwrap();
        assert_ne!(first.to_bytes(), second.to_bytes());
        assert_eq!(
            second.to_bytes(),
            OutFrame::command(commands::close_producer(7, None, None)).to_bytes()
        );
    }
}
