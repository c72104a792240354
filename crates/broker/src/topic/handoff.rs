//! A topic leaving this broker for another (PIP-307's multi-phase unload):
//! closed first without telling its clients, told later where to go.

use strobe_wire::{OutFrame, commands};
use tokio::sync::mpsc;
use tracing::warn;

use super::Topic;
use crate::BrokerError;
use crate::subscription::SubscriptionHandle;

/// The URLs (plain, TLS) a handoff names to the clients on some connections
/// (their ids); `None`: they look the topic up again.
pub type AssignedUrls<'a> = &'a (dyn Fn(&[u64]) -> Option<(String, Option<String>)> + Sync);

/// A topic closed for a move to another broker, its clients not yet told.
#[derive(Debug, Default)]
pub struct Handoff {
    /// (connection id, producer id, the connection's queue).
    producers: Vec<(u64, u64, mpsc::Sender<OutFrame>)>,
    /// Per subscription: the connections its consumers were on, and the
    /// consumers (the subscription does not say which is on which).
    consumers: Vec<(Vec<u64>, Vec<crate::subscription::ClosingConsumer>)>,
}

impl Handoff {
    /// Closes the producers and consumers, naming the broker they should
    /// reconnect to as `assigned` gives it for their connections (the
    /// address on the network they came from). Protocol v5+ clients
    /// reconnect there at once; older ones ignore the fields.
    pub async fn disconnect(mut self, assigned: AssignedUrls<'_>) {
        let producers = std::mem::take(&mut self.producers);
        let consumers = std::mem::take(&mut self.consumers);
        for (conn, pid, tx) in producers {
            let urls = assigned(&[conn]);
            let (url, tls) = split(&urls);
            let _ = tx
                .send(OutFrame::command(commands::close_producer(pid, url, tls)))
                .await;
        }
        for (conns, consumers) in consumers {
            let urls = assigned(&conns);
            let (url, tls) = split(&urls);
            for c in consumers {
                c.close(url, tls).await;
            }
        }
    }
}

impl Drop for Handoff {
    /// A handoff dropped before it told its clients (the task moving the
    /// bundle was cancelled or failed half-way) still tells them, without a
    /// broker to go to: its producers are no longer registered on the topic,
    /// so what they send is held and never answered, and without
    /// CLOSE_PRODUCER they would wait for those receipts forever.
    fn drop(&mut self) {
        if self.producers.is_empty() && self.consumers.is_empty() {
            return;
        }
        let producers = std::mem::take(&mut self.producers);
        let consumers = std::mem::take(&mut self.consumers);
        // No runtime: the broker is gone, and its connections with it.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            warn!(
                producers = producers.len(),
                "a handoff was dropped before telling its clients; closing them now"
            );
            let left = Handoff {
                producers,
                consumers,
            };
            rt.spawn(async move { left.disconnect(&|_| None).await });
        }
    }
}

fn split(urls: &Option<(String, Option<String>)>) -> (Option<&str>, Option<&str>) {
    match urls {
        Some((u, t)) => (Some(u), t.as_deref()),
        None => (None, None),
    }
}

impl Topic {
    /// Closes the topic for a move to another broker, without telling its
    /// clients yet (PIP-307's first phase): new sends are held, dispatch
    /// stops, cursors are persisted (acks arriving later are dropped and the
    /// messages redelivered by the new owner) and the log is closed, so the
    /// new owner opens it complete. [`Handoff::disconnect`] tells the clients.
    pub async fn close_for_handoff(&self) -> Handoff {
        let (producers, subs) = {
            let mut st = self.state.lock();
            st.closed = true;
            st.handing_off = true;
            let producers: Vec<(u64, u64, mpsc::Sender<OutFrame>)> = st
                .producers
                .drain()
                .map(|((conn, pid), p)| (conn, pid, p.tx))
                .collect();
            for (_, _, w) in st.waiting.drain(..) {
                let _ = w.send(Err(BrokerError::ServiceNotReady(
                    "the topic is being unloaded".into(),
                )));
            }
            let subs: Vec<SubscriptionHandle> = st.subscriptions.drain().map(|(_, s)| s).collect();
            (producers, subs)
        };
        // Built now, so that a caller cancelled below still tells the
        // producers (see the Drop).
        let mut handoff = Handoff {
            producers,
            consumers: Vec::new(),
        };
        for s in subs {
            let conns = match s.admin(crate::subscription::AdminOp::Info).await {
                Ok(crate::subscription::AdminReply::Info(i)) => {
                    i.consumers.iter().map(|c| c.conn_id).collect()
                }
                _ => Vec::new(),
            };
            handoff.consumers.push((conns, s.close_quietly().await));
        }
        if let Err(e) = self.ledger.close().await {
            warn!(topic = %self.name, error = %e, "closing the ledger failed");
        }
        // Every receipt of what was stored goes out before the close (the
        // ledger is closed, so each publish has its outcome; bounded anyway).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while self.in_flight.load(std::sync::atomic::Ordering::Acquire) > 0 {
            if std::time::Instant::now() > deadline {
                warn!(topic = %self.name, "receipts still pending after 5 s; closing the producers anyway");
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let view = self.compacted.lock().take();
        if let Some(v) = view {
            v.close().await;
        }
        handoff
    }
}
