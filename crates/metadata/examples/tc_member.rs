//! One broker's PIP-473 transaction-coordinator membership, as a process: it fixes or checks the
//! parallelism, campaigns for every partition, and prints every assignments snapshot it sees as
//! one `SNAPSHOT {json}` line. SIGTERM/SIGINT resign and exit; SIGKILL is the crash case. Used by
//! `tests/etcd_faults.rs` (three of these on one etcd) and handy for drills:
//!
//! ```text
//! cargo run -p strobe-metadata --features etcd --example tc_member -- \
//!     --endpoints http://127.0.0.1:23790 --broker-id b1
//! ```

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use strobe_metadata::tc::{TcLeader, TcMember, TcMemberConfig};
use strobe_metadata::{EtcdOptions, EtcdStore, MetadataStore, SessionOptions};

#[derive(Debug, Parser)]
struct Args {
    /// etcd client URLs, comma-separated.
    #[arg(long, env = "ETCD_ENDPOINTS")]
    endpoints: String,
    /// Key namespace (tests use a unique one).
    #[arg(long, default_value = "")]
    root: String,
    #[arg(long)]
    broker_id: String,
    #[arg(long, default_value_t = 16)]
    parallelism: u32,
    /// Session TTL in milliseconds (etcd rounds up to whole seconds).
    #[arg(long, default_value_t = 2000)]
    ttl_ms: u64,
    /// Ask the server for a lease this much shorter than the TTL (its expiry tick).
    #[arg(long, default_value_t = 0)]
    lease_slack_ms: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let args = Args::parse();
    let store: Arc<dyn MetadataStore> = Arc::new(
        EtcdStore::connect(EtcdOptions::from_list(&args.endpoints).with_root(&args.root)).await?,
    );
    let config = TcMemberConfig {
        leader: TcLeader {
            broker_id: args.broker_id.clone(),
            broker_service_url: format!("pulsar://{}:6650", args.broker_id),
            broker_service_url_tls: Some(format!("pulsar+ssl://{}:6651", args.broker_id)),
            listeners: Vec::new(),
        },
        parallelism: args.parallelism,
        session: SessionOptions {
            expiry_slack: Duration::from_millis(args.lease_slack_ms),
            ..SessionOptions::with_ttl(Duration::from_millis(args.ttl_ms))
        },
        campaign: None,
    };
    let member = match TcMember::start(store, config).await {
        Ok(m) => m,
        Err(e) => {
            println!("ERROR {e}");
            std::process::exit(2);
        }
    };
    println!("READY {}", args.broker_id);
    let mut rx = member.view().subscribe();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let snap = rx.borrow_and_update().clone();
        let leaders: Vec<Option<&str>> = snap
            .leaders
            .iter()
            .map(|l| l.as_ref().map(|l| l.broker_id.as_str()))
            .collect();
        println!(
            "SNAPSHOT {}",
            serde_json::json!({ "revision": snap.revision, "leaders": leaders })
        );
        tokio::select! {
            r = rx.changed() => if r.is_err() { break },
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
        }
    }
    member.shutdown().await?;
    println!("STOPPED {}", args.broker_id);
    Ok(())
}
