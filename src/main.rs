//! `strobe`: the composition root. Command line → configuration → tracing →
//! broker → run until SIGINT or SIGTERM, then shut down in order.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use strobe_broker::{Broker, BrokerConfig};
use tracing::info;

/// jemalloc rather than glibc's malloc: under client churn over many topics
/// (`tests/soak/soak.py`) glibc's per-thread arenas kept the memory of every
/// burst, so resident memory kept rising long after live heap had levelled;
/// jemalloc, purging in background threads, gives it back (figures in
/// docs/performance.md, "Allocator").
#[cfg(all(unix, not(target_env = "musl"), not(feature = "system-allocator")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod admin_cli;
mod admin_clusters;
mod admin_http;
mod admin_namespaces;
mod admin_output;
mod admin_scalable;
mod admin_tenancy;
mod admin_topics;
mod perf;
mod perf_scalable;
mod perf_txn;
mod runtime;
mod tokens_cli;

use runtime::runtime;

/// Strobe: a message broker that speaks Apache Pulsar's binary protocol.
///
/// Point any Pulsar client at it (pulsar://localhost:6650) and change nothing else.
#[derive(Debug, Parser)]
#[command(name = "strobe", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: CommandLine,
}

#[derive(Debug, Subcommand)]
enum CommandLine {
    /// Run one broker with embedded storage and metadata (like `pulsar standalone`).
    Standalone(StandaloneArgs),
    /// Run one broker of a cluster coordinated through etcd (needs the `cluster` build).
    Broker(BrokerArgs),
    /// Load-test any Pulsar-protocol broker (like pulsar-perf): produce, consume or e2e.
    Perf(perf::PerfArgs),
    /// Administer a broker over its HTTP API (like pulsar-admin): tenants, namespaces, topics.
    Admin(admin_cli::AdminArgs),
    /// Make and check authentication tokens (like `pulsar tokens`).
    Tokens {
        #[command(subcommand)]
        cmd: tokens_cli::TokensCommand,
    },
}

#[derive(Debug, Args)]
struct StandaloneArgs {
    /// Configuration file with the keys of config/standalone.toml; flags below override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    common: CommonArgs,
}

/// The flags standalone and cluster brokers share.
#[derive(Debug, Args)]
struct CommonArgs {
    /// Directory for data and metadata (a cluster broker: local state only) [default: ./data]
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Port of the Pulsar binary protocol, 0: any free port [default: 6650]
    #[arg(long, value_name = "PORT")]
    broker_port: Option<u16>,
    /// Port of the HTTP admin API, lookups and metrics, 0: any free port [default: 8080]
    #[arg(long, value_name = "PORT")]
    http_port: Option<u16>,
    /// Host name that clients (and other brokers) reach this broker at [default: localhost]
    #[arg(long, value_name = "HOST")]
    advertised_address: Option<String>,
    /// Address to listen on [default: 0.0.0.0]
    #[arg(long, value_name = "ADDR")]
    bind_address: Option<String>,
    /// Named addresses for clients on other networks, as Pulsar's advertisedListeners:
    /// internal:pulsar://broker-1:6650,external:pulsar://localhost:6652
    #[arg(long, value_name = "LISTENERS")]
    advertised_listeners: Option<String>,
    /// The listener other brokers and clients that name none get [default: the first]
    #[arg(long, value_name = "NAME")]
    internal_listener_name: Option<String>,
}

impl CommonArgs {
    fn apply(self, cfg: &mut BrokerConfig) {
        if let Some(v) = self.data_dir {
            cfg.data_dir = v;
        }
        if let Some(v) = self.broker_port {
            cfg.broker_port = v;
        }
        if let Some(v) = self.http_port {
            cfg.http_port = v;
        }
        if let Some(v) = self.advertised_address {
            cfg.advertised_address = v;
        }
        if let Some(v) = self.bind_address {
            cfg.bind_address = v;
        }
        if let Some(v) = self.advertised_listeners {
            cfg.advertised_listeners = v;
        }
        if let Some(v) = self.internal_listener_name {
            cfg.internal_listener_name = v;
        }
    }
}

