//! `strobe perf`: a load generator in the spirit of `pulsar-perf`, built on
//! `strobe-client`. It speaks only the Pulsar binary protocol, so it works
//! against any Pulsar-protocol broker.
//!
//! - `produce`: producers publish; latency is publish → receipt.
//! - `consume`: consumers read (and ack); latency is end to end when the
//!   payload carries perf's timestamp, else from the broker's publish time.
//! - `e2e`: both in one process on one clock: publish and end-to-end latency.
//! - `lookup`: topic lookups a second (see `perf/lookup.rs`); `txn`: transactions.
//!
//! Every payload starts with the sender's wall clock in nanoseconds (8 bytes),
//! so a `consume` in another process still measures end to end. Histograms
//! are HDR in microseconds. A status line goes out every second; the final
//! summary is human-readable, or one JSON object on stdout with `--json`
//! (status lines then go to stderr). On a terminal a progress line is redrawn
//! in place.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use hdrhistogram::Histogram;
use strobe_client::{Compression, InitialPosition, SubType};

mod lookup;
mod setup;
mod stats;

use stats::Stats;

#[derive(Debug, Args)]
pub struct PerfArgs {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Publish messages and measure publish latency.
    Produce(Opts),
    /// Consume messages and measure end-to-end latency.
    Consume(Opts),
    /// Publish and consume in one process: publish and end-to-end latency.
    E2e(Opts),
    /// Transactions per second and their latency (NEW_TXN, sends, COMMIT).
    Txn(crate::perf_txn::TxnOpts),
    /// Topic lookups per second and their latency (no producers).
    Lookup(lookup::LookupOpts),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SubKind {
    Exclusive,
    Shared,
    Failover,
    KeyShared,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Start {
    Latest,
    Earliest,
}

#[derive(Debug, Clone, Args)]
struct Opts {
    /// Service URL of any Pulsar-protocol broker.
    #[arg(short = 'u', long, default_value = "pulsar://127.0.0.1:6650")]
    url: String,
    /// Topic name (with -t N > 1: NAME-0 .. NAME-{N-1}).
    #[arg(long, default_value = "perf")]
    topic: String,
    /// Number of topics.
    #[arg(short = 't', long, default_value_t = 1)]
    topics: usize,
    /// Total publish rate in msg/s over all producers (0: as fast as possible).
    /// As pulsar-perf's rate limiter, sends are spaced evenly (one pacing
    /// thread for all producers, round robin), not released in bursts.
    #[arg(short = 'r', long, default_value_t = 0.0)]
    rate: f64,
    /// Message size in bytes (at least 8: the timestamp).
    #[arg(short = 's', long, default_value_t = 1024)]
    size: usize,
    /// Producers per topic.
    #[arg(short = 'p', long, default_value_t = 1)]
    producers: usize,
    /// Consumers per topic.
    #[arg(short = 'c', long, default_value_t = 1)]
    consumers: usize,
    /// Subscription type.
    #[arg(long = "sub-type", value_enum, default_value = "exclusive")]
    sub_type: SubKind,
    /// Subscription name.
    #[arg(long, default_value = "perf-sub")]
    subscription: String,
    /// Where a new subscription starts.
    #[arg(long, value_enum, default_value = "latest")]
    initial_position: Start,
    /// Run for this many seconds (0: until the message count).
    #[arg(short = 'd', long, default_value_t = 0.0)]
    duration: f64,
    /// Stop after this many messages in total (0: until the duration).
    #[arg(short = 'm', long, default_value_t = 0)]
    messages: u64,
    /// Batching delay in milliseconds (0: batching off).
    #[arg(long = "batch-delay-ms", default_value_t = 1.0)]
    batch_delay_ms: f64,
    /// Messages per batch at most.
    #[arg(long = "batch-max-messages", default_value_t = 1000)]
    batch_max_messages: u32,
    /// Bytes per batch at most.
    #[arg(long = "batch-max-bytes", default_value_t = 128 * 1024)]
    batch_max_bytes: usize,
    /// Pending (unacknowledged) messages per producer.
    #[arg(long = "max-pending", default_value_t = 1000)]
    max_pending: usize,
    /// none, lz4, zlib, zstd or snappy.
    #[arg(long, default_value = "none")]
    compression: String,
    /// Consumer receiver queue size (permits).
    #[arg(long = "receiver-queue", default_value_t = 1000)]
    receiver_queue: u32,
    /// Print the final summary as one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for consumers to catch up after producing stops (e2e).
    #[arg(long = "drain-timeout", default_value_t = 10.0)]
    drain_timeout: f64,
    /// Threads running the client's connections, producers and consumers
    /// (0: one per core). 1 as pulsar-perf's default: on few cores, more
    /// threads wake each other to share the work, which costs the client
    /// more CPU than it saves (docs/performance.md).
    #[arg(long = "num-io-threads", alias = "io-threads", default_value_t = 1)]
    io_threads: usize,
    /// Client connections (each a client of its own); topic i uses connection i mod N.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Producers and consumers being created at once (the setup of many topics).
    #[arg(long = "setup-concurrency", default_value_t = 256)]
    setup_concurrency: usize,
    /// A scalable topic (topic://): produce with the V5 producer, consume
    /// with the V5 queue consumer (see src/perf_scalable.rs).
    #[arg(long)]
    scalable: bool,
    /// Distinct message keys (--scalable).
    #[arg(long, default_value_t = 1000)]
    keys: u64,
    /// The admin API the resizes go to (--scalable).
    #[arg(long = "admin-url", default_value = "http://127.0.0.1:8080")]
    admin_url: String,
    /// Split or merge the topic this often, measuring each one's pause
    /// (--scalable; 0: never).
    #[arg(long = "resize-interval-ms", default_value_t = 0)]
    resize_interval_ms: u64,
    /// A load step (--scalable): after --step-after seconds, send at this
    /// rate instead, and report the layout's active segments over time
    /// (autoscaling at work) and the publish latency after the step.
    #[arg(long = "step-rate", default_value_t = 0.0)]
    step_rate: f64,
    #[arg(long = "step-after", default_value_t = 0.0)]
    step_after: f64,
    /// Stop sending this many seconds into the run and keep watching the
    /// layout until --duration (--scalable: the merges once a load stops).
    #[arg(long = "idle-after", default_value_t = 0.0)]
    idle_after: f64,
    /// Migrate the topic (a persistent:// one, PIP-475) this many seconds
    /// into the run, and report the pause as a resize's (--scalable).
    #[arg(long = "migrate-after", default_value_t = 0.0)]
    migrate_after: f64,
}

pub fn run(args: PerfArgs) -> anyhow::Result<()> {
    let (name, opts, produce, consume) = match args.mode {
        Mode::Txn(o) => return crate::perf_txn::run(o),
        Mode::Lookup(o) => return lookup::run(o),
        Mode::Produce(o) => ("produce", o, true, false),
        Mode::Consume(o) => ("consume", o, false, true),
        Mode::E2e(o) => ("e2e", o, true, true),
    };
    let rt = crate::runtime::runtime(opts.io_threads, "perf")?;
    if opts.scalable && consume {
        anyhow::ensure!(!produce, "--scalable runs `produce` and `consume` apart");
        anyhow::ensure!(opts.duration > 0.0, "--scalable needs -d <seconds>");
        return rt.block_on(crate::perf_scalable::consume(
            crate::perf_scalable::ScalableConsume {
                url: opts.url,
                topic: opts.topic,
                subscription: opts.subscription,
                duration: Duration::from_secs_f64(opts.duration),
                receiver_queue: opts.receiver_queue,
                json: opts.json,
            },
        ));
    }
    if opts.scalable {
        anyhow::ensure!(opts.duration > 0.0, "--scalable needs -d <seconds>");
        let batch = (opts.batch_delay_ms > 0.0).then(|| {
            (
                Duration::from_secs_f64(opts.batch_delay_ms / 1000.0),
                opts.batch_max_messages,
                opts.batch_max_bytes,
            )
        });
        return rt.block_on(crate::perf_scalable::produce(
            crate::perf_scalable::ScalableRun {
                url: opts.url,
                topic: opts.topic,
                rate: if opts.rate > 0.0 { opts.rate } else { 10_000.0 },
                size: opts.size,
                keys: opts.keys,
                duration: Duration::from_secs_f64(opts.duration),
                batch,
                max_pending: opts.max_pending.max(1),
                admin_url: opts.admin_url,
                resize_every: (opts.resize_interval_ms > 0)
                    .then(|| Duration::from_millis(opts.resize_interval_ms)),
                step: (opts.step_rate > 0.0)
                    .then(|| (opts.step_rate, Duration::from_secs_f64(opts.step_after))),
                idle_after: (opts.idle_after > 0.0)
                    .then(|| Duration::from_secs_f64(opts.idle_after)),
                migrate_after: (opts.migrate_after > 0.0)
                    .then(|| Duration::from_secs_f64(opts.migrate_after)),
                json: opts.json,
            },
        ));
    }
    rt.block_on(run_async(name, opts, produce, consume))
}

fn cpu_seconds_self() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / 100.0
}

async fn run_async(mode: &str, o: Opts, produce: bool, consume: bool) -> anyhow::Result<()> {
    anyhow::ensure!(
        o.size >= 8,
        "-s must be at least 8 (the payload carries a timestamp)"
    );
    let compression = Compression::parse(&o.compression)
        .with_context(|| format!("unknown compression {:?}", o.compression))?;
    let clients = setup::connect(&o.url, o.connections).await?;
    let stats = Arc::new(Stats::new());
    let topics = setup::topic_names(&o.topic, o.topics);
    let setup_started = Instant::now();
    let setup_cpu0 = cpu_seconds_self();
    let so = setup::SetupOpts {
        sub_type: match o.sub_type {
            SubKind::Exclusive => SubType::Exclusive,
            SubKind::Shared => SubType::Shared,
            SubKind::Failover => SubType::Failover,
            SubKind::KeyShared => SubType::KeyShared,
        },
        initial: match o.initial_position {
            Start::Latest => InitialPosition::Latest,
            Start::Earliest => InitialPosition::Earliest,
        },
        subscription: o.subscription.clone(),
        receiver_queue: o.receiver_queue,
        consumers: o.consumers,
        producers: o.producers,
        batching: (o.batch_delay_ms > 0.0).then(|| {
            (
                Duration::from_secs_f64(o.batch_delay_ms / 1000.0),
                o.batch_max_messages,
                o.batch_max_bytes,
            )
        }),
        compression,
        max_pending: o.max_pending,
        size: o.size,
        paced: o.rate > 0.0,
        concurrency: o.setup_concurrency,
    };
    let consumer_tasks = if consume {
        setup::open_consumers(&clients, &topics, &so, &stats).await?
    } else {
        Vec::new()
    };
    let n_producers = if produce {
        topics.len() * o.producers.max(1)
    } else {
        0
    };
    let per_producer_count = if o.messages > 0 && n_producers > 0 {
        o.messages.div_ceil(n_producers as u64)
    } else {
        0
    };
    let (producer_tasks, gates) = if produce {
        setup::open_producers(&clients, &topics, &so, &stats, per_producer_count).await?
    } else {
        (Vec::new(), Vec::new())
    };
    let setup_s = setup_started.elapsed().as_secs_f64();
    // The client's own share of a setup (lookups, connections, a producer per topic), so
    // that a slow setup can be told from a slow broker.
    let setup_cpu = cpu_seconds_self() - setup_cpu0;
    if topics.len() > 1 {
        eprintln!(
            "{} producers and {} consumers on {} topics over {} connections ready in {setup_s:.1} s",
            producer_tasks.len(),
            consumer_tasks.len(),
            topics.len(),
            clients.len()
        );
    }
    if !gates.is_empty() {
        let rate = o.rate;
        let stats = stats.clone();
        std::thread::Builder::new()
            .name("perf-pacer".into())
            .spawn(move || pace(rate, &gates, &stats))
            .context("starting the pacing thread")?;
    }

    let started = Instant::now();
    let cpu0 = cpu_seconds_self();
    let json = o.json;
    let tty = std::io::stdout().is_terminal() && !json;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.tick().await;
    let mut last = (Instant::now(), 0u64, 0u64, 0u64, 0u64);
    let mut last_line = Instant::now();
    let deadline = (o.duration > 0.0).then(|| started + Duration::from_secs_f64(o.duration));
    let mut drain_started: Option<Instant> = None;
    let mut last_received = 0;
    let mut last_progress = Instant::now();
    loop {
        tick.tick().await;
        let now = Instant::now();
        let acked = stats.acked.load(Ordering::Relaxed);
        let received = stats.received.load(Ordering::Relaxed);
        // Stop conditions.
        let time_up = deadline.is_some_and(|d| now >= d);
        let producers_done = produce && producer_tasks.iter().all(|t| t.is_finished());
        if produce && (time_up || producers_done) {
            stats.stop_producing.store(true, Ordering::Relaxed);
        }
        let mut done = false;
        if produce && !consume {
            done = producers_done || (time_up && producer_tasks.iter().all(|t| t.is_finished()));
        }
        if consume && !produce {
            done = time_up || (o.messages > 0 && received >= o.messages);
        }
        if produce && consume && stats.stop_producing.load(Ordering::Relaxed) {
            let all_done = producer_tasks.iter().all(|t| t.is_finished());
            if all_done {
                let ds = *drain_started.get_or_insert(now);
                if received != last_received {
                    last_progress = now;
                }
                let caught_up = received >= stats.acked.load(Ordering::Relaxed);
                let stalled = now.duration_since(last_progress).as_secs_f64() > o.drain_timeout
                    || now.duration_since(ds).as_secs_f64() > o.drain_timeout * 3.0;
                done = caught_up || stalled;
            }
        }
        last_received = received;
        let since = now.duration_since(last_line);
        if since >= Duration::from_millis(990) || (done && since >= Duration::from_millis(300)) {
            let dt = now.duration_since(last.0).as_secs_f64().max(1e-9);
            let acked_bytes = stats.acked_bytes.load(Ordering::Relaxed);
            let received_bytes = stats.received_bytes.load(Ordering::Relaxed);
            let line = status_line(
                mode,
                now.duration_since(started).as_secs_f64(),
                produce.then(|| {
                    (
                        (acked - last.1) as f64 / dt,
                        (acked_bytes - last.2) as f64 / dt,
                    )
                }),
                consume.then(|| {
                    (
                        (received - last.3) as f64 / dt,
                        (received_bytes - last.4) as f64 / dt,
                    )
                }),
                &stats,
                (produce && consume).then(|| acked.saturating_sub(received)),
            );
            if tty {
                print!("\r\x1b[2K{line}\n");
            } else if json {
                eprintln!("{line}");
            } else {
                println!("{line}");
            }
            last = (now, acked, acked_bytes, received, received_bytes);
            last_line = now;
        }
        if tty {
            let frac = match (deadline, o.messages) {
                (Some(d), _) => {
                    now.duration_since(started).as_secs_f64()
                        / d.duration_since(started).as_secs_f64()
                }
                (None, m) if m > 0 => (if produce { acked } else { received }) as f64 / m as f64,
                _ => 0.0,
            }
            .clamp(0.0, 1.0);
            let width = 30;
            let filled = (frac * width as f64) as usize;
            print!(
                "\r\x1b[2K[{}{}] {:5.1}%  sent {}  received {}",
                "=".repeat(filled),
                " ".repeat(width - filled),
                frac * 100.0,
                acked,
                received
            );
            let _ = std::io::stdout().flush();
        }
        if done {
            break;
        }
    }
    stats.stop_producing.store(true, Ordering::Relaxed);
    for t in producer_tasks {
        let _ = t.await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    stats.stop_consuming.cancel();
    for t in consumer_tasks {
        let _ = t.await;
    }
    let cpu = cpu_seconds_self() - cpu0;
    if tty {
        println!();
    }
    summary(
        mode,
        &o,
        &stats,
        (elapsed, setup_s),
        (cpu, setup_cpu),
        produce,
        consume,
    );
    for c in clients {
        c.close().await;
    }
    Ok(())
}

/// The shortest sleep of the pacing thread (see [`pace`]).
const PACE_QUANTUM: Duration = Duration::from_micros(200);

/// Opens the producers' gates at `rate` messages per second in all, one at a
/// time and round robin, each at its due time (`start + k / rate`), as
/// pulsar-perf's rate limiter paces its sends; tokio's timer has 1 ms
/// resolution, which would release 10 messages at once at 10,000 msg/s and
/// make the broker and the client queue them behind each other. After an
/// oversleep every message due by then is released; above 5,000 msg/s a
/// wake-up releases those due in the last [`PACE_QUANTUM`]. Returns once producing
/// stops or every gate is closed (its producer finished).
fn pace(rate: f64, gates: &[Arc<tokio::sync::Semaphore>], stats: &Stats) {
    let start = Instant::now();
    let mut k: u64 = 0;
    // Whether every producer finished is looked at ten times a second: with
    // 100,000 gates a look costs more than the wake-up it rides on.
    let mut looked = Instant::now();
    loop {
        let all_closed = || gates.iter().all(|g| g.is_closed());
        let look = looked.elapsed() >= Duration::from_millis(100);
        if look {
            looked = Instant::now();
        }
        if stats.stop_producing.load(Ordering::Relaxed) || (look && all_closed()) {
            // Wakes the producers waiting for their next permit.
            for g in gates {
                g.close();
            }
            return;
        }
        // Sleeps at least PACE_QUANTUM: above 1/PACE_QUANTUM msg/s a wake-up
        // releases the few messages that fell due meanwhile (each wake-up of
        // this thread and of the runtime costs more CPU than the sends it
        // releases).
        let due = start + Duration::from_secs_f64(k as f64 / rate);
        let now = Instant::now();
        if due > now {
            std::thread::sleep((due - now).max(PACE_QUANTUM));
        }
        let target = (start.elapsed().as_secs_f64() * rate) as u64 + 1;
        // At most a second's worth at once (a stalled producer does not
        // build up an unbounded burst).
        let target = target.min(k + rate.ceil().max(1.0) as u64);
        while k < target {
            gates[(k % gates.len() as u64) as usize].add_permits(1);
            k += 1;
        }
    }
}

fn pcts(h: &Histogram<u64>) -> [f64; 6] {
    if h.is_empty() {
        return [0.0; 6];
    }
    let ms = |v: u64| v as f64 / 1000.0;
    [
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.95)),
        ms(h.value_at_quantile(0.99)),
        ms(h.value_at_quantile(0.999)),
        ms(h.max()),
        h.mean() / 1000.0,
    ]
}

