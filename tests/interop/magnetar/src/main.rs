//! magnetar-driver, an independent Pulsar client with transactions, against strobe: a committed
//! transaction's message is delivered, an aborted one's never is, and a plain message after
//! both arrives in order. Exits non-zero, saying why, on anything else.

use std::process::ExitCode;
use std::time::Duration;

use magnetar::{OutgoingMessage, PulsarClient};

#[tokio::main]
async fn main() -> ExitCode {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "pulsar://127.0.0.1:6650".into());
    match check(&url).await {
        Ok(()) => {
            println!("magnetar-driver: committed delivered, aborted hidden: ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("magnetar-driver interop FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn check(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let topic = format!("persistent://public/default/magnetar-{}", std::process::id());
    let client = PulsarClient::builder().service_url(url).build().await?;
    let consumer = client
        .consumer(&topic)
        .subscription("interop")
        .subscribe()
        .await?;
    let producer = client.producer(&topic).create().await?;
    let txn = client.new_transaction(Duration::from_secs(30)).await?;
    client
        .register_partition_to_transaction(txn, topic.clone())
        .await?;
    let msg = OutgoingMessage::with_payload(b"committed".as_slice()).txn(txn.id());
    producer.send(msg.into()).await?;
    let bad = client.new_transaction(Duration::from_secs(30)).await?;
    client
        .register_partition_to_transaction(bad, topic.clone())
        .await?;
    let msg = OutgoingMessage::with_payload(b"aborted".as_slice()).txn(bad.id());
    producer.send(msg.into()).await?;
    let aborted = client.abort_transaction(bad).await?;
    let committed = client.commit_transaction(txn).await?;
    println!("abort: {aborted:?}, commit: {committed:?}");
    producer
        .send(OutgoingMessage::with_payload(b"plain".as_slice()).into())
        .await?;
    let mut got = Vec::new();
    for _ in 0..2 {
        let m = tokio::time::timeout(Duration::from_secs(10), consumer.receive()).await??;
        got.push(String::from_utf8_lossy(&m.payload).into_owned());
        consumer.ack(m.message_id).await?;
    }
    if got != ["committed", "plain"] {
        return Err(format!("received {got:?}, expected [\"committed\", \"plain\"]").into());
    }
    if let Ok(m) = tokio::time::timeout(Duration::from_secs(2), consumer.receive()).await {
        let extra = m.map(|m| String::from_utf8_lossy(&m.payload).into_owned());
        return Err(format!("an extra message arrived: {extra:?}").into());
    }
    Ok(())
}
