//! `strobe`: the composition root. Command line → configuration → tracing →
//! broker → run until SIGINT or SIGTERM, then shut down in order.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use strobe_broker::{Broker, BrokerConfig};
use tracing::info;

mod admin_cli;
mod perf;
mod tokens_cli;

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
    /// Directory for topic data and metadata [default: ./data]
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Port of the Pulsar binary protocol [default: 6650]
    #[arg(long, value_name = "PORT")]
    broker_port: Option<u16>,
    /// Port of the HTTP admin API, lookups and metrics [default: 8080]
    #[arg(long, value_name = "PORT")]
    http_port: Option<u16>,
    /// Host name that clients are told to connect to [default: localhost]
    #[arg(long, value_name = "HOST")]
    advertised_address: Option<String>,
    /// Address to listen on [default: 0.0.0.0]
    #[arg(long, value_name = "ADDR")]
    bind_address: Option<String>,
}

#[derive(Debug, Args)]
struct BrokerArgs {
    /// Configuration file with the keys of config/cluster.toml.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let result = match cli.command {
        CommandLine::Standalone(args) => standalone_config(args).and_then(run),
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
    if let Some(v) = args.data_dir {
        cfg.data_dir = v;
    }
    if let Some(v) = args.broker_port {
        cfg.broker_port = v;
    }
    if let Some(v) = args.http_port {
        cfg.http_port = v;
    }
    if let Some(v) = args.advertised_address {
        cfg.advertised_address = v;
    }
    if let Some(v) = args.bind_address {
        cfg.bind_address = v;
    }
    cfg.validate()?;
    Ok(cfg)
}

#[cfg(not(feature = "cluster"))]
fn cluster_broker(_args: BrokerArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "this strobe was built without cluster support. Rebuild with `cargo build --release --features cluster` \
         (the cluster build talks to etcd, and compiling etcd's client needs protoc: \
         `apt-get install protobuf-compiler` or PROTOC=/path/to/protoc); `strobe standalone` needs neither"
    )
}

#[cfg(feature = "cluster")]
fn cluster_broker(args: BrokerArgs) -> anyhow::Result<()> {
    let cfg = BrokerConfig::load(&args.config)?;
    if cfg.metadata_store_url.is_empty() {
        anyhow::bail!(
            "{}: metadata_store_url (the etcd endpoints) must be set for a cluster broker",
            args.config.display()
        );
    }
    anyhow::bail!(
        "cluster coordination through etcd ({}) is not built yet; run `strobe standalone` for now",
        cfg.metadata_store_url
    )
}

/// A multi-threaded runtime of `worker_threads` threads (0: one per core)
/// named `name`, for the broker and for `strobe perf`.
fn runtime(worker_threads: usize, name: &str) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if worker_threads > 0 {
        builder.worker_threads(worker_threads);
    }
    builder
        .enable_all()
        .thread_name(name)
        .build()
        .context("starting the async runtime")
}

fn run(cfg: BrokerConfig) -> anyhow::Result<()> {
    let runtime = runtime(cfg.worker_threads, "strobe")?;
    runtime.block_on(async move {
        let mut cfg = cfg;
        let http_addr = format!("{}:{}", cfg.bind_address, cfg.http_port);
        let http = tokio::net::TcpListener::bind(&http_addr)
            .await
            .with_context(|| format!("binding the HTTP port {http_addr}"))?;
        // Port 0 picks a free port; the URLs the broker advertises name the one bound.
        let http_addr = http.local_addr().context("the HTTP listener's address")?;
        cfg.http_port = http_addr.port();
        let broker = Broker::bind(cfg.clone())
            .await
            .with_context(|| format!("binding {}:{}", cfg.bind_address, cfg.broker_port))?;
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
            "strobe standalone is ready"
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
    })
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