#[derive(Debug, Args)]
struct BrokerArgs {
    /// Configuration file with the keys of config/cluster.toml; flags below override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// etcd endpoints: etcd:http://host:2379[,http://…]
    #[arg(long, value_name = "URL")]
    metadata_store: Option<String>,
    /// Storage every broker reaches: file:///shared/dir or s3://bucket/prefix
    #[arg(long, value_name = "URL")]
    storage: Option<String>,
    /// Name of the cluster
    #[arg(long, value_name = "NAME")]
    cluster_name: Option<String>,
    /// This broker's unique id [default: <advertised address>:<broker port>]
    #[arg(long, value_name = "ID")]
    broker_id: Option<String>,
    #[command(flatten)]
    common: CommonArgs,
    /// Seconds until a dead broker's bundles move to others
    #[arg(long, value_name = "SECS")]
    metadata_session_timeout_secs: Option<u64>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    if matches!(
        cli.command,
        CommandLine::Standalone(_) | CommandLine::Broker(_) | CommandLine::Perf(_)
    ) {
        // A descriptor per connection and per open segment: the soft limit (often 1,024)
        // would end a broker long before its hard one does.
        match strobe_broker::accept::raise_files_limit() {
            Ok((before, soft, hard)) => {
                info!(before, soft, hard, "open files limit (soft raised to hard)")
            }
            Err(e) => tracing::warn!(error = %e, "reading or raising the open files limit failed"),
        }
    }
    let result = match cli.command {
        CommandLine::Standalone(args) => standalone_config(args).and_then(run_standalone),
        CommandLine::Broker(args) => cluster_broker(args),
        CommandLine::Perf(args) => perf::run(args),
        CommandLine::Admin(args) => admin_cli::run(args),
        CommandLine::Tokens { cmd } => tokens_cli::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strobe: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("STROBE_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn standalone_config(args: StandaloneArgs) -> anyhow::Result<BrokerConfig> {
    let mut cfg = match &args.config {
        Some(path) => BrokerConfig::load(path)?,
        None => BrokerConfig::default(),
    };
    args.common.apply(&mut cfg);
    cfg.validate()?;
    Ok(cfg)
}

/// The configuration of a cluster broker: the file (or the defaults) with
/// the flags on top.
fn broker_config(args: BrokerArgs) -> anyhow::Result<BrokerConfig> {
    let mut cfg = match &args.config {
        Some(path) => BrokerConfig::load(path)?,
        None => BrokerConfig {
            cluster_name: "strobe-cluster".into(),
            ..BrokerConfig::default()
        },
    };
    if let Some(v) = args.metadata_store {
        cfg.metadata_store_url = v;
    }
    if let Some(v) = args.storage {
        cfg.storage = v;
    }
    if let Some(v) = args.cluster_name {
        cfg.cluster_name = v;
    }
    if let Some(v) = args.broker_id {
        cfg.broker_id = v;
    }
    args.common.apply(&mut cfg);
    if let Some(v) = args.metadata_session_timeout_secs {
        cfg.metadata_session_timeout_secs = v;
    }
    cfg.validate()?;
    cfg.etcd_endpoints()?;
    Ok(cfg)
}

#[cfg(not(feature = "cluster"))]
fn cluster_broker(args: BrokerArgs) -> anyhow::Result<()> {
    broker_config(args)?;
    anyhow::bail!(
        "this strobe was built without cluster support. Rebuild with `cargo build --release --features cluster` \
         (the cluster build talks to etcd, and compiling etcd's client needs protoc: \
         `apt-get install protobuf-compiler` or PROTOC=/path/to/protoc); `strobe standalone` needs neither"
    )
}

/// A cluster broker: etcd for metadata and membership, shared storage for
/// topics.
#[cfg(feature = "cluster")]
fn cluster_broker(args: BrokerArgs) -> anyhow::Result<()> {
    use std::sync::Arc;
    use strobe_cluster::{BrokerInfo, Cluster};
    use strobe_metadata::{EtcdOptions, EtcdStore, MetadataStore, SessionOptions};
    let cfg = broker_config(args)?;
    let runtime = broker_runtime(&cfg)?;
    runtime.block_on(async move {
        let mut cfg = cfg;
        let url = cfg.storage_url()?;
        if matches!(cfg.storage.as_str(), "file" | "memory") {
            anyhow::bail!(
                "storage = {:?}: a cluster broker needs storage every broker reaches: \
                 --storage file:///shared/dir or s3://bucket/prefix",
                cfg.storage
            );
        }
        let (http, broker_listener) = bind_ports(&mut cfg).await?;
        let port = broker_listener.local_addr()?.port();
        let endpoints = cfg.etcd_endpoints()?;
        // etcd may come up after the broker (a compose file starts both): wait for it, bounded.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let metadata: Arc<dyn MetadataStore> = loop {
            let attempt = async {
                let etcd = EtcdStore::connect(EtcdOptions::new(endpoints.clone())).await?;
                etcd.revision().await?;
                Ok::<_, strobe_metadata::MetadataError>(etcd)
            };
            match attempt.await {
                Ok(etcd) => break Arc::new(etcd),
                Err(e) if std::time::Instant::now() < deadline => {
                    tracing::warn!(error = %e, endpoints = %endpoints.join(","), "etcd is not reachable yet; retrying");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                Err(e) => {
                    return Err(anyhow::Error::new(e).context(format!(
                        "connecting to etcd at {} (gave up after 60 s)",
                        endpoints.join(",")
                    )));
                }
            }
        };
        let storage = strobe_ledger::open_shared_backend(
            &url,
            strobe_ledger::ObjectBackendConfig {
                flush_delay: std::time::Duration::from_millis(cfg.storage_flush_delay_ms),
                max_batch_bytes: cfg.storage_max_put_bytes as usize,
                cache_bytes: (cfg.storage_cache_mb << 20) as usize,
                ..strobe_ledger::ObjectBackendConfig::default()
            },
        )
        .await
        .with_context(|| format!("opening storage {}", cfg.storage))?;
        let broker_id = if cfg.broker_id.is_empty() {
            format!("{}:{port}", cfg.advertised_address)
        } else {
            cfg.broker_id.clone()
        };
        let me = BrokerInfo {
            broker_id: broker_id.clone(),
            service_url: cfg.broker_service_url(port),
            service_url_tls: cfg.broker_service_url_tls(cfg.broker_port_tls),
            web_service_url: format!("http://{}:{}", cfg.advertised_address, cfg.http_port),
            web_service_url_tls: (cfg.http_port_tls != 0)
                .then(|| format!("https://{}:{}", cfg.advertised_address, cfg.http_port_tls)),
            advertised_listeners: cfg.listeners()?,
            bundles: 0,
            topics: 0,
            bundle_rates: Default::default(),
        };
        let session = SessionOptions {
            ttl: std::time::Duration::from_secs(cfg.metadata_session_timeout_secs),
            // etcd expires leases on a 500 ms tick and rounds TTLs up to whole seconds.
            expiry_slack: std::time::Duration::from_secs(1),
            ..SessionOptions::default()
        };
        // An etcd member dying under a request (its connection breaks) is
        // no reason to give up: the others answer the next attempt. Joining
        // again is safe: a half-made session's lease expires.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let cluster = loop {
            match Cluster::join(metadata.clone(), session.clone(), me.clone()).await {
                Ok(c) => break c,
                Err(e @ strobe_cluster::ClusterError::Metadata(strobe_metadata::MetadataError::Backend(_)))
                    if std::time::Instant::now() < deadline =>
                {
                    tracing::warn!(error = %e, "joining the cluster failed; retrying");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                Err(e) => return Err(anyhow::Error::new(e).context("joining the cluster")),
            }
        };
        if cfg.load_balancer_enabled {
            cluster.start_load_manager(strobe_cluster::balance::ShedPolicy {
                interval: std::time::Duration::from_secs(cfg.load_balancer_interval_secs),
                threshold: cfg.load_balancer_bundle_threshold as usize,
                grace: std::time::Duration::from_secs(
                    cfg.load_balancer_shedding_grace_period_minutes * 60,
                ),
                hits: cfg.load_balancer_shedding_condition_hit_count_threshold,
            });
        }
        let broker = strobe_broker::Broker::bind_with(
            cfg.clone(),
            broker_listener,
            strobe_broker::Backends {
                storage,
                metadata,
                cluster: Some(cluster),
            },
        )
        .await?;
        info!(broker_id, cluster = %cfg.cluster_name, storage = %cfg.storage, "joined the cluster");
        serve(cfg, broker, http, "strobe broker is ready").await
    })
}

/// Binds the HTTP and binary-protocol ports (0 picks a free port; the
/// configuration then names the port bound, so the URLs advertised are right).
async fn bind_ports(
    cfg: &mut BrokerConfig,
) -> anyhow::Result<(tokio::net::TcpListener, tokio::net::TcpListener)> {
    let http_addr = format!("{}:{}", cfg.bind_address, cfg.http_port);
    let http = tokio::net::TcpListener::bind(&http_addr)
        .await
        .with_context(|| format!("binding the HTTP port {http_addr}"))?;
    cfg.http_port = http
        .local_addr()
        .context("the HTTP listener's address")?
        .port();
    let addr = cfg.broker_listen_addr()?;
    let broker = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    cfg.broker_port = broker.local_addr()?.port();
    Ok((http, broker))
}

/// Pins the process to `cpu_affinity` (before any thread starts: they all
/// inherit it), then starts the broker's runtime.
fn broker_runtime(cfg: &BrokerConfig) -> anyhow::Result<tokio::runtime::Runtime> {
    let cpus = strobe_broker::cpus::cpu_list(&cfg.cpu_affinity)?;
    if !cpus.is_empty() {
        let before = strobe_broker::cpus::pin_to(&cpus).context("cpu_affinity")?;
        info!(
            cpus = %strobe_broker::cpus::format_list(&cpus),
            before = %strobe_broker::cpus::format_list(&before),
            "pinned to cpu_affinity"
        );
    }
    runtime(cfg.worker_threads, "strobe")
}

fn run_standalone(cfg: BrokerConfig) -> anyhow::Result<()> {
    let runtime = broker_runtime(&cfg)?;
    runtime.block_on(async move {
        let mut cfg = cfg;
        let (http, listener) = bind_ports(&mut cfg).await?;
        let broker = Broker::bind_on(cfg.clone(), listener)
            .await
            .with_context(|| format!("opening the broker on {}", cfg.data_dir.display()))?;
        serve(cfg, broker, http, "strobe standalone is ready").await
    })
}

/// Serves the binary protocol and the HTTP API until SIGINT or SIGTERM,
/// then shuts down in order.
async fn serve(
    cfg: BrokerConfig,
    broker: Broker,
    http: tokio::net::TcpListener,
    ready: &'static str,
) -> anyhow::Result<()> {
    let http_addr = http.local_addr().context("the HTTP listener's address")?;
    let stop_http = tokio_util::sync::CancellationToken::new();
    let admin = tokio::spawn(strobe_admin::serve(
        http,
        broker.service(),
        stop_http.clone(),
    ));
    let admin_tls = if cfg.http_port_tls != 0 {
        let addr = format!("{}:{}", cfg.bind_address, cfg.http_port_tls);
        let l = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("binding the HTTPS port {addr}"))?;
        Some(tokio::spawn(strobe_admin::serve_tls(
            l,
            broker.service(),
            stop_http.clone(),
        )))
    } else {
        None
    };
    info!(
        version = env!("CARGO_PKG_VERSION"),
        addr = %broker.local_addr(),
        service_url = %cfg.broker_service_url(broker.local_addr().port()),
        http = %http_addr,
        "{ready}"
    );
    let handle = broker.start();
    wait_for_signal().await?;
    info!("shutting down");
    stop_http.cancel();
    handle.shutdown().await;
    if let Ok(Err(e)) = admin.await {
        tracing::warn!(error = %e, "the HTTP server ended with an error");
    }
    if let Some(t) = admin_tls
        && let Ok(Err(e)) = t.await
    {
        tracing::warn!(error = %e, "the HTTPS server ended with an error");
    }
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}
