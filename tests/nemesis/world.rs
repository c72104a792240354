//! The campaign's cluster: three etcd members, an S3 server (moto), and
//! three brokers, each reaching etcd, the store and its clients through
//! its own TCP proxies, so that any one of those links can be partitioned
//! or cut on its own; each broker's clock runs through libfaketime.
//!
//! Processes and proxies on loopback rather than the compose cluster's
//! containers: the same faults (a link cut is a proxy's partition, as a
//! dropped route; kill and pause are signals), with no image to build, and
//! a run that fits CI.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::cluster::{EtcdCluster, Member, Spawn};
use crate::common::proxy::Proxy;

/// libfaketime from Debian's `faketime` package (`tests/run-all.sh`
/// installs it).
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// One broker's links: to each etcd member, to the store, and from clients.
pub struct Links {
    pub etcd: Vec<Proxy>,
    pub store: Proxy,
    pub clients: Proxy,
}

/// A broker's clock as libfaketime runs it: a rate for its whole life
/// (libfaketime 0.9.10 recomputes fake time from the process's start when
/// the rate changes, which would move the monotonic clock backwards, as no
/// real clock does), and a forward offset that may grow while it runs.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub rate: f64,
    pub ahead_secs: u64,
}

impl Clock {
    fn spec(&self) -> String {
        format!("+{}s x{}\n", self.ahead_secs, self.rate)
    }
}

pub struct World {
    pub dir: PathBuf,
    pub etcd: EtcdCluster,
    moto: Child,
    pub bucket: String,
    pub links: Vec<Links>,
    pub brokers: Vec<Option<Member>>,
    pub clocks: Vec<Clock>,
    lives: usize,
    /// Each broker start that failed (the broker exited or was not ready).
    pub start_failures: Vec<String>,
}

impl World {
    pub async fn start(dir: &Path, brokers: usize) -> World {
        assert!(
            Path::new(FAKETIME).exists(),
            "{FAKETIME} is missing: apt-get install faketime (tests/run-all.sh does)"
        );
        let etcd = EtcdCluster::start(dir, 3);
        let (moto, s3_port) = start_moto(dir);
        let bucket = "nemesis".to_string();
        create_bucket(s3_port, &bucket);
        let mut links = Vec::new();
        for _ in 0..brokers {
            let mut to_etcd = Vec::new();
            for e in 0..etcd.len() {
                let p = Proxy::start().await;
                p.target(etcd.client_port(e));
                to_etcd.push(p);
            }
            let store = Proxy::start().await;
            store.target(s3_port);
            links.push(Links {
                etcd: to_etcd,
                store,
                clients: Proxy::start().await,
            });
        }
        let mut w = World {
            dir: dir.to_owned(),
            etcd,
            moto,
            bucket,
            links,
            brokers: (0..brokers).map(|_| None).collect(),
            clocks: vec![
                Clock {
                    rate: 1.0,
                    ahead_secs: 0
                };
                brokers
            ],
            lives: 0,
            start_failures: Vec::new(),
        };
        for i in 0..brokers {
            w.start_broker(i);
        }
        w
    }

    /// The service URL: every broker's client-side proxy.
    pub fn service_url(&self) -> String {
        let hosts: Vec<String> = self
            .links
            .iter()
            .map(|l| format!("127.0.0.1:{}", l.clients.port))
            .collect();
        format!("pulsar://{}", hosts.join(","))
    }

    pub fn name(i: usize) -> String {
        format!("b{}", i + 1)
    }

    /// Starts broker `i` (again) with its clock as `self.clocks[i]` says;
    /// a previous life's log is kept beside the new one.
    pub fn start_broker(&mut self, i: usize) {
        assert!(self.brokers[i].is_none());
        let name = World::name(i);
        let log = self.dir.join(format!("{name}.log"));
        if log.exists() {
            self.lives += 1;
            let _ = std::fs::rename(&log, self.dir.join(format!("{name}.{}.log", self.lives)));
        }
        let clock_file = self.dir.join(format!("{name}.faketime"));
        std::fs::write(&clock_file, self.clocks[i].spec()).unwrap();
        let l = &self.links[i];
        let etcd: Vec<String> = l
            .etcd
            .iter()
            .map(|p| format!("http://127.0.0.1:{}", p.port))
            .collect();
        let how = Spawn {
            metadata: format!("etcd:{}", etcd.join(",")),
            storage: format!("s3://{}/strobe", self.bucket),
            // Inactive topics are not deleted: the output of the transformers has no
            // durable subscription, and the checker reads every log back long after
            // the workload's producers went (Pulsar's default would delete it).
            toml: format!(
                "advertised_listeners = \"internal:pulsar://127.0.0.1:{}\"\nbroker_delete_inactive_topics_enabled = false\n",
                l.clients.port
            ),
            env: [
                (
                    "AWS_ENDPOINT_URL",
                    format!("http://127.0.0.1:{}", l.store.port),
                ),
                ("AWS_ACCESS_KEY_ID", "test".into()),
                ("AWS_SECRET_ACCESS_KEY", "test".into()),
                ("AWS_DEFAULT_REGION", "us-east-1".into()),
                ("LD_PRELOAD", FAKETIME.into()),
                ("FAKETIME_TIMESTAMP_FILE", clock_file.display().to_string()),
                // Re-read once a second: a clock jump takes effect at run time.
                ("FAKETIME_CACHE_DURATION", "1".into()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        };
        // A broker that exits at start is an anomaly the checker reports;
        // the campaign goes on with its next attempt (as a supervisor
        // would restart it).
        let mut tries = 0;
        let m = loop {
            match Member::try_spawn(&name, &self.dir, &how) {
                Ok(m) => break m,
                Err(e) if tries < 5 => {
                    tries += 1;
                    let last = e.lines().last().unwrap_or_default().to_string();
                    println!("{name} failed to start: {last}");
                    self.start_failures.push(format!("{name}: {last}"));
                    let _ = std::fs::rename(
                        self.dir.join(format!("{name}.log")),
                        self.dir.join(format!("{name}.failed{tries}.log")),
                    );
                    std::thread::sleep(Duration::from_secs(1));
                }
                Err(e) => panic!("{e}"),
            }
        };
        l.clients.target(m.port);
        self.brokers[i] = Some(m);
    }

    /// Moves broker `i`'s clock forward by `secs` while it runs.
    pub fn jump_clock(&mut self, i: usize, secs: u64) {
        self.clocks[i].ahead_secs += secs;
        let clock_file = self.dir.join(format!("{}.faketime", World::name(i)));
        std::fs::write(clock_file, self.clocks[i].spec()).unwrap();
    }

    pub fn http_port(&self, i: usize) -> Option<u16> {
        self.brokers[i].as_ref().map(|m| m.http_port)
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for b in &mut self.brokers {
            b.take();
        }
        let _ = self.moto.kill();
        let _ = self.moto.wait();
    }
}

/// moto's S3 server from the project's venv (`tests/run-all.sh` installs
/// `moto[server]`); its own port.
fn start_moto(dir: &Path) -> (Child, u16) {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/moto_server");
    assert!(
        bin.exists(),
        "{} is missing: .venv/bin/pip install 'moto[server]>=5.2.5' (tests/run-all.sh does)",
        bin.display()
    );
    let port = crate::common::free_port();
    let child = Command::new(&bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("moto.log")).unwrap())
        .spawn()
        .expect("spawn moto_server");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "moto did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, port)
}

fn create_bucket(port: u16, bucket: &str) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(
        out.starts_with("HTTP/1.1 200"),
        "creating the bucket: {out}"
    );
}
