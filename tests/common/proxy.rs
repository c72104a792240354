//! A TCP proxy in front of a server for link faults: it can hold what the
//! server sends (the client's receipts stop arriving while its messages
//! still get through), partition the link (nothing through either way, new
//! connections wait: a black hole, as a dropped route; healed, what waited
//! flows, as TCP's retransmissions would deliver it) and cut every
//! connection through it at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub port: u16,
    target: Arc<AtomicU16>,
    hold: Arc<AtomicBool>,
    /// Partitioned: nothing goes either way, new connections wait.
    blocked: Arc<AtomicBool>,
    /// Bumped by [`Proxy::cut`]: every connection older than it ends.
    generation: watch::Sender<u64>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port; connections wait for a target.
    pub async fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = Arc::new(AtomicU16::new(0));
        let hold = Arc::new(AtomicBool::new(false));
        let blocked = Arc::new(AtomicBool::new(false));
        let (generation, _) = watch::channel(0u64);
        let accept = {
            let (target, hold, blocked, generation) = (
                target.clone(),
                hold.clone(),
                blocked.clone(),
                generation.clone(),
            );
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let (target, hold, blocked) = (target.clone(), hold.clone(), blocked.clone());
                    let (born, generation) = (*generation.borrow(), generation.subscribe());
                    tokio::spawn(async move {
                        // A connection made across a partition waits for it
                        // to heal (the client's own timeouts apply).
                        while blocked.load(Ordering::Relaxed) {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        let port = target.load(Ordering::Relaxed);
                        let Ok(server) = TcpStream::connect(("127.0.0.1", port)).await else {
                            return;
                        };
                        pipe(client, server, hold, blocked, generation, born).await;
                    });
                }
            })
        };
        Proxy {
            port,
            target,
            hold,
            blocked,
            generation,
            accept,
        }
    }

    /// Partitions the link: nothing goes either way until [`Proxy::heal`]
    /// or [`Proxy::cut`].
    pub fn partition(&self) {
        self.blocked.store(true, Ordering::Relaxed);
    }

    /// Ends a partition; what waited on either side goes through.
    pub fn heal(&self) {
        self.blocked.store(false, Ordering::Relaxed);
    }

    pub fn is_partitioned(&self) -> bool {
        self.blocked.load(Ordering::Relaxed)
    }

    /// Sends connections to the broker at `port` from now on.
    pub fn target(&self, port: u16) {
        self.target.store(port, Ordering::Relaxed);
    }

    /// Stops forwarding what brokers send until [`Proxy::cut`].
    pub fn hold(&self) {
        self.hold.store(true, Ordering::Relaxed);
    }

    /// Closes every connection through the proxy (what was held is
    /// dropped); new ones are forwarded both ways.
    pub fn cut(&self) {
        // The old connections end before anything held could go out.
        self.generation.send_modify(|g| *g += 1);
        self.hold.store(false, Ordering::Relaxed);
        self.blocked.store(false, Ordering::Relaxed);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// Copies both ways until either side closes or the connection's
/// generation is cut; broker-to-client bytes wait while `hold` is set.
async fn pipe(
    client: TcpStream,
    server: TcpStream,
    hold: Arc<AtomicBool>,
    blocked: Arc<AtomicBool>,
    mut generation: watch::Receiver<u64>,
    born: u64,
) {
    let waits = |down: bool| {
        let (hold, blocked) = (hold.clone(), blocked.clone());
        async move {
            while blocked.load(Ordering::Relaxed) || (down && hold.load(Ordering::Relaxed)) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let (mut cr, mut cw) = client.into_split();
    let (mut br, mut bw) = server.into_split();
    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match cr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    waits(false).await;
                    if bw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let down = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            waits(true).await;
            match br.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    // Read before a hold began: it waits too.
                    waits(true).await;
                    if cw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let cut = async {
        while *generation.borrow_and_update() == born {
            if generation.changed().await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        biased;
        _ = cut => {}
        _ = up => {}
        _ = down => {}
    }
}
