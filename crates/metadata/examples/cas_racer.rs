//! One side of a two-process CAS race (used by `tests/etcd_faults.rs`). At agreed wall-clock
//! instants it tries, for each round, a version CAS on `<prefix>/v/<round>` (expecting
//! `--expect-version`) and a create-if-absent on `<prefix>/a/<round>`, and prints `V <round> WIN`
//! / `V <round> LOSE` and `A <round> WIN|LOSE`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use strobe_metadata::{EtcdOptions, EtcdStore, Expect, MetadataError, MetadataStore};

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, env = "ETCD_ENDPOINTS")]
    endpoints: String,
    #[arg(long, default_value = "")]
    root: String,
    #[arg(long)]
    prefix: String,
    #[arg(long)]
    id: String,
    #[arg(long)]
    rounds: u32,
    #[arg(long)]
    expect_version: u64,
    /// Unix time in ms of round 0; round r starts 50 ms * r later.
    #[arg(long)]
    start_at_ms: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let store =
        EtcdStore::connect(EtcdOptions::from_list(&args.endpoints).with_root(&args.root)).await?;
    // Warm the connection so both racers start equal.
    store.get(&format!("{}/warm", args.prefix)).await?;
    for r in 0..args.rounds {
        let at = args.start_at_ms + 50 * r as u64;
        let now = now_ms();
        if at > now {
            tokio::time::sleep(Duration::from_millis(at - now)).await;
        }
        let v = store
            .put(
                &format!("{}/v/{r}", args.prefix),
                args.id.as_bytes(),
                Expect::Version(args.expect_version),
            )
            .await;
        let a = store
            .put(
                &format!("{}/a/{r}", args.prefix),
                args.id.as_bytes(),
                Expect::Absent,
            )
            .await;
        for (kind, res) in [("V", v), ("A", a)] {
            match res {
                Ok(_) => println!("{kind} {r} WIN"),
                Err(MetadataError::BadVersion { .. } | MetadataError::AlreadyExists(_)) => {
                    println!("{kind} {r} LOSE")
                }
                Err(e) => println!("{kind} {r} ERROR {e}"),
            }
        }
    }
    Ok(())
}
