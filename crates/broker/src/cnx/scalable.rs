//! SCALABLE_TOPIC_LOOKUP and SCALABLE_TOPIC_CLOSE: the DAG watch sessions of
//! Pulsar 5's scalable topics (Pulsar's `DagWatchSession`). Any broker serves
//! one. The first SCALABLE_TOPIC_UPDATE carries the topic's resolved name and
//! its whole layout, sealed segments included, with the broker of every
//! active segment (plain and TLS URLs, for the listener the connection's
//! lookups named) and of the controller; every change of the layout
//! document pushes it again, and so does (unlike Pulsar) a change of the
//! controller's leader or of a segment's owner, so a client never waits on
//! a stale broker. A session ends with SCALABLE_TOPIC_CLOSE or its connection.

use strobe_model::{Domain, TopicName};
use strobe_resources::LayoutChange;
use strobe_wire::proto::{self, ServerError};
use strobe_wire::{Command, OutFrame, commands};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, warn};

use super::{Outcome, ServerCnx};
use crate::BrokerError;
use crate::security::Operation;

/// Most DAG watch sessions one connection may hold.
const MAX_SESSIONS: usize = 64;

/// How long a session lets a bundle's ownership settle before it pushes
/// the segments' new brokers.
const OWNERSHIP_SETTLE: std::time::Duration = std::time::Duration::from_millis(50);

/// The scalable topic a lookup names: `topic://` as it is, `persistent://`
/// as the `topic://` of the same name (whose layout, if it has none yet, is
/// the v4 topic's synthetic one: PIP-475); anything else is refused as
/// Pulsar refuses it.
pub(super) fn scalable_name(name: &str) -> Result<TopicName, BrokerError> {
    let t = TopicName::parse(name)?;
    match t.domain() {
        Domain::Topic => Ok(t),
        Domain::Persistent if t.partition().is_some() => Err(BrokerError::NotAllowed(format!(
            "{name} is a partition: look up its partitioned topic"
        ))),
        Domain::Persistent => Ok(TopicName::parse(&format!(
            "topic://{}/{}",
            t.namespace(),
            t.local_name()
        ))?),
        Domain::NonPersistent => Err(BrokerError::NotAllowed(format!(
            "{name} is non-persistent: scalable topics are persistent"
        ))),
        Domain::Segment => Err(BrokerError::NotAllowed(format!(
            "{name} is a segment: look up its topic://"
        ))),
    }
}

/// Sends a command on a connection's queue from a session's task; `false`
/// once the connection is gone.
pub(super) fn sender(
    tx: &tokio::sync::mpsc::Sender<OutFrame>,
) -> impl Fn(Command) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> {
    let tx = tx.clone();
    move |c: Command| {
        let tx = tx.clone();
        Box::pin(async move { tx.send(OutFrame::command(c)).await.is_ok() })
    }
}

/// A place for session `id` among a connection's `sessions` (at most
/// `max`; those that ended on their own, refused or failed, no longer
/// count), replacing one with the same id; `None` when they are all taken.
pub(super) fn claim(
    sessions: &mut std::collections::HashMap<u64, CancellationToken>,
    id: u64,
    max: usize,
) -> Option<CancellationToken> {
    sessions.retain(|_, s| !s.is_cancelled());
    if sessions.len() >= max && !sessions.contains_key(&id) {
        return None;
    }
    let cancel = CancellationToken::new();
    if let Some(old) = sessions.insert(id, cancel.clone()) {
        old.cancel();
    }
    Some(cancel)
}

