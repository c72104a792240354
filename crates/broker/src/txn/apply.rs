//! Transactions at work on this broker: starting the coordinator partitions
//! it campaigns for and the participants' loop, and applying each decided
//! outcome to the loaded topics that hold the transaction.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use strobe_metadata::SessionOptions;
use strobe_metadata::tc::{TcLeader, TcListener, TcMember, TcMemberConfig};
use strobe_model::{TopicName, TxnId};
use strobe_txn::participant::{self, DecisionEvent, DecisionWatch};
use strobe_txn::paths::Participant;
use strobe_txn::{CoordinatorConfig, LocalParticipants, TransactionCoordinator, TxnState};
use tracing::{debug, warn};

use super::context::{TxnContext, TxnService};
use super::push::OutcomePush;
use crate::BrokerError;
use crate::service::BrokerService;

/// Outcomes being applied at once.
const APPLYING: usize = 256;

/// How often every held transaction's header is checked even without an event (a missed event
/// costs at most this much delay).
const RECONCILE_EVERY: Duration = Duration::from_secs(10);

impl TxnService {
    /// Starts the decision watch and the loop that applies outcomes to `service`'s topics.
    pub async fn start(
        service: &Arc<BrokerService>,
        ctx: Arc<TxnContext>,
        coordinator: Arc<TransactionCoordinator>,
    ) -> Result<Arc<TxnService>, BrokerError> {
        let mut rx = ctx
            .receiver
            .lock()
            .take()
            .ok_or_else(|| BrokerError::Config("transactions started twice".into()))?;
        let watch = DecisionWatch::start(ctx.store.clone(), ctx.events.clone())
            .await
            .map_err(BrokerError::Txn)?;
        let weak: Weak<BrokerService> = Arc::downgrade(service);
        let loop_ctx = ctx.clone();
        // Outcomes are applied concurrently (each waits for a marker's fsync and a metadata
        // write; one at a time would cap every coordinator at one commit per round trip), at
        // most APPLYING at once.
        let permits = Arc::new(tokio::sync::Semaphore::new(APPLYING));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RECONCILE_EVERY);
            tick.tick().await;
            loop {
                let ev = tokio::select! {
                    ev = rx.recv() => match ev {
                        Some(ev) => ev,
                        None => return,
                    },
                    _ = tick.tick() => DecisionEvent::Resync,
                };
                let Some(service) = weak.upgrade() else {
                    return;
                };
                type Todo = (TxnId, Option<(TxnState, Vec<Participant>)>);
                let todo: Vec<Todo> = match ev {
                    // Told directly by this broker's coordinator already.
                    DecisionEvent::Decided(t, ..) if loop_ctx.was_pushed(t) => Vec::new(),
                    DecisionEvent::Decided(t, state, who) => vec![(t, Some((state, who)))],
                    DecisionEvent::Check(t) => vec![(t, None)],
                    DecisionEvent::Resync => {
                        loop_ctx.all().into_iter().map(|t| (t, None)).collect()
                    }
                };
                for (t, decided) in todo {
                    let Ok(permit) = permits.clone().acquire_owned().await else {
                        return;
                    };
                    let (service, ctx) = (service.clone(), loop_ctx.clone());
                    tokio::spawn(async move {
                        match decided {
                            Some((state, who)) => {
                                apply(&service, &ctx, t, state, Some(who), false).await;
                            }
                            None => reconcile(&service, &ctx, t).await,
                        }
                        drop(permit);
                    });
                }
            }
        });
        Ok(Arc::new(TxnService {
            ctx,
            coordinator,
            answer_before_written: service.cluster().is_none(),
            _watch: watch,
        }))
    }
}

