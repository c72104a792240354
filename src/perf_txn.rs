//! `strobe perf txn`: transactions per second and their latency (NEW_TXN, the sends, COMMIT),
//! with workers pinned to coordinator partitions so a stalled partition shows as one slow row
//! rather than slowing everyone; `--plain` runs the same loop without transactions (each
//! "transaction" is its messages sent and awaited), for the side-by-side figure.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use strobe_client::Client;

#[derive(Debug, Clone, Args)]
pub struct TxnOpts {
    /// Service URL of any broker.
    #[arg(short = 'u', long, default_value = "pulsar://127.0.0.1:6650")]
    url: String,
    /// Topic the transactions write to.
    #[arg(long, default_value = "perf-txn")]
    topic: String,
    /// Concurrent transaction loops.
    #[arg(short = 'w', long, default_value_t = 16)]
    workers: usize,
    /// Messages sent in each transaction.
    #[arg(short = 'm', long, default_value_t = 1)]
    messages: usize,
    /// Message size in bytes.
    #[arg(short = 's', long, default_value_t = 100)]
    size: usize,
    /// Seconds to run.
    #[arg(short = 'd', long, default_value_t = 20.0)]
    duration: f64,
    /// Pin worker i to coordinator partition i mod parallelism (else round robin).
    #[arg(long)]
    pin: bool,
    /// With --pin: worker i uses partition (i + this) mod parallelism.
    #[arg(long = "pin-offset", default_value_t = 0)]
    pin_offset: usize,
    /// No transactions: the same loop with plain sends.
    #[arg(long)]
    plain: bool,
    /// Print per-partition rates every this many seconds (with --pin).
    #[arg(long = "report-every", default_value_t = 5.0)]
    report_every: f64,
}

pub fn run(o: TxnOpts) -> anyhow::Result<()> {
    let rt = crate::runtime::runtime(1, "perf-txn")?;
    rt.block_on(run_async(o))
}

async fn run_async(o: TxnOpts) -> anyhow::Result<()> {
    let client = Client::builder(&o.url)
        .operation_timeout(Duration::from_secs(60))
        .build()
        .await?;
    let parallelism = if o.plain {
        1
    } else {
        client.tc_leaders().await?.len().max(1)
    };
    let producer = Arc::new(client.producer(&o.topic).no_batching().create().await?);
    let stop = Arc::new(AtomicBool::new(false));
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..parallelism).map(|_| AtomicU64::new(0)).collect());
    let errors = Arc::new(AtomicU64::new(0));
    let lat = Arc::new(std::sync::Mutex::new(
        Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).expect("bounds"),
    ));
    // Where a transaction's time goes: NEW_TXN, its sends (with ADD_PARTITION_TO_TXN), COMMIT.
    let phases = Arc::new(std::sync::Mutex::new([(); 3].map(|_| {
        Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).expect("bounds")
    })));
    let payload = vec![b'x'; o.size];
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..o.workers {
        let phases = phases.clone();
        let (client, producer, stop, done, errors, lat, payload) = (
            client.clone(),
            producer.clone(),
            stop.clone(),
            done.clone(),
            errors.clone(),
            lat.clone(),
            payload.clone(),
        );
        let (pin, plain, messages, offset) = (o.pin, o.plain, o.messages, o.pin_offset);
        tasks.push(tokio::spawn(async move {
            let tc = ((w + offset) % parallelism) as u64;
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                let r: Result<u64, strobe_client::Error> = async {
                    if plain {
                        for _ in 0..messages {
                            producer.send_and_wait(payload.clone()).await?;
                        }
                        return Ok(0);
                    }
                    let txn = if pin {
                        client
                            .new_transaction_on(tc, Duration::from_secs(60))
                            .await?
                    } else {
                        client.new_transaction(Duration::from_secs(60)).await?
                    };
                    let t1 = Instant::now();
                    let mut sends = Vec::with_capacity(messages);
                    for _ in 0..messages {
                        sends.push(txn.send(&producer, payload.clone()).await?);
                    }
                    for s in sends {
                        s.await?;
                    }
                    let t2 = Instant::now();
                    txn.commit().await?;
                    let us = |d: Duration| (d.as_micros() as u64).clamp(1, 120_000_000);
                    let mut p = phases.lock().expect("phases");
                    let _ = p[0].record(us(t1 - t0));
                    let _ = p[1].record(us(t2 - t1));
                    let _ = p[2].record(us(t2.elapsed()));
                    Ok(txn.id().0)
                }
                .await;
                match r {
                    Ok(tc) => {
                        let us = t0.elapsed().as_micros() as u64;
                        let _ = lat.lock().expect("lat").record(us.clamp(1, 120_000_000));
                        done[tc as usize % done.len()].fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("transaction failed: {e}");
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }));
    }
    let total = Duration::from_secs_f64(o.duration);
    let every = Duration::from_secs_f64(o.report_every.max(0.5));
    let mut last: Vec<u64> = vec![0; parallelism];
    let mut last_t = Instant::now();
    while start.elapsed() < total {
        tokio::time::sleep(every.min(total.saturating_sub(start.elapsed()))).await;
        let now: Vec<u64> = done.iter().map(|d| d.load(Ordering::Relaxed)).collect();
        let secs = last_t.elapsed().as_secs_f64();
        let rates: Vec<String> = now
            .iter()
            .zip(&last)
            .map(|(n, l)| format!("{:.0}", (n - l) as f64 / secs))
            .collect();
        let sum: u64 = now.iter().zip(&last).map(|(n, l)| n - l).sum();
        println!(
            "t={:>5.1}s {} /s total {:.0}/s errors {}{}",
            start.elapsed().as_secs_f64(),
            if o.plain { "batches" } else { "txns" },
            sum as f64 / secs,
            errors.load(Ordering::Relaxed),
            if o.pin && !o.plain {
                format!(" per partition [{}]", rates.join(" "))
            } else {
                String::new()
            }
        );
        last = now;
        last_t = Instant::now();
    }
    stop.store(true, Ordering::Relaxed);
    let wait = tokio::time::sleep(Duration::from_secs(5));
    tokio::pin!(wait);
    for t in tasks {
        tokio::select! {
            _ = &mut wait => break,
            _ = t => {}
        }
    }
    if !o.plain {
        let p = phases.lock().expect("phases");
        let q = |h: &Histogram<u64>, x: f64| h.value_at_quantile(x) as f64 / 1000.0;
        println!(
            "phases ms p50/p99: new {:.2}/{:.2}, sends {:.2}/{:.2}, commit {:.2}/{:.2}",
            q(&p[0], 0.5),
            q(&p[0], 0.99),
            q(&p[1], 0.5),
            q(&p[1], 0.99),
            q(&p[2], 0.5),
            q(&p[2], 0.99)
        );
    }
    let elapsed = start.elapsed().as_secs_f64();
    let n: u64 = done.iter().map(|d| d.load(Ordering::Relaxed)).sum();
    let h = lat.lock().expect("lat");
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "{} {} in {:.1} s: {:.0}/s ({:.0} msg/s), latency ms p50 {:.2} p99 {:.2} p99.9 {:.2} max {:.2}, errors {}",
        n,
        if o.plain { "batches" } else { "transactions" },
        elapsed,
        n as f64 / elapsed,
        (n * o.messages as u64) as f64 / elapsed,
        ms(0.5),
        ms(0.99),
        ms(0.999),
        h.max() as f64 / 1000.0,
        errors.load(Ordering::Relaxed),
    );
    Ok(())
}
