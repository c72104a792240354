//! A recording stand-in for a broker, used to capture the golden frames in
//! `tests/data/` (see `tests/data/capture.py`). It answers just enough for a
//! client to create a producer, send, subscribe and ack, and writes every
//! frame it receives, byte for byte, to `OUT_DIR/NNN-TYPE.bin`.
//!
//! Usage: cargo run -p strobe-wire --example record -- PORT OUT_DIR

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};
use strobe_wire::proto::FeatureFlags;
use strobe_wire::{Command, OutFrame, commands, decode_frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args
        .next()
        .and_then(|p| p.parse().ok())
        .expect("usage: record PORT OUT_DIR");
    let out = PathBuf::from(args.next().expect("usage: record PORT OUT_DIR"));
    std::fs::create_dir_all(&out)?;
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    eprintln!("recording on 127.0.0.1:{port} into {}", out.display());
    let seq = Arc::new(AtomicUsize::new(0));
    // The last batched SEND section, replayed as a MESSAGE to consumers.
    let last_send: Arc<std::sync::Mutex<Option<Bytes>>> = Arc::default();
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let (out, seq, last_send) = (out.clone(), seq.clone(), last_send.clone());
        tokio::spawn(async move {
            if let Err(e) = serve(stream, port, out, seq, last_send).await {
                eprintln!("connection ended: {e}");
            }
        });
    }
}

async fn serve(
    mut stream: TcpStream,
    port: u16,
    out: PathBuf,
    seq: Arc<AtomicUsize>,
    last_send: Arc<std::sync::Mutex<Option<Bytes>>>,
) -> std::io::Result<()> {
    let mut buf = BytesMut::new();
    let mut entry_id = 0u64;
    let mut delivered: HashMap<u64, bool> = HashMap::new();
    loop {
        while buf.len() >= 4 {
            let total = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if buf.len() < 4 + total {
                break;
            }
            let raw = Bytes::copy_from_slice(&buf[..4 + total]);
            let frame = decode_frame(&mut buf, usize::MAX)
                .map_err(|e| std::io::Error::other(e.to_string()))?
                .expect("a whole frame is buffered");
            let n = seq.fetch_add(1, Ordering::SeqCst);
            let name = format!("{n:03}-{:?}.bin", frame.command.kind());
            std::fs::write(out.join(&name), &raw)?;
            eprintln!("recorded {name}");
            let mut replies: Vec<OutFrame> = Vec::new();
            match frame.command {
                Command::Connect(c) => replies.push(OutFrame::command(commands::connected(
                    "recorder",
                    c.protocol_version.unwrap_or(0),
                    Some(strobe_wire::DEFAULT_MAX_MESSAGE_SIZE),
                    FeatureFlags::default(),
                ))),
                Command::PartitionedMetadata(c) => replies.push(OutFrame::command(
                    commands::partitioned_metadata(c.request_id, 0),
                )),
                Command::Lookup(c) => replies.push(OutFrame::command(commands::lookup_connect(
                    c.request_id,
                    &format!("pulsar://127.0.0.1:{port}"),
                    None,
                    false,
                ))),
                Command::Producer(c) => {
                    replies.push(OutFrame::command(commands::producer_success(
                        c.request_id,
                        "golden-producer",
                        -1,
                        None,
                        None,
                        true,
                    )))
                }
                Command::Send(c) => {
                    *last_send.lock().unwrap() = frame.payload.clone();
                    replies.push(OutFrame::command(commands::send_receipt(
                        c.producer_id,
                        c.sequence_id,
                        c.highest_sequence_id.unwrap_or(c.sequence_id),
                        commands::message_id(1, entry_id),
                    )));
                    entry_id += 1;
                }
                Command::Subscribe(c) => {
                    replies.push(OutFrame::command(commands::success(c.request_id)))
                }
                Command::Flow(f) => {
                    let entry = last_send.lock().unwrap().clone();
                    if let (Some(entry), false) = (
                        entry,
                        delivered.get(&f.consumer_id).copied().unwrap_or(false),
                    ) {
                        delivered.insert(f.consumer_id, true);
                        let meta = strobe_wire::payload::parse(&entry)
                            .expect("a valid SEND")
                            .metadata;
                        let mut id = commands::message_id(1, 0);
                        id.batch_size = meta.num_messages_in_batch;
                        replies.push(
                            commands::message_frame(
                                f.consumer_id,
                                id,
                                0,
                                vec![],
                                None,
                                &entry,
                                false,
                            )
                            .map_err(|e| std::io::Error::other(e.to_string()))?,
                        );
                    }
                }
                Command::Ping(_) => replies.push(OutFrame::command(commands::pong())),
                other => {
                    if let Some(id) = other.request_id() {
                        replies.push(OutFrame::command(commands::success(id)));
                    }
                }
            }
            for r in replies {
                stream.write_all(&r.to_bytes()).await?;
            }
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    }
}