/// Starts transactions on `service` (`transaction_coordinator_enabled`): campaigns for the
/// coordinator partitions, starts the coordinator and the participants' loop. A standalone
/// broker waits (briefly) until it leads every partition, so its first clients find them.
pub async fn start(service: &Arc<BrokerService>) -> Result<(), BrokerError> {
    let cfg = &service.config;
    if !cfg.transaction_coordinator_enabled {
        return Ok(());
    }
    let store = service.metadata().clone();
    let broker_id = match service.cluster() {
        Some(c) => c.broker_id().to_string(),
        None => format!("{}:{}", cfg.advertised_address, service.broker_port),
    };
    let member = TcMember::start(
        store.clone(),
        TcMemberConfig {
            leader: TcLeader {
                broker_id: broker_id.clone(),
                broker_service_url: service.service_url(),
                broker_service_url_tls: service.service_url_tls(),
                listeners: cfg
                    .listeners()
                    .map_err(|e| BrokerError::Config(e.to_string()))?
                    .into_iter()
                    .map(|l| TcListener {
                        name: l.name,
                        broker_service_url: l.broker_service_url,
                        broker_service_url_tls: l.broker_service_url_tls,
                    })
                    .collect(),
            },
            parallelism: cfg.transaction_coordinator_parallelism,
            session: SessionOptions::with_ttl(Duration::from_secs(
                cfg.metadata_session_timeout_secs.max(3),
            )),
            campaign: cfg
                .coordinator_partitions()
                .map_err(|e| BrokerError::Config(e.to_string()))?,
        },
    )
    .await?;
    if service.cluster().is_none()
        && member
            .view()
            .wait_for(Duration::from_secs(10), |a| a.is_complete())
            .await
            .is_err()
    {
        warn!("not every transaction coordinator partition has a leader yet");
    }
    let coordinator = TransactionCoordinator::start(
        store.clone(),
        member,
        CoordinatorConfig {
            broker_id,
            default_ttl_ms: cfg.transaction_default_timeout_ms,
            max_ttl_ms: cfg.transaction_max_timeout_ms,
            end_wait: Duration::from_millis(cfg.transaction_end_wait_ms),
            retention: Duration::from_secs(cfg.transaction_retention_secs),
            ..CoordinatorConfig::default()
        },
    );
    let ctx = TxnContext::new(store);
    coordinator.set_local(Arc::new(Local {
        service: Arc::downgrade(service),
        ctx: ctx.clone(),
    }));
    let txn = TxnService::start(service, ctx, coordinator).await?;
    service.set_txn(txn);
    Ok(())
}

/// Checks `t`'s header and applies a decided outcome.
pub(crate) async fn reconcile(service: &Arc<BrokerService>, ctx: &Arc<TxnContext>, t: TxnId) {
    match participant::decision(&*ctx.store, t).await {
        Ok(Some(TxnState::Open)) => {}
        Ok(Some(state)) => {
            apply(service, ctx, t, state, None, false).await;
        }
        // No header: it never existed (the client sent with an id no coordinator gave out), or
        // it was collected after every registered participant applied it. Either way nothing
        // will ever commit it here.
        // Unless this broker's coordinator is still writing it (standalone, see
        // `TxnService::add_partitions`): then the next check decides.
        Ok(None) if ctx.registering(t) => {}
        Ok(None) => {
            apply(service, ctx, t, TxnState::Aborted, None, false).await;
        }
        Err(e) => debug!(txn_id = %t, error = %e, "could not read the transaction's header"),
    }
}

