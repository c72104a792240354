//! The campaign's history, its checker, and the report's picture.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use strobe_client::SubType;

use crate::faults::Fault;

/// One recorded operation and its outcome.
pub enum Op {
    /// Handed to a producer (topic, payload).
    Sent(&'static str, String),
    /// Acknowledged by the broker: sent at, acknowledged at.
    Acked(&'static str, String, Instant, Instant),
    /// No receipt by the deadline after the load stopped.
    Stuck(&'static str, String),
    /// Delivered on a subscription: (topic, subscription, payload).
    Recv(&'static str, &'static str, String),
    /// Returned by the reader of a partition.
    Read(u64, String),
    /// A consume-transform-produce transaction committed: its batch.
    Committed(Vec<String>),
    /// One aborted (or failed): why, and its batch.
    Aborted(String, Vec<String>),
    /// A line of the transformers' journal (JSON): each transaction with
    /// its id, consumer, outcome and batch, to follow an anomaly into the
    /// brokers' logs.
    Journal(String),
}

impl Op {
    pub fn acked(topic: &'static str, payload: String, sent_at: Instant) -> Op {
        Op::Acked(topic, payload, sent_at, Instant::now())
    }
}

pub struct History {
    started: Instant,
    sent: HashMap<&'static str, HashSet<String>>,
    acked: HashMap<&'static str, HashSet<String>>,
    stuck: HashMap<&'static str, Vec<String>>,
    deliveries: Vec<(&'static str, &'static str, String)>,
    reads: BTreeMap<u64, Vec<String>>,
    committed: (usize, usize),
    aborted: Vec<String>,
    /// Input messages of transactions the transformer saw commit, and of
    /// ones that failed.
    in_committed: HashSet<String>,
    /// Each input of a failed transaction: that transaction and why.
    in_aborted: HashMap<String, String>,
    /// Per second since the start: acknowledgements and their latencies (ms).
    per_second: Vec<(u64, Vec<u32>)>,
    /// The transformers' journal, one JSON object per line.
    pub journal: Vec<String>,
}

/// A payload's fields: producer, key, sequence within that key.
fn parse(p: &str) -> Option<(u64, u64, u64)> {
    let mut it = p.split(':').map(|x| x.parse().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

impl History {
    pub fn new(started: Instant) -> History {
        History {
            started,
            sent: HashMap::new(),
            acked: HashMap::new(),
            stuck: HashMap::new(),
            deliveries: Vec::new(),
            reads: BTreeMap::new(),
            committed: (0, 0),
            aborted: Vec::new(),
            in_committed: HashSet::new(),
            in_aborted: HashMap::new(),
            per_second: Vec::new(),
            journal: Vec::new(),
        }
    }

    pub fn add(&mut self, op: Op) {
        match op {
            Op::Sent(t, p) => {
                self.sent.entry(t).or_default().insert(p);
            }
            Op::Acked(t, p, sent_at, at) => {
                let s = at.duration_since(self.started).as_secs() as usize;
                if self.per_second.len() <= s {
                    self.per_second.resize_with(s + 1, Default::default);
                }
                self.per_second[s].0 += 1;
                self.per_second[s]
                    .1
                    .push(at.duration_since(sent_at).as_millis() as u32);
                self.acked.entry(t).or_default().insert(p);
            }
            Op::Stuck(t, p) => self.stuck.entry(t).or_default().push(p),
            Op::Recv(t, sub, p) => self.deliveries.push((t, sub, p)),
            Op::Read(part, p) => self.reads.entry(part).or_default().push(p),
            Op::Committed(batch) => {
                self.committed.0 += 1;
                self.committed.1 += batch.len();
                self.in_committed.extend(batch);
            }
            Op::Aborted(why, batch) => {
                for p in batch {
                    self.in_aborted.insert(p, why.clone());
                }
                self.aborted.push(why);
            }
            Op::Journal(line) => self.journal.push(line),
        }
    }

    /// The Python workload's history (JSON lines, `workload.py`).
    pub fn add_python(&mut self, text: &str) {
        let topic = crate::PY_TOPIC;
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let p = v["p"].as_str().unwrap_or_default().to_string();
            match v["e"].as_str() {
                Some("sent") => {
                    self.sent.entry(topic).or_default().insert(p);
                }
                Some("acked") => {
                    self.acked.entry(topic).or_default().insert(p);
                }
                Some("stuck") => self.stuck.entry(topic).or_default().push(p),
                Some("recv") => {
                    let sub = match v["sub"].as_str() {
                        Some("py-fo") => "py-fo",
                        _ => "py-sh",
                    };
                    self.deliveries.push((topic, sub, p));
                }
                _ => {}
            }
        }
    }

    pub fn acknowledged(&self, topic: &str) -> usize {
        self.acked.get(topic).map_or(0, HashSet::len)
    }

    pub fn totals(&self, logs: &BTreeMap<String, Vec<String>>) -> serde_json::Value {
        let per_topic = |m: &HashMap<&'static str, HashSet<String>>| {
            m.iter()
                .map(|(k, v)| (k.to_string(), v.len()))
                .collect::<BTreeMap<_, _>>()
        };
        serde_json::json!({
            "sent": per_topic(&self.sent),
            "acknowledged": per_topic(&self.acked),
            "stuck": self.stuck.values().map(Vec::len).sum::<usize>(),
            "deliveries": self.deliveries.len(),
            "read": self.reads.values().map(Vec::len).sum::<usize>(),
            "transactions_committed": self.committed.0,
            "messages_transformed": self.committed.1,
            "transactions_aborted": self.aborted.len(),
            "abort_reasons": self.aborted.iter().take(5).collect::<Vec<_>>(),
            "stored": logs.iter().map(|(k, v)| (k.clone(), v.len())).collect::<BTreeMap<_, _>>(),
        })
    }
}

pub type Anomalies = BTreeMap<&'static str, Vec<String>>;

/// Every anomaly the history and the logs show, by kind.
pub fn check(
    h: &History,
    logs: &BTreeMap<String, Vec<String>>,
    topic: &'static str,
    py_topic: &'static str,
    ctp_out: &str,
    subs: &[(&'static str, SubType, usize)],
) -> Anomalies {
    let mut a: Anomalies = BTreeMap::new();
    let py_subs: &[(&'static str, SubType, usize)] = &[
        ("py-fo", SubType::Failover, 1),
        ("py-sh", SubType::Shared, 1),
    ];
    let empty = HashSet::new();
    for (t, subs) in [(topic, subs), (py_topic, py_subs)] {
        let sent = h.sent.get(t).unwrap_or(&empty);
        let acked = h.acked.get(t).unwrap_or(&empty);
        let prefix = format!("{t}-partition-");
        let mine: Vec<(&String, &Vec<String>)> = logs
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .collect();
        for (name, log) in &mine {
            let mut count: HashMap<&String, u32> = HashMap::new();
            let mut last: HashMap<(u64, u64), u64> = HashMap::new();
            for s in log.iter() {
                *count.entry(s).or_default() += 1;
                if let Some((prod, key, seq)) = parse(s)
                    && let Some(prev) = last.insert((prod, key), seq)
                    && prev >= seq
                {
                    a.entry("producer order")
                        .or_default()
                        .push(format!("{name}: {s} after seq {prev}"));
                }
                if !sent.contains(s) {
                    a.entry("never sent")
                        .or_default()
                        .push(format!("{name} holds {s}"));
                }
            }
            for (s, n) in count {
                if n > 1 {
                    a.entry("stored twice")
                        .or_default()
                        .push(format!("{name}: {s} {n} times"));
                }
            }
        }
        let in_logs: HashSet<&String> = mine.iter().flat_map(|(_, l)| l.iter()).collect();
        let mut missing: Vec<&String> = acked.iter().filter(|p| !in_logs.contains(p)).collect();
        missing.sort_by_key(|p| parse(p));
        for p in missing {
            a.entry("lost from the log")
                .or_default()
                .push(format!("{t}: {p} acknowledged, absent"));
        }
        for (sub, ty, _) in subs {
            let got: Vec<&String> = h
                .deliveries
                .iter()
                .filter(|d| d.0 == t && d.1 == *sub)
                .map(|d| &d.2)
                .collect();
            let got_set: HashSet<&String> = got.iter().copied().collect();
            let mut lost: Vec<&String> = acked.iter().filter(|p| !got_set.contains(p)).collect();
            lost.sort_by_key(|p| parse(p));
            for p in lost {
                a.entry("lost").or_default().push(format!("{sub}: {p}"));
            }
            for p in &got {
                if !sent.contains(*p) {
                    a.entry("never sent")
                        .or_default()
                        .push(format!("{sub} got {p}"));
                }
            }
            if *ty != SubType::Shared {
                let mut firsts: HashMap<(u64, u64), u64> = HashMap::new();
                let mut seen: HashSet<&String> = HashSet::new();
                for p in &got {
                    if !seen.insert(p) {
                        continue;
                    }
                    if let Some((prod, key, seq)) = parse(p)
                        && let Some(prev) = firsts.insert((prod, key), seq)
                        && prev >= seq
                    {
                        a.entry("key order")
                            .or_default()
                            .push(format!("{sub}: {p} first delivered after seq {prev}"));
                    }
                }
            }
        }
        for p in h.stuck.get(t).into_iter().flatten() {
            a.entry("stuck producer")
                .or_default()
                .push(format!("{t}: {p} has no receipt"));
        }
    }
    // A reader returns its partition's log, in order, whole.
    for (p, read) in &h.reads {
        let log = &logs[&format!("{topic}-partition-{p}")];
        if read != log {
            let at = read.iter().zip(log).position(|(x, y)| x != y);
            a.entry("reader").or_default().push(format!(
                "partition {p}: read {}, the log holds {}, first difference at {:?}",
                read.len(),
                log.len(),
                at
            ));
        }
    }
    // Consume-transform-produce: the output is the input, each once.
    let out = &logs[ctp_out];
    let mut once: HashSet<&str> = HashSet::new();
    for o in out {
        let x = o.strip_prefix("t:").unwrap_or(o);
        if !once.insert(x) {
            a.entry("transaction duplicate")
                .or_default()
                .push(format!("{x} twice in the output"));
        }
    }
    let input: HashSet<&str> = logs
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{topic}-partition-")))
        .flat_map(|(_, l)| l.iter().map(String::as_str))
        .collect();
    for x in &once {
        if !input.contains(x) {
            a.entry("transaction output never input")
                .or_default()
                .push(x.to_string());
        }
    }
    let mut untransformed: Vec<&&str> = input.iter().filter(|x| !once.contains(**x)).collect();
    untransformed.sort_by_key(|x| parse(x));
    for x in untransformed {
        // Committed (as the transformer saw it) yet absent from the output:
        // a transaction partly applied. Otherwise the input went by
        // untransformed (acknowledged without a committed transaction, or
        // never delivered).
        let (kind, how) = if h.in_committed.contains(*x) {
            (
                "transaction partly applied",
                "in a committed transaction".to_string(),
            )
        } else if let Some(why) = h.in_aborted.get(*x) {
            ("transaction lost", format!("last in failed {why}"))
        } else {
            (
                "transaction lost",
                "in no transaction the transformer ended".to_string(),
            )
        };
        a.entry(kind)
            .or_default()
            .push(format!("{x} is in the input, not the output ({how})"));
    }
    a
}

/// The fault timeline over throughput and publish latency, as SVG.
pub fn svg(h: &History, faults: &[Fault], secs: u64, healed_ms: u128) -> String {
    const KINDS: [&str; 7] = [
        "broker kill",
        "broker pause",
        "link cut",
        "etcd kill",
        "clock",
        "admin",
        "rolling restart",
    ];
    let (w, left, plot_h, row_h) = (1200.0, 110.0, 150.0, 16.0);
    let span = (h.per_second.len() as f64).max(secs as f64 + 10.0);
    let x = |s: f64| left + (w - left - 10.0) * s / span;
    let rate_max = h.per_second.iter().map(|s| s.0).max().unwrap_or(1).max(1) as f64;
    let p99 = |v: &Vec<u32>| {
        let mut v = v.clone();
        v.sort_unstable();
        v.get(v.len().saturating_sub(1) * 99 / 100)
            .copied()
            .unwrap_or(0)
    };
    let lat: Vec<u32> = h.per_second.iter().map(|s| p99(&s.1)).collect();
    let lat_max = lat.iter().copied().max().unwrap_or(1).max(1) as f64;
    let top2 = 30.0 + plot_h + 30.0;
    let top3 = top2 + plot_h + 30.0;
    let height = top3 + row_h * KINDS.len() as f64 + 30.0;
    let mut s = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{height}' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n"
    );
    let poly = |vals: &[f64], max: f64, top: f64, colour: &str| {
        let pts: Vec<String> = vals
            .iter()
            .enumerate()
            .map(|(i, v)| {
                format!(
                    "{:.1},{:.1}",
                    x(i as f64 + 0.5),
                    top + plot_h - plot_h * v / max
                )
            })
            .collect();
        format!(
            "<polyline fill='none' stroke='{colour}' stroke-width='1.2' points='{}'/>\n",
            pts.join(" ")
        )
    };
    let rates: Vec<f64> = h.per_second.iter().map(|s| s.0 as f64).collect();
    s += &format!("<text x='5' y='20'>acknowledged/s (max {rate_max})</text>\n");
    s += &format!(
        "<rect x='{left}' y='30' width='{}' height='{plot_h}' fill='none' stroke='#ccc'/>\n",
        w - left - 10.0
    );
    s += &poly(&rates, rate_max, 30.0, "#1f77b4");
    let lats: Vec<f64> = lat.iter().map(|v| *v as f64).collect();
    s += &format!(
        "<text x='5' y='{}'>publish p99 ms (max {lat_max})</text>\n",
        top2 - 10.0
    );
    s += &format!(
        "<rect x='{left}' y='{top2}' width='{}' height='{plot_h}' fill='none' stroke='#ccc'/>\n",
        w - left - 10.0
    );
    s += &poly(&lats, lat_max, top2, "#d62728");
    for (r, kind) in KINDS.iter().enumerate() {
        let y = top3 + row_h * r as f64;
        s += &format!("<text x='5' y='{:.1}'>{kind}</text>\n", y + 11.0);
        for f in faults.iter().filter(|f| f.kind == *kind) {
            let (a, b) = (
                f.from_ms as f64 / 1000.0,
                f.to_ms.max(f.from_ms + 200) as f64 / 1000.0,
            );
            s += &format!(
                "<rect x='{:.1}' y='{:.1}' width='{:.1}' height='{}' fill='#ff7f0e' opacity='0.7'><title>{}</title></rect>\n",
                x(a),
                y + 2.0,
                (x(b) - x(a)).max(1.5),
                row_h - 4.0,
                f.what
                    .replace('&', "&amp;")
                    .replace('<', "&lt;")
                    .replace('\'', "&apos;")
            );
        }
    }
    let healed = healed_ms as f64 / 1000.0;
    s += &format!(
        "<line x1='{0:.1}' x2='{0:.1}' y1='25' y2='{1:.1}' stroke='green' stroke-dasharray='4 3'/><text x='{2:.1}' y='{1:.1}' fill='green'>healed</text>\n",
        x(healed),
        height - 8.0,
        x(healed) + 3.0
    );
    let mut t = 0.0;
    while t <= span {
        s += &format!(
            "<text x='{:.1}' y='{:.1}' fill='#666'>{t:.0}s</text>\n",
            x(t),
            height - 8.0
        );
        t += (span / 10.0).max(1.0).round();
    }
    s + "</svg>\n"
}
