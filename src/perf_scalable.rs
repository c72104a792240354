//! `strobe perf produce --scalable`: a V5 producer (strobe-client's) on a
//! `topic://` at a fixed rate with keyed messages, and optionally the topic
//! resized through the admin API every `--resize-interval-ms` (a split of
//! its first active segment, then the merge of the two halves, and so on).
//! For each resize it measures the pause producers see (the widest gap
//! between consecutive receipts in the two seconds after the admin call)
//! and the time from the admin call to the new layout at a watching client.
//!
//! `strobe perf consume --scalable` reads the topic with the V5 queue
//! consumer (Shared on every segment, following the DAG) and reports the
//! rate and the end-to-end latency (the producer's send time is in the
//! payload's first 8 bytes).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use strobe_client::{Client, ProducerMessage};

/// What `strobe perf produce --scalable` runs.
#[derive(Debug, Clone)]
pub struct ScalableRun {
    pub url: String,
    pub topic: String,
    pub rate: f64,
    pub size: usize,
    pub keys: u64,
    pub duration: Duration,
    pub batch: Option<(Duration, u32, usize)>,
    pub max_pending: usize,
    pub admin_url: String,
    pub resize_every: Option<Duration>,
    /// From this time on, this rate.
    pub step: Option<(f64, Duration)>,
    /// From this time on, no sends (the layout is still watched).
    pub idle_after: Option<Duration>,
    /// At this time, migrate the topic (a `persistent://` one, written
    /// through its synthetic layout: PIP-475), measuring the pause.
    pub migrate_after: Option<Duration>,
    pub json: bool,
}

fn wall_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds")
}

/// `POST` to the admin API; the answer's body.
async fn post_bytes(url: &str) -> anyhow::Result<Bytes> {
    let client = HttpClient::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = hyper::Request::post(url).body(Full::new(Bytes::new()))?;
    let answer = client
        .request(req)
        .await
        .with_context(|| format!("POST {url}"))?;
    let status = answer.status();
    let body = answer.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        bail!("POST {url}: {status}: {}", String::from_utf8_lossy(&body));
    }
    Ok(body)
}

/// `POST` to the admin API; the answer's JSON.
async fn post(url: &str) -> anyhow::Result<serde_json::Value> {
    Ok(serde_json::from_slice(&post_bytes(url).await?)?)
}

/// The `topic://` name `topic` means (a bare name is in public/default),
/// and a client of `url`.
async fn connect(url: &str, topic: &str) -> anyhow::Result<(String, Client)> {
    let topic = if topic.contains("://") {
        topic.to_owned()
    } else {
        format!("topic://public/default/{topic}")
    };
    let client = Client::builder(url)
        .build()
        .await
        .with_context(|| format!("connecting to {url}"))?;
    Ok((topic, client))
}

