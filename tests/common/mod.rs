//! Shared helpers for integration tests: a real `strobe` process and a raw
//! protocol client built on the wire crate.

#![allow(dead_code)]

#[cfg(feature = "cluster")]
pub mod cluster;
pub mod keyed;
pub mod proxy;

use std::io::Write;
use std::net::TcpListener as StdListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use strobe_wire::{Command as Cmd, Frame, FrameCodec, OutFrame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Decoder;

/// A port nothing listens on now, and that this test process has not handed
/// out before: tests run in parallel, and two brokers given the same port
/// would find each other instead of failing.
pub fn free_port() -> u16 {
    static TAKEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let p = StdListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if TAKEN.lock().unwrap().insert(p) {
            return p;
        }
    }
}

/// Every message of `topic` from its first entry, as text, read with a
/// reader until the broker says there is no more; why not, if it cannot.
pub async fn read_texts(
    client: &strobe_client::Client,
    topic: &str,
) -> Result<Vec<String>, String> {
    match read_texts_partly(client, topic).await {
        (got, None) => Ok(got),
        (_, Some(e)) => Err(e),
    }
}

/// As [`read_texts`], with what was read before it stopped, if it did.
/// A reader that receives nothing for 60 s while the broker says there is
/// more has stopped (a reconnect, with its backoff, takes less).
pub async fn read_texts_partly(
    client: &strobe_client::Client,
    topic: &str,
) -> (Vec<String>, Option<String>) {
    let mut got = Vec::new();
    let mut reader = match client.reader(topic).start_earliest().create().await {
        Ok(r) => r,
        Err(e) => return (got, Some(format!("{topic}: {e}"))),
    };
    loop {
        match reader.has_message_available().await {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return (got, Some(format!("{topic}: {e}"))),
        }
        match reader.recv_timeout(Duration::from_secs(60)).await {
            Ok(Some(m)) => got.push(String::from_utf8_lossy(&m.payload).into_owned()),
            Ok(None) => {
                let n = got.len();
                return (
                    got,
                    Some(format!(
                        "{topic}: the broker says more after {n} messages, none came in 60 s"
                    )),
                );
            }
            Err(e) => return (got, Some(format!("{topic}: {e}"))),
        }
    }
    let _ = reader.close().await;
    (got, None)
}

/// The payloads a new Exclusive subscription `sub` of `topic`, from the earliest message,
/// receives until nothing comes for `quiet` or `at_most` came.
pub async fn read_from_earliest(
    c: &strobe_client::Client,
    topic: &str,
    sub: &str,
    quiet: Duration,
    at_most: usize,
) -> Vec<String> {
    let mut k = c
        .consumer(topic, sub)
        .sub_type(strobe_client::SubType::Exclusive)
        .initial_position(strobe_client::InitialPosition::Earliest)
        .subscribe()
        .await
        .unwrap();
    let mut got = Vec::new();
    while got.len() < at_most {
        let Some(m) = k.recv_timeout(quiet).await.unwrap() else {
            break;
        };
        got.push(String::from_utf8_lossy(&m.payload).into_owned());
    }
    got
}

