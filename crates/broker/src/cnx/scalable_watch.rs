//! WATCH_SCALABLE_TOPICS and WATCH_SCALABLE_TOPICS_CLOSE: a client follows
//! the scalable topics of a namespace (Pulsar's
//! `ScalableTopicsWatcherSession`): a snapshot of the topics whose
//! properties match every filter, skipped when the client's `current_hash`
//! already names that set, then diffs (removed before added) as topics are
//! created, change properties or are deleted, coalesced over 50 ms.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use strobe_resources::TopicsChange;
use strobe_wire::Command;
use strobe_wire::proto::command_watch_scalable_topics_update::Event;
use strobe_wire::proto::{self, ServerError};
use tracing::{Instrument, warn};

use super::lookup::topics_hash;
use super::scalable::{claim, sender};
use super::{Outcome, ServerCnx};
use crate::security::Operation;

/// Most namespace watches one connection may hold.
const MAX_WATCHES: usize = 64;

/// How long changes gather before a diff goes out (Pulsar's window).
const COALESCE: Duration = Duration::from_millis(50);

fn update(watch_id: u64, event: Option<Event>) -> Command {
    Command::WatchScalableTopicsUpdate(proto::CommandWatchScalableTopicsUpdate {
        watch_id,
        event,
        error: None,
        message: None,
    })
}

fn refusal(watch_id: u64, code: ServerError, message: String) -> Command {
    Command::WatchScalableTopicsUpdate(proto::CommandWatchScalableTopicsUpdate {
        watch_id,
        event: None,
        error: Some(code as i32),
        message: Some(message),
    })
}

/// The topics of `all` (local name → properties) in `ns` that every filter matches.
fn matching(
    ns: &str,
    all: &BTreeMap<String, BTreeMap<String, String>>,
    filters: &[(String, String)],
) -> BTreeSet<String> {
    all.iter()
        .filter(|(_, props)| filters.iter().all(|(k, v)| props.get(k) == Some(v)))
        .map(|(local, _)| format!("topic://{ns}/{local}"))
        .collect()
}

impl ServerCnx {
    pub(super) fn watch_scalable_topics(
        &mut self,
        c: proto::CommandWatchScalableTopics,
    ) -> Outcome {
        let watch_id = c.watch_id;
        if !self.service.config.scalable_topics_enabled {
            return Outcome::Reply(refusal(
                watch_id,
                ServerError::NotAllowedError,
                "scalable topics are disabled on this broker (scalable_topics_enabled)".into(),
            ));
        }
        let ns = c.namespace.clone();
        if ns.split('/').count() != 2 || ns.split('/').any(str::is_empty) {
            return Outcome::Reply(refusal(
                watch_id,
                ServerError::InvalidTopicName,
                format!("namespace {ns:?}: expected <tenant>/<namespace>"),
            ));
        }
        let Some(cancel) = claim(&mut self.scalable_watches, watch_id, MAX_WATCHES) else {
            return Outcome::Reply(refusal(
                watch_id,
                ServerError::NotAllowedError,
                format!("at most {MAX_WATCHES} scalable-topic watches per connection"),
            ));
        };
        let filters: Vec<(String, String)> = c
            .property_filters
            .into_iter()
            .map(|kv| (kv.key, kv.value))
            .collect();
        let (service, tx) = (self.service.clone(), self.tx.clone());
        let role = self.role().map(str::to_owned);
        let span = tracing::info_span!("scalable_topics_watch", watch_id, namespace = %ns);
        tokio::spawn(
            async move {
                let _ended = cancel.clone().drop_guard();
                let send = sender(&tx);
                if !service.namespace_exists(&ns) {
                    send(refusal(
                        watch_id,
                        ServerError::TopicNotFound,
                        format!("namespace {ns} does not exist"),
                    ))
                    .await;
                    return;
                }
                if let Err(e) = service
                    .authorize(role.as_deref(), Operation::ListTopics(&ns))
                    .await
                {
                    send(refusal(watch_id, e.server_error(), e.to_string())).await;
                    return;
                }
                let (mut all, mut watch) = match service.resources.watch_scalable_topics(&ns).await
                {
                    Ok(w) => w,
                    Err(e) => {
                        send(refusal(watch_id, ServerError::MetadataError, e.to_string())).await;
                        return;
                    }
                };
                let mut shown = matching(&ns, &all, &filters);
                let names: Vec<String> = shown.iter().cloned().collect();
                if c.current_hash.as_deref() != Some(topics_hash(&names).as_str()) {
                    let snapshot = Event::Snapshot(proto::ScalableTopicsSnapshot { topics: names });
                    if !send(update(watch_id, Some(snapshot))).await {
                        return;
                    }
                }
                loop {
                    let first = tokio::select! {
                        _ = cancel.cancelled() => return,
                        b = watch.next() => b,
                    };
                    let mut batches = vec![first];
                    let window = tokio::time::sleep(COALESCE);
                    tokio::pin!(window);
                    loop {
                        tokio::select! {
                            _ = &mut window => break,
                            b = watch.next() => {
                                let end = b.is_none();
                                batches.push(b);
                                if end {
                                    break;
                                }
                            }
                        }
                    }
                    for b in batches {
                        match b {
                            Some(Ok(changes)) => {
                                for ch in changes {
                                    match ch {
                                        TopicsChange::Put(local, props) => {
                                            all.insert(local, props);
                                        }
                                        TopicsChange::Deleted(local) => {
                                            all.remove(&local);
                                        }
                                        TopicsChange::Reset(now) => all = now,
                                    }
                                }
                            }
                            Some(Err(e)) => {
                                warn!(error = %e, "the namespace watch failed; it ends");
                                send(refusal(
                                    watch_id,
                                    ServerError::ServiceNotReady,
                                    e.to_string(),
                                ))
                                .await;
                                return;
                            }
                            None => return,
                        }
                    }
                    let now = matching(&ns, &all, &filters);
                    if now == shown {
                        continue;
                    }
                    let diff = proto::ScalableTopicsDiff {
                        removed: shown.difference(&now).cloned().collect(),
                        added: now.difference(&shown).cloned().collect(),
                    };
                    shown = now;
                    if !send(update(watch_id, Some(Event::Diff(diff)))).await {
                        return;
                    }
                }
            }
            .instrument(span),
        );
        Outcome::Nothing
    }

    pub(super) fn watch_scalable_topics_close(
        &mut self,
        c: proto::CommandWatchScalableTopicsClose,
    ) -> Outcome {
        if let Some(w) = self.scalable_watches.remove(&c.watch_id) {
            w.cancel();
        }
        Outcome::Nothing
    }
}