pub async fn produce(r: ScalableRun) -> anyhow::Result<()> {
    let (topic, client) = connect(&r.url, &r.topic).await?;
    let mut b = client
        .scalable_producer(&topic)
        .name("perf-v5")
        .max_pending_messages(r.max_pending);
    b = match r.batch {
        Some((d, n, bytes)) => b.batching(d, n, bytes),
        None => b.no_batching(),
    };
    let producer = Arc::new(
        b.create()
            .await
            .with_context(|| format!("producer on {topic}"))?,
    );
    let mut watch = client.watch_scalable_topic(&topic, false).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let started = Instant::now();
    let sender = {
        let (producer, stop, r) = (producer.clone(), stop.clone(), r.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let (mut owed, mut n) = (0f64, 0u64);
            let mut payload = vec![b'x'; r.size.max(8)];
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let now = started.elapsed();
                if r.idle_after.is_some_and(|t| now >= t) {
                    break;
                }
                let rate = match r.step {
                    Some((rate, at)) if now >= at => rate,
                    _ => r.rate,
                };
                owed += rate / 1000.0;
                while owed >= 1.0 {
                    owed -= 1.0;
                    // The send time, for `consume --scalable`'s end-to-end latency.
                    payload[..8].copy_from_slice(&wall_nanos().to_be_bytes());
                    let msg = ProducerMessage::new(payload.clone())
                        .with_key(format!("key-{}", n % r.keys.max(1)));
                    n += 1;
                    match producer.send(msg).await {
                        Ok(f) => {
                            let _ = tx.send((Instant::now(), f));
                        }
                        Err(e) => return Err(anyhow::anyhow!(e)),
                    }
                }
            }
            Ok(n)
        })
    };
    let step_at = r.step.map(|(_, at)| started + at);
    let collector = tokio::spawn(async move {
        let mut at = Vec::new();
        let (mut latency, mut after_step) = (hist(), hist());
        let mut errors = 0u64;
        while let Some((sent, f)) = rx.recv().await {
            match f.await {
                Ok(_) => {
                    let now = Instant::now();
                    let us = now.duration_since(sent).as_micros() as u64;
                    latency.saturating_record(us);
                    if step_at.is_some_and(|s| sent >= s) {
                        after_step.saturating_record(us);
                    }
                    at.push(now);
                }
                Err(_) => errors += 1,
            }
        }
        (at, latency, after_step, errors)
    });

    let mut resizes: Vec<(Instant, Duration)> = Vec::new();
    let (t, ns, name) = {
        let rest = topic
            .trim_start_matches("topic://")
            .trim_start_matches("persistent://");
        let mut p = rest.splitn(3, '/');
        (
            p.next().unwrap_or_default().to_owned(),
            p.next().unwrap_or_default().to_owned(),
            p.next().unwrap_or_default().to_owned(),
        )
    };
    let base = format!(
        "{}/admin/v2/scalable/{t}/{ns}/{name}",
        r.admin_url.trim_end_matches('/')
    );
    // The active segments over time, as the layout changes (autoscaling).
    let mut timeline: Vec<(f64, usize, u64)> =
        vec![(0.0, watch.current().active().len(), watch.current().epoch)];
    let mut migrate_at = r.migrate_after;
    while started.elapsed() < r.duration {
        if migrate_at.is_some_and(|at| started.elapsed() >= at) {
            migrate_at = None;
            let before = watch.current();
            let t0 = Instant::now();
            post_bytes(&format!("{base}/migrate")).await?;
            while watch.current().epoch <= before.epoch
                || !watch.current().segments.values().any(|s| !s.legacy)
            {
                tokio::time::timeout(Duration::from_secs(10), watch.changed())
                    .await
                    .context("no layout update within 10 s of the migration")??;
            }
            resizes.push((t0, t0.elapsed()));
            let dag = watch.current();
            timeline.push((
                started.elapsed().as_secs_f64(),
                dag.active().len(),
                dag.epoch,
            ));
            continue;
        }
        let Some(every) = r.resize_every else {
            let mut left = r.duration.saturating_sub(started.elapsed());
            if let Some(at) = migrate_at {
                left = left.min(at.saturating_sub(started.elapsed()));
            }
            match tokio::time::timeout(left, watch.changed()).await {
                Ok(Ok(dag)) => {
                    if timeline.last().is_none_or(|(_, _, e)| *e != dag.epoch) {
                        timeline.push((
                            started.elapsed().as_secs_f64(),
                            dag.active().len(),
                            dag.epoch,
                        ))
                    }
                }
                Ok(Err(e)) => bail!("the layout watch ended: {e}"),
                // The run's end, or the migration's time.
                Err(_) => {}
            }
            continue;
        };
        tokio::time::sleep(every.min(r.duration.saturating_sub(started.elapsed()))).await;
        if started.elapsed() >= r.duration {
            break;
        }
        let dag = watch.current();
        let active = dag.active();
        let path = match active.as_slice() {
            [only] => format!("{base}/split/{}", only.id),
            [a, b, ..] => format!("{base}/merge/{}/{}", a.id, b.id),
            [] => bail!("{topic} has no active segment"),
        };
        let t0 = Instant::now();
        post(&path).await?;
        loop {
            let now = watch.current();
            if now.epoch > dag.epoch {
                break;
            }
            tokio::time::timeout(Duration::from_secs(10), watch.changed())
                .await
                .context("no layout update within 10 s of a resize")??;
        }
        resizes.push((t0, t0.elapsed()));
    }
    stop.store(true, Ordering::Relaxed);
    let sent = sender.await??;
    producer.flush().await?;
    drop(producer);
    let (at, latency, after_step, errors) = collector.await?;
    let elapsed = started.elapsed().as_secs_f64();

    let mut gaps = hist();
    for w in at.windows(2) {
        gaps.saturating_record(w[1].duration_since(w[0]).as_micros() as u64);
    }
    let mut pause = hist();
    let mut layout = hist();
    for (t0, to_layout) in &resizes {
        let window = *t0 + Duration::from_secs(2);
        let widest = at
            .windows(2)
            .filter(|w| w[1] >= *t0 && w[0] <= window)
            .map(|w| w[1].duration_since(w[0]).as_micros() as u64)
            .max()
            .unwrap_or(0);
        pause.saturating_record(widest.max(1));
        layout.saturating_record((to_layout.as_micros() as u64).max(1));
    }
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let summary = serde_json::json!({
        "mode": "produce-scalable",
        "topic": topic,
        "messages": sent,
        "errors": errors,
        "rate_msg_s": sent as f64 / elapsed,
        "publish_latency_ms": {"p50": ms(&latency, 0.5), "p99": ms(&latency, 0.99), "max": ms(&latency, 1.0)},
        "receipt_gap_ms": {"p50": ms(&gaps, 0.5), "p99": ms(&gaps, 0.99), "max": ms(&gaps, 1.0)},
        "resizes": resizes.len(),
        "publish_latency_after_step_ms": r.step.map(|_| serde_json::json!({"p50": ms(&after_step, 0.5), "p99": ms(&after_step, 0.99), "max": ms(&after_step, 1.0)})),
        "active_segments_timeline": timeline.iter().map(|(t, n, e)| serde_json::json!({"at_s": (t * 10.0).round() / 10.0, "active": n, "epoch": e})).collect::<Vec<_>>(),
        "resize_pause_ms": {"p50": ms(&pause, 0.5), "p99": ms(&pause, 0.99), "max": ms(&pause, 1.0)},
        "admin_call_to_layout_ms": {"p50": ms(&layout, 0.5), "p99": ms(&layout, 0.99), "max": ms(&layout, 1.0)},
    });
    if r.json {
        println!("{summary}");
    } else {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    }
    if errors > 0 {
        bail!("{errors} sends failed");
    }
    Ok(())
}

