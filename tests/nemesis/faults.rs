//! The nemesis: seeded, overlapping faults on the campaign's [`World`],
//! each noted with its time, and healed when due.
//!
//! At most one broker is impaired at a time (killed, paused, cut off from
//! etcd, from the store or from its clients, or in a rolling restart) and at
//! most one etcd member is down: the cluster keeps a quorum and two brokers,
//! so every stall the checker finds is a bug, not the fault. Clock jumps,
//! transfers, unloads and bundle splits come on top, at any time.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::cluster::TTL_SECS;
use crate::world::{Clock, World};

/// xorshift64*: the campaign's only source of chance, so a seed replays it.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn between(&mut self, lo_ms: u64, hi_ms: u64) -> Duration {
        Duration::from_millis(lo_ms + self.below(hi_ms - lo_ms + 1))
    }
}

/// A fault on the timeline: when it began and ended (ms since the start),
/// its kind (one row of the report's picture) and what exactly.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Fault {
    pub from_ms: u128,
    pub to_ms: u128,
    pub kind: &'static str,
    pub what: String,
}

/// How an impaired broker is made whole.
enum Heal {
    Cont,
    Restart,
    EtcdLinks,
    StoreLink,
    /// Its clients' link: `true` resets the connections instead.
    ClientLink(bool),
}

pub type Timeline = Arc<Mutex<Vec<Fault>>>;

pub struct Nemesis {
    pub started: Instant,
    pub timeline: Timeline,
    /// The impaired broker: when it heals, how, and its open fault's index.
    impaired: Option<(usize, Instant, Heal, usize)>,
    /// The etcd member that is down, when it comes back, its fault's index.
    etcd_down: Option<(usize, Instant, usize)>,
}

impl Nemesis {
    pub fn new() -> Nemesis {
        Nemesis {
            started: Instant::now(),
            timeline: Default::default(),
            impaired: None,
            etcd_down: None,
        }
    }

    fn ms(&self) -> u128 {
        self.started.elapsed().as_millis()
    }

    /// Opens a fault on the timeline; returns its index.
    fn open(&self, kind: &'static str, what: String) -> usize {
        println!("{:>7} ms  {what}", self.ms());
        let mut t = self.timeline.lock().unwrap();
        t.push(Fault {
            from_ms: self.ms(),
            to_ms: self.ms(),
            kind,
            what,
        });
        t.len() - 1
    }

    fn close(&self, i: usize, how: &str) {
        let mut t = self.timeline.lock().unwrap();
        t[i].to_ms = self.ms();
        println!("{:>7} ms  {how} ({})", self.ms(), t[i].what);
    }

    /// Makes whole what is due (everything, with `all`).
    pub fn heal(&mut self, w: &mut World, all: bool) {
        let now = Instant::now();
        if let Some((i, at, _, _)) = &self.impaired
            && (all || *at <= now)
        {
            let i = *i;
            let (_, _, how, fault) = self.impaired.take().unwrap();
            match how {
                Heal::Cont => {
                    if let Some(m) = &w.brokers[i] {
                        m.signal("CONT");
                    }
                    self.close(fault, "SIGCONT");
                }
                Heal::Restart => {
                    tokio::task::block_in_place(|| w.start_broker(i));
                    self.close(fault, "restarted");
                }
                Heal::EtcdLinks => {
                    w.links[i].etcd.iter().for_each(|p| p.heal());
                    self.close(fault, "healed");
                }
                Heal::StoreLink => {
                    w.links[i].store.heal();
                    self.close(fault, "healed");
                }
                Heal::ClientLink(cut) => {
                    if cut {
                        w.links[i].clients.cut();
                    } else {
                        w.links[i].clients.heal();
                    }
                    self.close(fault, if cut { "connections reset" } else { "healed" });
                }
            }
        }
        if let Some((e, at, fault)) = self.etcd_down
            && (all || at <= now)
        {
            self.etcd_down = None;
            w.etcd.restart(e);
            self.close(fault, "restarted");
        }
    }