impl ServerCnx {
    pub(super) fn scalable_topic_lookup(
        &mut self,
        c: proto::CommandScalableTopicLookup,
    ) -> Outcome {
        let session_id = c.session_id;
        let refuse = |code: ServerError, message: String| {
            Outcome::Reply(commands::scalable_topic_error(session_id, code, message))
        };
        if !self.service.config.scalable_topics_enabled {
            return refuse(
                ServerError::NotAllowedError,
                "scalable topics are disabled on this broker (scalable_topics_enabled)".into(),
            );
        }
        let topic = match scalable_name(&c.topic) {
            Ok(t) => t,
            Err(e) => return refuse(e.server_error(), e.to_string()),
        };
        let Some(cancel) = claim(&mut self.scalable_sessions, session_id, MAX_SESSIONS) else {
            return refuse(
                ServerError::NotAllowedError,
                format!("at most {MAX_SESSIONS} scalable-topic sessions per connection"),
            );
        };
        let create = c.create_if_missing();
        // A `persistent://` name: the v4 topic, served a synthetic layout
        // until it is migrated (PIP-475), never made scalable by a lookup.
        let v4 = TopicName::parse(&c.topic)
            .ok()
            .filter(|t| t.domain() == Domain::Persistent);
        let (service, tx) = (self.service.clone(), self.tx.clone());
        let role = self.role().map(str::to_owned);
        let listener = self.service.cluster().and_then(|c| c.listener_of(self.id));
        let span = tracing::info_span!("dag_watch", session_id, topic = %topic);
        tokio::spawn(
            async move {
                // However the session ends, its entry reads as ended.
                let _ended = cancel.clone().drop_guard();
                let send = sender(&tx);
                if let Err(e) = service.authorize(role.as_deref(), Operation::Lookup(&topic)).await {
                    send(commands::scalable_topic_error(session_id, e.server_error(), e.to_string()))
                        .await;
                    return;
                }
                let watch = tokio::select! {
                    _ = cancel.cancelled() => return,
                    w = async {
                        match &v4 {
                            None => service
                                .watch_layout(&topic, create)
                                .await
                                .map(|(l, w)| (l, false, w)),
                            Some(v4) => service
                                .watch_legacy_layout(&topic, v4)
                                .await
                                .map(|(l, synthetic, w)| (Some(l), synthetic, w)),
                        }
                    } => w,
                };
                let (mut layout, mut synthetic, mut changes) = match watch {
                    Ok(w) => w,
                    // Pulsar answers every failure to start a session as
                    // TopicNotFound; the message says which.
                    Err(e) => {
                        let code = match e {
                            BrokerError::Authorization(_) => ServerError::AuthorizationError,
                            _ => ServerError::TopicNotFound,
                        };
                        send(commands::scalable_topic_error(session_id, code, e.to_string())).await;
                        return;
                    }
                };
                // The topic has a controller from now on (campaigning, in a
                // cluster): a resize a dead leader left gets finished. A
                // synthetic layout has none (nothing to resize).
                if !synthetic {
                    service.touch_controller(&topic);
                }
                let mut owners = service.cluster().map(|c| c.ownership_changes());
                // What was pushed last: a change that alters nothing the
                // client reads (the write this session's own lookup made, an
                // ownership move of another topic's bundle) is not pushed.
                let mut last = None;
                loop {
                    if let Some(l) = &layout {
                        let dag = service.dag(&topic, l, listener.as_deref()).await;
                        if last.as_ref() != Some(&dag) {
                            last = Some(dag.clone());
                            let update =
                                commands::scalable_topic_update(session_id, &topic.to_string(), dag);
                            if !send(update).await {
                                return;
                            }
                        }
                    }
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        changed = changes.next() => match changed {
                            Some(Ok(LayoutChange::Layout(Some(l)))) => {
                                layout = Some(*l);
                                if synthetic {
                                    // Migrated: the stored layout (epoch 1)
                                    // replaces the synthetic one (epoch 0).
                                    synthetic = false;
                                    service.touch_controller(&topic);
                                }
                            }
                            // Deleted: the session stays, as Pulsar's does,
                            // for the topic made again under the same name.
                            Some(Ok(LayoutChange::Layout(None))) => {}
                            Some(Ok(LayoutChange::Controller)) => {}
                            Some(Err(e)) => {
                                warn!(error = %e, "the layout watch failed; the session ends");
                                send(commands::scalable_topic_error(session_id, ServerError::ServiceNotReady, e.to_string())).await;
                                return;
                            }
                            None => return,
                        },
                        moved = async {
                            match &mut owners {
                                Some(o) => o.changed().await,
                                None => std::future::pending().await,
                            }
                        } => {
                            if moved.is_err() {
                                owners = None;
                            }
                            // A move touches several records in a row
                            // (releasing, assigned, owned): let it settle.
                            tokio::time::sleep(OWNERSHIP_SETTLE).await;
                            if let Some(o) = &mut owners {
                                o.borrow_and_update();
                            }
                        }
                    }
                }
            }
            .instrument(span),
        );
        debug!(session_id, "scalable-topic session opened");
        Outcome::Nothing
    }

    pub(super) fn scalable_topic_close(&mut self, c: proto::CommandScalableTopicClose) -> Outcome {
        if let Some(s) = self.scalable_sessions.remove(&c.session_id) {
            s.cancel();
        }
        Outcome::Nothing
    }
}