/// What `strobe perf consume --scalable` runs.
#[derive(Debug, Clone)]
pub struct ScalableConsume {
    pub url: String,
    pub topic: String,
    pub subscription: String,
    pub duration: Duration,
    pub receiver_queue: u32,
    pub json: bool,
}

pub async fn consume(r: ScalableConsume) -> anyhow::Result<()> {
    let (topic, client) = connect(&r.url, &r.topic).await?;
    let mut consumer = client
        .scalable_queue_consumer(&topic, &r.subscription)
        .receiver_queue_size(r.receiver_queue)
        .subscribe()
        .await
        .with_context(|| format!("subscribing to {topic}"))?;
    let started = Instant::now();
    let mut latency = hist();
    let (mut n, mut segments) = (0u64, std::collections::BTreeSet::new());
    while started.elapsed() < r.duration {
        let Some(m) = consumer.recv_timeout(Duration::from_millis(200)).await? else {
            continue;
        };
        let now = wall_nanos();
        if let Some(sent) = m.message.payload.get(..8) {
            let sent = u64::from_be_bytes(sent.try_into().expect("8 bytes"));
            if sent > 0 && now >= sent && now - sent < 86_400_000_000_000 {
                latency.saturating_record((now - sent) / 1000);
            }
        }
        segments.insert(m.segment_id);
        consumer.ack(&m)?;
        n += 1;
    }
    let ms = |q: f64| latency.value_at_quantile(q) as f64 / 1000.0;
    let summary = serde_json::json!({
        "mode": "consume-scalable",
        "topic": topic,
        "messages": n,
        "rate_msg_s": n as f64 / started.elapsed().as_secs_f64(),
        "segments_read": segments.len(),
        "e2e_latency_ms": {"p50": ms(0.5), "p99": ms(0.99), "max": ms(1.0)},
    });
    if r.json {
        println!("{summary}");
    } else {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    }
    Ok(())
}
