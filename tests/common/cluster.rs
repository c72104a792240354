//! A cluster for integration tests: a private etcd and `strobe broker` processes on a shared
//! storage directory.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

pub const READY: &str = "strobe broker is ready";
pub const TTL_SECS: u64 = 3;

pub fn etcd_binary() -> String {
    for c in ["etcd", "/usr/bin/etcd", "/usr/local/bin/etcd"] {
        if Command::new(c)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return c.to_string();
        }
    }
    panic!("etcd is not installed: tests/run-all.sh installs Debian's etcd-server");
}

/// A private etcd, killed when dropped.
pub struct Etcd {
    child: Child,
    pub port: u16,
}

impl Etcd {
    pub fn start(dir: &std::path::Path) -> Etcd {
        let (port, peer) = (free_port(), free_port());
        let child = Command::new(etcd_binary())
            .args(["--name", "cluster-test", "--data-dir"])
            .arg(dir.join("etcd"))
            .args([
                "--listen-client-urls",
                &format!("http://127.0.0.1:{port}"),
                "--advertise-client-urls",
                &format!("http://127.0.0.1:{port}"),
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-cluster",
                &format!("cluster-test=http://127.0.0.1:{peer}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn etcd");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "etcd did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Etcd { child, port }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `strobe broker`, killed when dropped.
pub struct Member {
    pub id: String,
    pub child: Child,
    pub port: u16,
    /// The admin HTTP port.
    pub http_port: u16,
    pub log: std::path::PathBuf,
}

impl Member {
    pub fn start(id: &str, etcd: &Etcd, dir: &std::path::Path) -> Member {
        Member::start_with(id, etcd, dir, "")
    }

    /// Starts with extra configuration (TOML lines).
    pub fn start_with(id: &str, etcd: &Etcd, dir: &std::path::Path, toml: &str) -> Member {
        let log = dir.join(format!("{id}.log"));
        let cfg = dir.join(format!("{id}.toml"));
        std::fs::write(&cfg, toml).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_strobe"))
            .args(["broker", "--config"])
            .arg(&cfg)
            .arg("--metadata-store")
            .arg(format!("etcd:http://127.0.0.1:{}", etcd.port))
            .arg("--storage")
            .arg(format!("file://{}", dir.join("shared").display()))
            .args(["--broker-id", id, "--cluster-name", "rust-cluster"])
            .arg("--data-dir")
            .arg(dir.join(id))
            .args(["--broker-port", "0", "--http-port", "0"])
            .args([
                "--bind-address",
                "127.0.0.1",
                "--advertised-address",
                "127.0.0.1",
            ])
            .args(["--metadata-session-timeout-secs", &TTL_SECS.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn strobe broker");
        let mut m = Member {
            id: id.to_string(),
            child,
            port: 0,
            http_port: 0,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(&m.log).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.contains(READY)) {
                let addr = line
                    .split(" addr=")
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap();
                m.port = addr.rsplit(':').next().unwrap().parse().unwrap();
                if let Some(http) = line.split(" http=").nth(1) {
                    let http = http.split_whitespace().next().unwrap();
                    m.http_port = http.rsplit(':').next().unwrap().parse().unwrap();
                }
                return m;
            }
            if let Ok(Some(s)) = m.child.try_wait() {
                panic!("{id} exited ({s}): {text}");
            }
            assert!(Instant::now() < deadline, "{id} not ready: {text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("pulsar://127.0.0.1:{}", self.port)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Member {
    /// kill -9.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends a signal ("STOP", "CONT", "TERM", ...).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// An admin HTTP request: (status, body). `None` if the broker did not
    /// answer (it died).
    pub fn http(&self, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.http_port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
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

    /// The broker's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}
