//! `strobe perf lookup`: topic lookups a second, as a client finding the
//! owners of many topics does (a reconnect storm, a fleet of producers
//! starting). Each worker looks up topic after topic (`LOOKUP`, following
//! redirects to the owner, as the clients do) over `--connections` clients;
//! the first lookup of a topic nobody owns assigns its bundle, so the
//! figures are of lookups, not of topic loads (no producer is made).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;

#[derive(Debug, Args)]
pub struct LookupOpts {
    /// Service URL.
    #[arg(
        short = 'u',
        long = "service-url",
        default_value = "pulsar://127.0.0.1:6650"
    )]
    url: String,
    /// Topic name; with -t N > 1, topics are `<topic>-0` .. `<topic>-(N-1)`.
    #[arg(long, default_value = "persistent://public/default/perf")]
    topic: String,
    /// Topics.
    #[arg(short = 't', long = "topics", default_value_t = 1000)]
    topics: usize,
    /// Seconds to run (0: until every topic was looked up once).
    #[arg(short = 'd', long = "duration", default_value_t = 0.0)]
    duration: f64,
    /// Client connections (each a client of its own); worker i uses client i mod N.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Lookups in flight at once.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// Client I/O threads.
    #[arg(long = "num-io-threads", default_value_t = 1)]
    io_threads: usize,
    /// One JSON object on stdout instead of the summary.
    #[arg(long)]
    json: bool,
}

pub fn run(o: LookupOpts) -> anyhow::Result<()> {
    anyhow::ensure!(o.topics >= 1, "-t must be at least 1");
    anyhow::ensure!(o.concurrency >= 1, "--concurrency must be at least 1");
    let rt = crate::runtime::runtime(o.io_threads, "perf")?;
    rt.block_on(run_async(o))
}

async fn run_async(o: LookupOpts) -> anyhow::Result<()> {
    let clients = Arc::new(super::setup::connect(&o.url, o.connections).await?);
    let topics = Arc::new(super::setup::topic_names(&o.topic, o.topics));
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let hist = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let until = (o.duration > 0.0).then(|| Instant::now() + Duration::from_secs_f64(o.duration));
    let once = until.is_none();
    let started = Instant::now();
    let mut workers = Vec::with_capacity(o.concurrency);
    for w in 0..o.concurrency {
        let (clients, topics, next) = (clients.clone(), topics.clone(), next.clone());
        let (errors, first_error, hist) = (errors.clone(), first_error.clone(), hist.clone());
        workers.push(tokio::spawn(async move {
            let client = &clients[w % clients.len()];
            let mut local = Histogram::<u64>::new(3).expect("3 significant figures");
            loop {
                if until.is_some_and(|u| Instant::now() >= u) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if once && i >= topics.len() {
                    break;
                }
                let t = Instant::now();
                match client.lookup_url(&topics[i % topics.len()]).await {
                    Ok(_) => {
                        let _ = local.record(t.elapsed().as_micros() as u64);
                    }
                    Err(e) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        first_error
                            .lock()
                            .expect("error lock")
                            .get_or_insert_with(|| e.to_string());
                    }
                }
            }
            hist.lock()
                .expect("histogram lock")
                .add(&local)
                .expect("same bounds");
        }));
    }
    for w in workers {
        w.await?;
    }
    let secs = started.elapsed().as_secs_f64();
    let h = hist.lock().expect("histogram lock");
    let ok = h.len();
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let summary = serde_json::json!({
        "mode": "lookup",
        "topics": o.topics,
        "connections": o.connections,
        "concurrency": o.concurrency,
        "lookups": ok,
        "errors": errors.load(Ordering::Relaxed),
        "first_error": *first_error.lock().expect("error lock"),
        "seconds": secs,
        "lookups_per_s": ok as f64 / secs.max(1e-9),
        "latency_ms": {"p50": ms(0.5), "p99": ms(0.99), "p99_9": ms(0.999), "max": h.max() as f64 / 1000.0},
    });
    if o.json {
        println!("{summary}");
    } else {
        println!(
            "{ok} lookups in {secs:.1} s: {:.0}/s; latency ms p50 {:.2} p99 {:.2} p99.9 {:.2} max {:.2}; {} errors",
            ok as f64 / secs.max(1e-9),
            ms(0.5),
            ms(0.99),
            ms(0.999),
            h.max() as f64 / 1000.0,
            errors.load(Ordering::Relaxed)
        );
    }
    if let Some(e) = first_error.lock().expect("error lock").as_ref() {
        eprintln!("first error: {e}");
    }
    Ok(())
}