/// One HTTP/1.1 request to `127.0.0.1:port` (JSON body, connection
/// closed after): (status, body), or `None` if nothing answered within
/// `timeout` (the server may be dead or paused).
pub fn http_call(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
    timeout: Duration,
) -> Option<(u16, String)> {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// What `strobe standalone` logs once it listens, with the bound addresses.
const READY: &str = "strobe standalone is ready";

/// The port of the `host:port` after `key` in a log line.
fn port_after(line: &str, key: &str) -> u16 {
    let rest = &line[line.find(key).expect("the ready line names the address") + key.len()..];
    let addr = rest.split_whitespace().next().unwrap_or_default();
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"))
}

/// Starts `strobe standalone` on `dir`'s data with the given ports (0: any free one).
fn spawn(
    cfg: &std::path::Path,
    dir: &std::path::Path,
    port: u16,
    http_port: u16,
    log: std::fs::File,
) -> Child {
    Command::new(env!("CARGO_BIN_EXE_strobe"))
        .args(["standalone", "--config"])
        .arg(cfg)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--broker-port", &port.to_string()])
        .args(["--http-port", &http_port.to_string()])
        .args(["--bind-address", "127.0.0.1"])
        .args(["--advertised-address", "127.0.0.1"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn strobe")
}

/// A `strobe standalone` process on free ports with its own data directory,
/// killed when dropped.
pub struct Strobe {
    pub child: Child,
    pub port: u16,
    pub http_port: u16,
    pub data_dir: tempfile::TempDir,
    pub log: PathBuf,
}

impl Strobe {
    pub fn start() -> Strobe {
        Strobe::start_with_config("")
    }

    /// Starts with extra TOML config lines.
    pub fn start_with_config(toml: &str) -> Strobe {
        Strobe::start_on(toml, None)
    }

    /// Starts with extra TOML config lines, keeping the broker's data in
    /// `data` (which must exist) when given, instead of beside its log.
    pub fn start_on(toml: &str, data: Option<&std::path::Path>) -> Strobe {
        let data_dir = tempfile::tempdir().unwrap();
        if let Some(d) = data {
            std::os::unix::fs::symlink(d, data_dir.path().join("data")).unwrap();
        }
        let cfg = data_dir.path().join("strobe.toml");
        std::fs::File::create(&cfg)
            .unwrap()
            .write_all(toml.as_bytes())
            .unwrap();
        let log = data_dir.path().join("strobe.log");
        // Port 0: the broker binds free ports itself and logs them, so no
        // port is picked here that another process could take first.
        let child = spawn(
            &cfg,
            data_dir.path(),
            0,
            0,
            std::fs::File::create(&log).unwrap(),
        );
        let mut s = Strobe {
            child,
            port: 0,
            http_port: 0,
            data_dir,
            log,
        };
        s.wait_ready(1);
        s
    }

    /// Waits for the process to end (it was signalled or killed), then starts
    /// it again on the same data directory and ports.
    pub fn restart(&mut self) {
        let _ = self.child.wait();
        let starts = self.log_text().matches(READY).count();
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .unwrap();
        let cfg = self.data_dir.path().join("strobe.toml");
        self.child = spawn(&cfg, self.data_dir.path(), self.port, self.http_port, log);
        self.wait_ready(starts + 1);
    }

    /// Waits for the `n`th "ready" line of the log and takes the ports it names.
    fn wait_ready(&mut self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let text = self.log_text();
            if let Some(line) = text.lines().filter(|l| l.contains(READY)).nth(n - 1) {
                self.port = port_after(line, " addr=");
                self.http_port = port_after(line, " http=");
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("strobe exited ({status}) before it was ready: {text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("strobe was not ready within 20 s: {}", self.log_text());
    }

    pub fn http(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        http_call(self.http_port, method, path, body, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("no answer to {method} {path}"))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Waits for the process to exit and returns its exit code.
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("strobe did not exit within {within:?}: {}", self.log_text());
    }
}

impl Drop for Strobe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw Pulsar protocol connection.
pub struct RawClient {
    pub stream: TcpStream,
    buf: BytesMut,
    codec: FrameCodec,
}

impl RawClient {
    pub async fn connect(port: u16) -> RawClient {
        let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        stream.set_nodelay(true).unwrap();
        RawClient {
            stream,
            buf: BytesMut::new(),
            codec: FrameCodec::default(),
        }
    }

    /// Connects and completes the handshake.
    pub async fn handshake(port: u16) -> RawClient {
        let mut c = RawClient::connect(port).await;
        c.send(strobe_wire::commands::connect("strobe-test", None))
            .await;
        match c.recv().await {
            Some(Frame {
                command: Cmd::Connected(_),
                ..
            }) => c,
            other => panic!("expected CONNECTED, got {other:?}"),
        }
    }

    pub async fn send(&mut self, cmd: Cmd) {
        self.send_frame(OutFrame::command(cmd)).await;
    }

    pub async fn send_frame(&mut self, f: OutFrame) {
        self.stream.write_all(&f.to_bytes()).await.unwrap();
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// The next frame, or None when the broker closed the connection.
    pub async fn recv(&mut self) -> Option<Frame> {
        self.recv_within(Duration::from_secs(10))
            .await
            .expect("no frame within 10 s")
    }

    /// Err(()) on timeout; Ok(None) when closed.
    pub async fn recv_within(&mut self, d: Duration) -> Result<Option<Frame>, ()> {
        tokio::time::timeout(d, async {
            loop {
                if let Some(f) = self
                    .codec
                    .decode(&mut self.buf)
                    .expect("broker sent a bad frame")
                {
                    return Some(f);
                }
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        })
        .await
        .map_err(|_| ())
    }

    /// Asserts that the broker closes the connection (after any frames it sends first).
    pub async fn expect_closed(&mut self, within: Duration) -> Vec<Frame> {
        let mut seen = Vec::new();
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.recv_within(left).await {
                Ok(Some(f)) => seen.push(f),
                Ok(None) => return seen,
                Err(()) => panic!("connection still open after {within:?}; got {seen:?}"),
            }
        }
    }
}
