//! What the broker crate's test binaries share: a broker serving on a port
//! the OS picked, and raw frames over one connection.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use strobe_broker::{Backends, Broker, BrokerConfig, BrokerHandle};
use strobe_ledger::LedgerBackend;
use strobe_metadata::EmbeddedStore;
use strobe_wire::{Command, Frame, FrameCodec, OutFrame, commands};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Decoder;

/// A broker on memory storage, serving on a port the OS picked.
pub async fn start_server(tweak: impl FnOnce(&mut BrokerConfig)) -> BrokerHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    Broker::bind_on(config(tweak), listener)
        .await
        .unwrap()
        .start()
}

/// A broker on a store the test opened (one that fails or holds what it
/// is asked to do), with metadata in memory.
pub async fn start_on(
    tweak: impl FnOnce(&mut BrokerConfig),
    storage: Arc<dyn LedgerBackend>,
) -> BrokerHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backends = Backends {
        storage,
        metadata: Arc::new(EmbeddedStore::in_memory()),
        cluster: None,
    };
    Broker::bind_with(config(tweak), listener, backends)
        .await
        .unwrap()
        .start()
}

fn config(tweak: impl FnOnce(&mut BrokerConfig)) -> BrokerConfig {
    let mut config = BrokerConfig {
        storage: "memory".into(),
        advertised_address: "127.0.0.1".into(),
        ..BrokerConfig::default()
    };
    tweak(&mut config);
    config
}

/// Frames over one raw connection.
pub struct Raw {
    pub stream: TcpStream,
    buf: BytesMut,
    codec: FrameCodec,
}

impl Raw {
    pub async fn connect(broker: &BrokerHandle) -> Raw {
        Raw {
            stream: TcpStream::connect(broker.addr()).await.unwrap(),
            buf: BytesMut::new(),
            codec: FrameCodec::default(),
        }
    }

    pub async fn handshake(broker: &BrokerHandle) -> Raw {
        let mut raw = Raw::connect(broker).await;
        raw.send(commands::connect("in-process-test", None)).await;
        match raw.recv().await {
            Some(Command::Connected(_)) => raw,
            other => panic!("expected CONNECTED, got {other:?}"),
        }
    }

    pub async fn send(&mut self, c: impl Into<Command>) {
        self.write(OutFrame::command(c.into())).await;
    }

    pub async fn write(&mut self, frame: OutFrame) {
        self.stream.write_all(&frame.to_bytes()).await.unwrap();
    }

    /// The next command, or `None` once the broker closed the connection.
    pub async fn recv(&mut self) -> Option<Command> {
        self.recv_within(Duration::from_secs(10))
            .await
            .expect("no frame within 10 s")
    }

    /// The next command within `wait` (`None` inside: the broker closed the
    /// connection), or `None` if none came.
    pub async fn recv_within(&mut self, wait: Duration) -> Option<Option<Command>> {
        tokio::time::timeout(wait, async {
            loop {
                if let Some(Frame { command, .. }) = self.codec.decode(&mut self.buf).unwrap() {
                    return Some(command);
                }
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        })
        .await
        .ok()
    }
}