    /// One fault, chosen by `rng`.
    pub fn strike(&mut self, w: &mut World, rng: &mut Rng) {
        let n = w.brokers.len();
        let free = self.impaired.is_none();
        let b = rng.below(n as u64) as usize;
        let name = World::name(b);
        let until = |rng: &mut Rng, lo, hi| Instant::now() + rng.between(lo, hi);
        match rng.below(13) {
            0 | 1 if free => {
                w.brokers[b].take().unwrap().kill9();
                // Its next life may run a skewed clock.
                let rate = [1.0, 1.0, 1.0, 0.5, 0.8, 1.25, 2.0][rng.below(7) as usize];
                w.clocks[b] = Clock {
                    rate,
                    ahead_secs: 0,
                };
                let f = self.open(
                    "broker kill",
                    format!("kill -9 {name} (next clock x{rate})"),
                );
                // Its session must expire before it comes back.
                let at = until(rng, (TTL_SECS + 1) * 1000, (TTL_SECS + 5) * 1000);
                self.impaired = Some((b, at, Heal::Restart, f));
            }
            2 | 3 if free => {
                w.brokers[b].as_ref().unwrap().signal("STOP");
                let f = self.open("broker pause", format!("SIGSTOP {name}"));
                self.impaired = Some((b, until(rng, 1000, 20_000), Heal::Cont, f));
            }
            4 if free => {
                w.links[b].etcd.iter().for_each(|p| p.partition());
                let f = self.open("link cut", format!("{name} cut off from etcd"));
                self.impaired = Some((b, until(rng, 1000, 15_000), Heal::EtcdLinks, f));
            }
            5 if free => {
                w.links[b].store.partition();
                let f = self.open("link cut", format!("{name} cut off from the store"));
                self.impaired = Some((b, until(rng, 1000, 15_000), Heal::StoreLink, f));
            }
            6 if free => {
                w.links[b].clients.partition();
                let f = self.open("link cut", format!("{name} cut off from its clients"));
                let cut = rng.below(2) == 0;
                self.impaired = Some((b, until(rng, 1000, 15_000), Heal::ClientLink(cut), f));
            }
            7 if self.etcd_down.is_none() => {
                let leader = rng.below(2) == 0;
                let e = if leader {
                    w.etcd.leader()
                } else {
                    Some(rng.below(w.etcd.len() as u64) as usize)
                };
                if let Some(e) = e {
                    w.etcd.kill9(e);
                    let f = self.open(
                        "etcd kill",
                        format!(
                            "kill -9 etcd{e}{}",
                            if leader { " (the leader)" } else { "" }
                        ),
                    );
                    self.etcd_down = Some((e, until(rng, 2000, 10_000), f));
                }
            }
            8 if w.brokers[b].is_some() => {
                let secs = 1 + rng.below(30);
                w.jump_clock(b, secs);
                let f = self.open("clock", format!("{name}'s clock jumps {secs} s ahead"));
                self.close(f, "jumped");
            }
            k @ 9..=11 => self.admin(w, rng, k),
            12 if free => self.rolling_restart(w),
            _ => {}
        }
    }

    /// A transfer, an unload or a bundle split, through a live broker's
    /// admin API, in the background (a broker may wait on a paused one);
    /// noted with the answer when it ends.
    fn admin(&mut self, w: &World, rng: &mut Rng, k: u64) {
        let up: Vec<usize> = (0..w.brokers.len())
            .filter(|i| {
                w.brokers[*i].is_some() && !matches!(self.impaired, Some((j, ..)) if j == *i)
            })
            .collect();
        if up.is_empty() {
            return;
        }
        let via = up[rng.below(up.len() as u64) as usize];
        let dst = up[rng.below(up.len() as u64) as usize];
        let port = w.http_port(via).unwrap();
        let pick = rng.next();
        let (kind, verb) = match k {
            9 => ("admin", "transfer"),
            10 => ("admin", "unload"),
            _ => ("admin", "split"),
        };
        let f = self.open(kind, format!("{verb} via {}", World::name(via)));
        let (timeline, started) = (self.timeline.clone(), self.started);
        let action = tokio::task::spawn_blocking(move || {
            let (_, body) = http(port, "GET", "/admin/v2/namespaces/public/default/bundles")?;
            let b: serde_json::Value = serde_json::from_str(&body).ok()?;
            let bounds: Vec<String> = b["boundaries"]
                .as_array()?
                .iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect();
            let w = (pick % (bounds.len().max(2) as u64 - 1)) as usize;
            let bundle = format!("{}_{}", bounds.get(w)?, bounds.get(w + 1)?);
            let ns = "/admin/v2/namespaces/public/default";
            let (path, what) = match verb {
                "transfer" => (
                    format!(
                        "{ns}/{bundle}/unload?destinationBroker={}",
                        World::name(dst)
                    ),
                    format!("transfer {bundle} to {}", World::name(dst)),
                ),
                "unload" => (format!("{ns}/{bundle}/unload"), format!("unload {bundle}")),
                _ => (
                    format!("{ns}/{bundle}/split?unload=true"),
                    format!("split {bundle}"),
                ),
            };
            let (st, body) = http(port, "PUT", &path)?;
            Some(if st < 300 {
                format!("{what}: {st}")
            } else {
                format!("{what}: {st} {}", body.trim())
            })
        });
        tokio::spawn(async move {
            let what = action.await.ok().flatten();
            let mut t = timeline.lock().unwrap();
            t[f].to_ms = started.elapsed().as_millis();
            let what = what.unwrap_or_else(|| format!("{verb}: no answer"));
            println!("{:>7} ms  {what}", t[f].to_ms);
            t[f].what = what;
        });
    }

    /// Restarts every broker in turn, gracefully (SIGTERM), each once the
    /// one before is back.
    fn rolling_restart(&mut self, w: &mut World) {
        let f = self.open("rolling restart", "rolling restart".into());
        for i in 0..w.brokers.len() {
            if let Some(mut m) = w.brokers[i].take() {
                m.signal("TERM");
                tokio::task::block_in_place(|| {
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while m.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    drop(m);
                    w.start_broker(i);
                });
            }
        }
        self.close(f, "done");
    }
}

/// An admin request: (status, body), `None` if the broker did not answer.
pub fn http(port: u16, method: &str, path: &str) -> Option<(u16, String)> {
    crate::common::http_call(port, method, path, "", Duration::from_secs(30))
}