fn fmt_lat(p: [f64; 6]) -> String {
    format!(
        "p50 {:.3} p95 {:.3} p99 {:.3} p99.9 {:.3} max {:.3} ms",
        p[0], p[1], p[2], p[3], p[4]
    )
}

fn status_line(
    mode: &str,
    t: f64,
    pubrate: Option<(f64, f64)>,
    recvrate: Option<(f64, f64)>,
    stats: &Stats,
    backlog: Option<u64>,
) -> String {
    let mut s = format!("[{mode} {t:6.1}s]");
    if let Some((m, b)) = pubrate {
        let mut g = stats.pub_lat.lock().expect("histogram lock");
        let p = pcts(&g.0);
        g.0.reset();
        s += &format!(
            " pub {:9.0} msg/s {:7.1} MB/s | pub lat {}",
            m,
            b / 1e6,
            fmt_lat(p)
        );
    }
    if let Some((m, b)) = recvrate {
        let mut g = stats.e2e_lat.lock().expect("histogram lock");
        let p = pcts(&g.0);
        g.0.reset();
        s += &format!(
            " | recv {:9.0} msg/s {:7.1} MB/s | e2e lat {}",
            m,
            b / 1e6,
            fmt_lat(p)
        );
    }
    if let Some(b) = backlog {
        s += &format!(" | backlog {b}");
    }
    let d = stats.duplicates.load(Ordering::Relaxed);
    if d > 0 {
        s += &format!(" | duplicates {d}");
    }
    let e = stats.errors.load(Ordering::Relaxed);
    if e > 0 {
        s += &format!(" | errors {e}");
    }
    s
}