/// Applies `t`'s outcome to every loaded topic holding it or registered as its participant
/// (`listed`: the participants the header names; `None`: read the ones left from the store).
/// Returns the participants that applied it.
pub(super) async fn apply(
    service: &Arc<BrokerService>,
    ctx: &Arc<TxnContext>,
    t: TxnId,
    state: TxnState,
    listed: Option<Vec<Participant>>,
    told_directly: bool,
) -> Vec<Participant> {
    let commit = state == TxnState::Committed;
    let mut names: HashMap<String, Vec<Participant>> = ctx
        .holders_of(t)
        .into_iter()
        .map(|n| (n, Vec::new()))
        .collect();
    // Participants registered with the coordinator that hold nothing in memory (a send that
    // failed, an ack never made) still have to say they are done, or the header is never
    // collected: the loaded ones do it now.
    let registered = match listed {
        Some(who) => who,
        None => match ctx
            .store
            .list_keys(&strobe_txn::paths::part_prefix(t))
            .await
        {
            Ok(keys) => keys
                .iter()
                .filter_map(|k| k.rsplit('/').next().and_then(Participant::parse))
                .collect(),
            Err(e) => {
                debug!(txn_id = %t, error = %e, "listing the participants failed");
                Vec::new()
            }
        },
    };
    for p in registered {
        names.entry(p.topic().to_owned()).or_default().push(p);
    }
    let mut applied = Vec::new();
    for (name, listed) in names {
        let Ok(topic_name) = TopicName::parse(&name) else {
            ctx.release(t, &name);
            continue;
        };
        let Some(topic) = service.loaded_topic(&topic_name) else {
            // Unloaded: whoever loads it next replays its state and reconciles.
            ctx.release(t, &name);
            continue;
        };
        match topic.end_txn(ctx, t, commit, &listed, told_directly).await {
            Ok(()) => {
                // Only subscriptions the topic has applied it (one it does not have yet, or
                // no longer, applied nothing).
                let subs: std::collections::HashSet<String> =
                    topic.subscriptions().into_iter().map(|s| s.name).collect();
                applied.extend(listed.into_iter().filter(|p| match p {
                    Participant::Subscription { subscription, .. } => subs.contains(subscription),
                    Participant::Partition(_) => true,
                }));
            }
            Err(e) => {
                warn!(topic = %name, txn_id = %t, error = %e, "applying the outcome failed; retried on the next check")
            }
        }
    }
    applied
}

/// This broker's participants as its coordinator tells them outcomes: directly, and noted so
/// that the decision watch's report of the same outcome is not applied a second time.
pub(crate) struct Local {
    pub(crate) service: Weak<BrokerService>,
    pub(crate) ctx: Arc<TxnContext>,
}

#[async_trait::async_trait]
impl LocalParticipants for Local {
    async fn apply(&self, t: TxnId, state: TxnState, who: Vec<Participant>) -> Vec<Participant> {
        let Some(service) = self.service.upgrade() else {
            return Vec::new();
        };
        self.ctx.pushed(t);
        apply(&service, &self.ctx, t, state, Some(who), true).await
    }

    fn deciding(&self, t: TxnId, here: bool) {
        if here {
            self.ctx.pushed(t);
        } else {
            self.ctx.unpushed(t);
        }
    }

    async fn push(&self, t: TxnId, state: TxnState, who: Vec<Participant>) -> Vec<Participant> {
        let Some(service) = self.service.upgrade() else {
            return Vec::new();
        };
        super::push::push(&service, t, state, who).await
    }
}

/// Applies a pushed outcome to the participants loaded here; answers the ones that applied it
/// durably, as [`OutcomePush::participants`] names them.
pub async fn apply_pushed(
    service: &Arc<BrokerService>,
    push: OutcomePush,
) -> Result<Vec<String>, BrokerError> {
    let txn = service.txn().ok_or_else(|| {
        BrokerError::NotAllowed("transactions are not enabled on this broker".into())
    })?;
    let t = TxnId {
        most_sig_bits: push.txn_id_most_bits,
        least_sig_bits: push.txn_id_least_bits,
    };
    let who: Vec<Participant> = push
        .participants
        .iter()
        .map(|s| {
            Participant::parse(s)
                .ok_or_else(|| BrokerError::InvalidTopicName(format!("not a participant: {s}")))
        })
        .collect::<Result<_, _>>()?;
    let state = match push.committed {
        true => TxnState::Committed,
        false => TxnState::Aborted,
    };
    txn.ctx
        .pushed_in
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // Noted as told directly: the decision watch's report of it is not applied again.
    txn.ctx.pushed(t);
    let done = apply(service, &txn.ctx, t, state, Some(who), true).await;
    Ok(done.iter().map(Participant::segment).collect())
}
