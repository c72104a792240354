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

/// etcd as member `name` of `initial` (`name=http://127.0.0.1:peer,…`),
/// serving clients on loopback `port`, its data in `data`.
fn etcd_command(
    name: &str,
    data: &std::path::Path,
    port: u16,
    peer: u16,
    initial: &str,
) -> Command {
    let mut c = Command::new(etcd_binary());
    c.args(["--name", name, "--data-dir"]).arg(data).args([
        "--listen-client-urls",
        &format!("http://127.0.0.1:{port}"),
        "--advertise-client-urls",
        &format!("http://127.0.0.1:{port}"),
        "--listen-peer-urls",
        &format!("http://127.0.0.1:{peer}"),
        "--initial-advertise-peer-urls",
        &format!("http://127.0.0.1:{peer}"),
        "--initial-cluster",
        initial,
    ]);
    c
}

/// A private etcd, killed when dropped.
pub struct Etcd {
    child: Child,
    pub port: u16,
}

impl Etcd {
    pub fn start(dir: &std::path::Path) -> Etcd {
        let (port, peer) = (free_port(), free_port());
        let initial = format!("cluster-test=http://127.0.0.1:{peer}");
        let child = etcd_command("cluster-test", &dir.join("etcd"), port, peer, &initial)
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

/// How [`Member::spawn`] starts a broker.
pub struct Spawn {
    /// `--metadata-store`, e.g. `etcd:http://127.0.0.1:2379,http://…`.
    pub metadata: String,
    /// `--storage`, e.g. `file:///…` or `s3://bucket/prefix`.
    pub storage: String,
    /// The config file's contents (TOML).
    pub toml: String,
    /// Extra environment (the S3 endpoint and keys, a clock library).
    pub env: Vec<(String, String)>,
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
        Member::spawn(
            id,
            dir,
            &Spawn {
                metadata: format!("etcd:http://127.0.0.1:{}", etcd.port),
                storage: format!("file://{}", dir.join("shared").display()),
                toml: toml.to_owned(),
                env: Vec::new(),
            },
        )
    }

    /// Starts with its own metadata store, storage and environment; the log
    /// is `dir/{id}.log`, the data `dir/{id}`.
    pub fn spawn(id: &str, dir: &std::path::Path, how: &Spawn) -> Member {
        Member::try_spawn(id, dir, how).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Member::spawn`], with the reason as an error if the broker exits
    /// or is not ready within 30 s.
    pub fn try_spawn(id: &str, dir: &std::path::Path, how: &Spawn) -> Result<Member, String> {
        let log = dir.join(format!("{id}.log"));
        let cfg = dir.join(format!("{id}.toml"));
        std::fs::write(&cfg, &how.toml).unwrap();
        let child = Command::new(strobe_bin())
            .args(["broker", "--config"])
            .arg(&cfg)
            .arg("--metadata-store")
            .arg(&how.metadata)
            .arg("--storage")
            .arg(&how.storage)
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
            .envs(how.env.iter().map(|(k, v)| (k, v)))
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
                return Ok(m);
            }
            if let Ok(Some(s)) = m.child.try_wait() {
                return Err(format!("{id} exited ({s}): {text}"));
            }
            if Instant::now() >= deadline {
                return Err(format!("{id} not ready: {text}"));
            }
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
        super::http_call(self.http_port, method, path, body, Duration::from_secs(60))
    }

    /// The broker's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Three (or more) etcd members on loopback, each of which can be killed
/// and restarted on its own data (the campaign's etcd faults).
pub struct EtcdCluster {
    dir: std::path::PathBuf,
    /// (name, client port, peer port, the process while it runs).
    members: Vec<(String, u16, u16, Option<Child>)>,
}

impl EtcdCluster {
    pub fn start(dir: &std::path::Path, n: usize) -> EtcdCluster {
        let members: Vec<(String, u16, u16, Option<Child>)> = (0..n)
            .map(|i| (format!("etcd{i}"), free_port(), free_port(), None))
            .collect();
        let mut c = EtcdCluster {
            dir: dir.to_owned(),
            members,
        };
        for i in 0..n {
            c.restart(i);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.leader().is_none() {
            assert!(
                Instant::now() < deadline,
                "the etcd cluster elected no leader"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn client_port(&self, i: usize) -> u16 {
        self.members[i].1
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.members[i].3.is_some()
    }

    /// Starts member `i` (again) on its own data directory.
    pub fn restart(&mut self, i: usize) {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|(name, _, peer, _)| format!("{name}=http://127.0.0.1:{peer}"))
            .collect();
        let (name, port, peer, child) = &mut self.members[i];
        assert!(child.is_none(), "{name} is running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{name}.log")))
            .unwrap();
        *child = Some(
            etcd_command(
                name,
                &self.dir.join(name.as_str()),
                *port,
                *peer,
                &initial.join(","),
            )
            .args(["--initial-cluster-token", "strobe-test"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn etcd"),
        );
    }

    /// kill -9 of member `i`.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].3.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The member that leads, as a running member reports it
    /// (`/v3/maintenance/status`).
    pub fn leader(&self) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leader = None;
        for (i, (_, port, _, child)) in self.members.iter().enumerate() {
            if child.is_none() {
                continue;
            }
            let Some(v) = etcd_status(*port) else {
                continue;
            };
            let member = v["header"]["member_id"].as_str().map(str::to_owned);
            ids.push((i, member));
            if let Some(l) = v["leader"].as_str()
                && l != "0"
            {
                leader = Some(l.to_owned());
            }
        }
        let leader = leader?;
        ids.into_iter()
            .find(|(_, m)| m.as_deref() == Some(leader.as_str()))
            .map(|(i, _)| i)
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill9(i);
        }
    }
}

/// `POST /v3/maintenance/status` on an etcd member (JSON, ids as strings).
fn etcd_status(port: u16) -> Option<serde_json::Value> {
    let (_, body) = super::http_call(
        port,
        "POST",
        "/v3/maintenance/status",
        "{}",
        Duration::from_secs(2),
    )?;
    // A chunked answer: the JSON is the line that starts with '{'.
    let json = body.lines().find(|l| l.starts_with('{'))?;
    serde_json::from_str(json).ok()
}

/// The broker binary cluster members run: `STROBE_BIN` if set (CI points
/// the fault campaign at the release build, which it builds anyway for the
/// conformance tests; a debug broker makes the campaign's read-back of
/// hundreds of thousands of messages take minutes), else this build's.
pub fn strobe_bin() -> std::path::PathBuf {
    std::env::var_os("STROBE_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_strobe").into())
}