fn summary(
    mode: &str,
    o: &Opts,
    stats: &Stats,
    (elapsed, setup_s): (f64, f64),
    (cpu, setup_cpu): (f64, f64),
    produce: bool,
    consume: bool,
) {
    let acked = stats.acked.load(Ordering::Relaxed);
    let received = stats.received.load(Ordering::Relaxed);
    // Rates over the active window: from the end of the setup (every
    // producer and consumer created) to the last receipt / receive.
    let pub_s = (stats.last_ack_us.load(Ordering::Relaxed) as f64 / 1e6 - setup_s).max(1e-3);
    let recv_s = (stats.last_recv_us.load(Ordering::Relaxed) as f64 / 1e6 - setup_s).max(1e-3);
    let dups = stats.duplicates.load(Ordering::Relaxed);
    let pubp = pcts(&stats.pub_lat.lock().expect("histogram lock").1);
    let e2ep = pcts(&stats.e2e_lat.lock().expect("histogram lock").1);
    let lat = |p: [f64; 6]| serde_json::json!({"p50": p[0], "p95": p[1], "p99": p[2], "p99_9": p[3], "max": p[4], "mean": p[5]});
    let v = serde_json::json!({
        "mode": mode,
        "url": o.url,
        "topics": o.topics,
        "size": o.size,
        "rate": o.rate,
        "batching_delay_ms": o.batch_delay_ms,
        "elapsed_s": elapsed,
        "connections": o.connections,
        "setup_s": setup_s,
        "published": if produce { Some(acked) } else { None },
        "publish_rate": if produce { Some(acked as f64 / pub_s) } else { None },
        "publish_mb_s": if produce { Some(stats.acked_bytes.load(Ordering::Relaxed) as f64 / pub_s / 1e6) } else { None },
        "publish_latency_ms": if produce { Some(lat(pubp)) } else { None },
        "received": if consume { Some(received) } else { None },
        "receive_rate": if consume { Some(received as f64 / recv_s) } else { None },
        "receive_mb_s": if consume { Some(stats.received_bytes.load(Ordering::Relaxed) as f64 / recv_s / 1e6) } else { None },
        "e2e_latency_ms": if consume { Some(lat(e2ep)) } else { None },
        "duplicates": if consume { Some(dups) } else { None },
        "unique_receive_rate": if consume { Some(received.saturating_sub(dups) as f64 / recv_s) } else { None },
        "errors": stats.errors.load(Ordering::Relaxed),
        "client_cpu_s": cpu,
        "setup_cpu_s": setup_cpu,
    });
    if o.json {
        println!("{v}");
        return;
    }
    println!("--- {mode} summary: {elapsed:.1} s, client CPU {cpu:.2} s ---");
    if produce {
        println!(
            "published {acked} msgs, {:.0} msg/s, {:.1} MB/s; publish latency {}",
            acked as f64 / pub_s,
            stats.acked_bytes.load(Ordering::Relaxed) as f64 / pub_s / 1e6,
            fmt_lat(pubp)
        );
    }
    if consume {
        println!(
            "received {received} msgs, {:.0} msg/s, {:.1} MB/s; end-to-end latency {}",
            received as f64 / recv_s,
            stats.received_bytes.load(Ordering::Relaxed) as f64 / recv_s / 1e6,
            fmt_lat(e2ep)
        );
    }
    if consume && dups > 0 {
        println!("duplicates (sequence id not above the producer's highest seen): {dups}");
    }
    let e = stats.errors.load(Ordering::Relaxed);
    if e > 0 {
        println!("errors: {e}");
    }
}
