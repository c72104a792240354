//! Prometheus `/metrics`: Pulsar's metric names over the broker's, topics'
//! and storage engine's counters, in the text exposition format.

use crate::api::*;
use strobe_ledger::{EngineMetric, MetricKind, MetricValue};

pub(crate) async fn metrics(
    State(s): State<Svc>,
    axum::extract::RawQuery(q): axum::extract::RawQuery,
) -> Response {
    let names = crate::metrics_only::requested(q.as_deref());
    let out = if names.is_empty() {
        render(&s)
    } else {
        crate::metrics_only::keep(
            &render_for(&s, crate::metrics_only::wants_topics(&names)),
            &names,
        )
    };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// The whole page.
pub(crate) fn render(s: &BrokerService) -> String {
    render_for(s, true)
}

/// The page; without the per-topic families' series unless `topics`.
fn render_for(s: &BrokerService, with_topics: bool) -> String {
    let mut out = String::new();
    let cluster = &s.config.cluster_name;
    let families: [(&str, &str, &str); 13] = [
        (
            "pulsar_in_messages_total",
            "counter",
            "Messages published to the topic",
        ),
        (
            "pulsar_in_bytes_total",
            "counter",
            "Bytes published to the topic",
        ),
        (
            "pulsar_out_messages_total",
            "counter",
            "Messages dispatched from the topic",
        ),
        (
            "pulsar_out_bytes_total",
            "counter",
            "Bytes dispatched from the topic",
        ),
        (
            "pulsar_storage_read_entries_total",
            "counter",
            "Entries read from storage by the topic's dispatchers (Pulsar exposes the rate as pulsar_storage_read_rate)",
        ),
        ("pulsar_storage_size", "gauge", "Bytes stored for the topic"),
        (
            "pulsar_storage_entries",
            "gauge",
            "Entries stored for the topic",
        ),
        (
            "pulsar_subscriptions_count",
            "gauge",
            "Subscriptions of the topic",
        ),
        (
            "pulsar_producers_count",
            "gauge",
            "Producers connected to the topic",
        ),
        (
            "pulsar_msg_backlog",
            "gauge",
            "Entries not yet acknowledged, summed over subscriptions",
        ),
        (
            "pulsar_publish_rate_limit_times",
            "counter",
            "Times a producer's connection paused reading for the topic's publish rate",
        ),
        (
            "strobe_dispatch_rate_limit_times",
            "counter",
            "Times a dispatcher of the topic paused for a topic or subscription dispatch rate",
        ),
        (
            "strobe_subscribe_rate_limit_times",
            "counter",
            "Subscribes refused by the topic's subscribe rate",
        ),
    ];
    let topics = if with_topics {
        s.loaded_topics()
    } else {
        Vec::new()
    };
    // Each topic read and its labels written once for the page, not once
    // a family: a scrape of 10,670 topics took 354 ms when every family
    // copied the topic's subscriptions and producers and formatted its
    // labels again (issue 47).
    let rows: Vec<TopicRow> = if s.config.expose_topic_level_metrics_in_prometheus {
        topics
            .iter()
            .map(|t| TopicRow::of(topic_labels(cluster, t), t))
            .collect()
    } else {
        by_namespace(cluster, &topics)
    };
    for (i, (name, kind, help)) in families.into_iter().enumerate() {
        let help = escape_help(help);
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for r in &rows {
            let _ = writeln!(out, "{name}{{{}}} {}", r.labels, r.values[i]);
        }
    }
    let rates: [(&str, &str); 4] = [
        (
            "pulsar_rate_in",
            "Messages per second published to the topic",
        ),
        (
            "pulsar_rate_out",
            "Messages per second dispatched from the topic",
        ),
        (
            "pulsar_throughput_in",
            "Bytes per second published to the topic",
        ),
        (
            "pulsar_throughput_out",
            "Bytes per second dispatched from the topic",
        ),
    ];
    for (name, help) in rates {
        let help = escape_help(help);
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for row in &rows {
            let r = &row.rates;
            let v = match name {
                "pulsar_rate_in" => r.msg_in,
                "pulsar_rate_out" => r.msg_out,
                "pulsar_throughput_in" => r.bytes_in,
                _ => r.bytes_out,
            };
            let _ = writeln!(out, "{name}{{{}}} {v:.3}", row.labels);
        }
    }
    let _ = writeln!(
        out,
        "# HELP pulsar_storage_backlog_size Estimated bytes not yet acknowledged by the slowest subscription\n# TYPE pulsar_storage_backlog_size gauge"
    );
    for row in &rows {
        let _ = writeln!(
            out,
            "pulsar_storage_backlog_size{{{}}} {}",
            row.labels, row.backlog_bytes
        );
    }
    storage_latency_metrics(&mut out, &rows);
    storage_engine_metrics(&mut out, cluster, &s.storage_engine_stats());
    disk_metrics(&mut out, s);
    let (running, waiting) = s.topic_loads();
    let _ = writeln!(
        out,
        "# HELP strobe_topic_loads_running Topic loads running now (at most max_concurrent_topic_load_request).\n# TYPE strobe_topic_loads_running gauge\nstrobe_topic_loads_running {running}\n# HELP strobe_topic_loads_waiting Topic loads waiting for their turn.\n# TYPE strobe_topic_loads_waiting gauge\nstrobe_topic_loads_waiting {waiting}"
    );
    cluster_metrics(&mut out, cluster, &s.cluster_counters);
    txn_metrics(&mut out, s);
    let store = s.metadata();
    let store_labels = labels(&[("cluster", cluster), ("backend", store.backend_name())]);
    for (name, help, value) in [
        (
            "strobe_metadata_writes_total",
            "Writes this broker made to the metadata store (embedded: log fsyncs, a group of concurrent commits counting once; etcd: transactions sent)",
            store.writes_made().to_string(),
        ),
        (
            "strobe_metadata_write_seconds_total",
            "Time those writes took, summed (etcd: from a transaction's send to its answer; embedded: not measured, 0)",
            format!("{:.6}", store.write_time().as_secs_f64()),
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{store_labels}}} {value}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP pulsar_topics_count Topics loaded on this broker\n# TYPE pulsar_topics_count gauge"
    );
    let _ = writeln!(
        out,
        "pulsar_topics_count{{{}}} {}",
        labels(&[("cluster", cluster)]),
        s.loaded_topic_count()
    );
    process_metrics(&mut out);
    out
}

/// Label pairs as written between a series' braces. Every label value on the
/// page goes through here: topic names come from clients (topics are created
/// on first use), and an unescaped quote or newline in one would end the
/// value early and let the rest of the name read as series of its own.
fn labels(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        for c in value.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out
}

/// What the page shows of one topic, read once: its series' labels, the
/// values of the counter and gauge families in their order, its rates.
struct TopicRow {
    labels: String,
    values: [u64; 13],
    rates: strobe_broker::topic::Rates,
    backlog_bytes: u64,
    /// The write latency histogram's buckets, and its sum.
    write_latency: Vec<u64>,
    write_latency_sum_micros: u64,
}

impl TopicRow {
    fn of(labels: String, t: &Topic) -> TopicRow {
        let ls = t.ledger.stats();
        let subs = t.subscriptions();
        TopicRow {
            backlog_bytes: t.backlog_bytes(),
            write_latency: t.counters.write_latency.counts(),
            write_latency_sum_micros: t.counters.write_latency.sum_micros.load(Relaxed),
            labels,
            values: [
                t.counters.msg_in.load(Relaxed),
                t.counters.bytes_in.load(Relaxed),
                t.counters.msg_out.load(Relaxed),
                t.counters.bytes_out.load(Relaxed),
                t.counters.entries_read.load(Relaxed),
                ls.bytes,
                ls.entries,
                subs.len() as u64,
                t.producer_count() as u64,
                subs.iter().map(|s| s.cursor.backlog()).sum(),
                t.limits.publish_throttled.load(Relaxed),
                t.limits.dispatch_throttled.load(Relaxed),
                t.limits.subscribe_throttled.load(Relaxed),
            ],
            rates: *t.counters.rates.lock(),
        }
    }
}

/// `topics` summed per namespace, in the namespaces' order, labelled with
/// the cluster and namespace only (`expose_topic_level_metrics_in_prometheus
/// = false`).
fn by_namespace(cluster: &str, topics: &[Arc<Topic>]) -> Vec<TopicRow> {
    let mut sums: std::collections::BTreeMap<&str, TopicRow> = std::collections::BTreeMap::new();
    for t in topics {
        let ns = t.name.namespace();
        let Some(sum) = sums.get_mut(ns) else {
            let labels = labels(&[("cluster", cluster), ("namespace", ns)]);
            sums.insert(ns, TopicRow::of(labels, t));
            continue;
        };
        let row = TopicRow::of(String::new(), t);
        for (a, b) in sum.values.iter_mut().zip(row.values) {
            *a += b;
        }
        sum.rates.msg_in += row.rates.msg_in;
        sum.rates.msg_out += row.rates.msg_out;
        sum.rates.bytes_in += row.rates.bytes_in;
        sum.rates.bytes_out += row.rates.bytes_out;
        sum.backlog_bytes += row.backlog_bytes;
        for (a, b) in sum.write_latency.iter_mut().zip(row.write_latency) {
            *a += b;
        }
        sum.write_latency_sum_micros += row.write_latency_sum_micros;
    }
    sums.into_values().collect()
}

/// The labels of a per-topic series.
fn topic_labels(cluster: &str, t: &Topic) -> String {
    labels(&[
        ("cluster", cluster),
        ("namespace", t.name.namespace()),
        ("topic", &t.name.to_string()),
    ])
}

/// HELP text: the text format escapes only backslashes and newlines there.
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Transactions, under Pulsar's names: per coordinator partition this broker has led
/// (`pulsar_txn_*`, label `coordinator_id`), and per topic buffer (`pulsar_txn_tb_*`).
fn txn_metrics(out: &mut String, s: &BrokerService) {
    use strobe_broker::topic::TxnBufferStats;
    use strobe_txn::coordinator::PartitionStats;
    let Some(txn) = s.txn() else { return };
    let cluster = &s.config.cluster_name;
    let stats = txn.coordinator.stats();
    type CoordinatorRow = (
        &'static str,
        &'static str,
        &'static str,
        fn(&PartitionStats) -> u64,
    );
    let rows: [CoordinatorRow; 5] = [
        (
            "pulsar_txn_active_count",
            "gauge",
            "Open transactions of the coordinator (while led here)",
            |p| p.open,
        ),
        (
            "pulsar_txn_created_total",
            "counter",
            "Transactions the coordinator opened here",
            |p| p.created,
        ),
        (
            "pulsar_txn_committed_total",
            "counter",
            "Transactions the coordinator committed here",
            |p| p.committed,
        ),
        (
            "pulsar_txn_aborted_total",
            "counter",
            "Transactions aborted by their clients here",
            |p| p.aborted,
        ),
        (
            "pulsar_txn_timeout_total",
            "counter",
            "Transactions aborted here by the timeout sweep",
            |p| p.timed_out,
        ),
    ];
    for (name, kind, help, value) in rows {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for p in stats.iter().filter(|p| p.leader || p.created > 0) {
            let id = p.tc_id.to_string();
            let l = labels(&[("cluster", cluster), ("coordinator_id", &id)]);
            let _ = writeln!(out, "{name}{{{l}}} {}", value(p));
        }
    }
    let name = "strobe_txn_outcomes_pushed_total";
    let _ = writeln!(
        out,
        "# HELP {name} Outcomes other brokers' coordinators pushed to participants here\n# TYPE {name} counter\n{name}{{{}}} {}",
        labels(&[("cluster", cluster)]),
        txn.ctx.pushed_in.load(std::sync::atomic::Ordering::Relaxed)
    );
    // Topics that took part in a transaction since they loaded (not every topic: the
    // families would double the series of a broker that never sees one).
    let topics: Vec<(Arc<Topic>, TxnBufferStats)> = s
        .loaded_topics()
        .into_iter()
        .filter_map(|t| t.txn_stats().map(|st| (t, st)))
        .filter(|(_, st)| {
            st.ongoing + st.aborted_kept > 0 || st.committed_total + st.aborted_total > 0
        })
        .collect();
    type BufferRow = (
        &'static str,
        &'static str,
        &'static str,
        fn(&TxnBufferStats) -> u64,
    );
    let rows: [BufferRow; 4] = [
        (
            "pulsar_txn_tb_active_total",
            "gauge",
            "Transactions with entries in the topic and no outcome yet",
            |b| b.ongoing as u64,
        ),
        (
            "pulsar_txn_tb_aborted_kept",
            "gauge",
            "Aborted transactions whose entries the topic still skips",
            |b| b.aborted_kept as u64,
        ),
        (
            "pulsar_txn_tb_committed_total",
            "counter",
            "Transactions committed on the topic since it loaded",
            |b| b.committed_total,
        ),
        (
            "pulsar_txn_tb_aborted_total",
            "counter",
            "Transactions aborted on the topic since it loaded",
            |b| b.aborted_total,
        ),
    ];
    for (name, kind, help, value) in rows {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (t, st) in &topics {
            let _ = writeln!(out, "{name}{{{}}} {}", topic_labels(cluster, t), value(st));
        }
    }
}

/// Lookups served and bundles moved (PIP-307 transfers and plain unloads),
/// with the transfers' phase times.
fn cluster_metrics(out: &mut String, cluster: &str, c: &strobe_broker::service::ClusterCounters) {
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
    let rows: [(&str, &str, &str, String); 7] = [
        (
            "strobe_lookups_total",
            "counter",
            "Topic lookups (binary and HTTP) answered",
            get(&c.lookups).to_string(),
        ),
        (
            "strobe_bundle_transfers_total",
            "counter",
            "Bundles this broker transferred to another (PIP-307)",
            get(&c.transfers).to_string(),
        ),
        (
            "strobe_bundle_transfers_failed_total",
            "counter",
            "Transfers whose destination did not take the bundle (freed instead)",
            get(&c.transfers_failed).to_string(),
        ),
        (
            "strobe_bundle_unloads_total",
            "counter",
            "Bundles freed by a plain unload",
            get(&c.unloads).to_string(),
        ),
        (
            "strobe_bundle_splits_total",
            "counter",
            "Bundles this broker split in two (Splitting, then Deleted)",
            get(&c.splits).to_string(),
        ),
        (
            "strobe_bundle_transfer_close_seconds_total",
            "counter",
            "Time transfers spent closing topics (Releasing to Assigning)",
            format!("{:.6}", get(&c.transfer_close_us) as f64 / 1e6),
        ),
        (
            "strobe_bundle_transfer_take_seconds_total",
            "counter",
            "Time transfers waited for the destination to own the bundle",
            format!("{:.6}", get(&c.transfer_take_us) as f64 / 1e6),
        ),
    ];
    let labels = labels(&[("cluster", cluster)]);
    for (name, kind, help, value) in rows {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {value}"
        );
    }
}

/// The storage engine's own figures, as its backend names them (Pulsar has
/// no such family: its BookKeeper bookies export their journal's figures
/// themselves).
fn storage_engine_metrics(out: &mut String, cluster: &str, metrics: &[EngineMetric]) {
    for m in metrics {
        let kind = match m.kind {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
        };
        let name = &m.name;
        let help = escape_help(m.help);
        let labels = labels(&[("cluster", cluster)]);
        let _ = match m.value {
            MetricValue::Int(v) => writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {v}"
            ),
            MetricValue::Float(v) => writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {v:.3}"
            ),
        };
    }
}

/// Pulsar's storage write latency buckets (publish to durable), per topic:
/// `pulsar_storage_write_latency_le_0_5` … `_le_1000`, `_overflow`, `_count`
/// and `_sum` (milliseconds).
fn storage_latency_metrics(out: &mut String, rows: &[TopicRow]) {
    let names = strobe_broker::topic::LatencyBuckets::bucket_names("pulsar_storage_write_latency");
    for (i, name) in names.iter().enumerate() {
        let _ = writeln!(
            out,
            "# HELP {name} Entries whose publish-to-durable latency fell in this bucket\n# TYPE {name} gauge"
        );
        for row in rows {
            let _ = writeln!(out, "{name}{{{}}} {}", row.labels, row.write_latency[i]);
        }
    }
    let _ = writeln!(
        out,
        "# TYPE pulsar_storage_write_latency_count gauge\n# TYPE pulsar_storage_write_latency_sum gauge"
    );
    for row in rows {
        let labels = &row.labels;
        let count: u64 = row.write_latency.iter().sum();
        let _ = writeln!(
            out,
            "pulsar_storage_write_latency_count{{{labels}}} {count}\npulsar_storage_write_latency_sum{{{labels}}} {:.3}",
            row.write_latency_sum_micros as f64 / 1000.0
        );
    }
}

/// The disk guard's state (`service::disk`).
fn disk_metrics(out: &mut String, s: &BrokerService) {
    if let Some((ratio, free)) = s.disk.usage() {
        let _ = writeln!(
            out,
            "# HELP strobe_disk_usage_ratio Share of the data directory's file system used (blocks or inodes, the larger).\n# TYPE strobe_disk_usage_ratio gauge\nstrobe_disk_usage_ratio {ratio:.4}\n# HELP strobe_disk_free_bytes Bytes free on the data directory's file system.\n# TYPE strobe_disk_free_bytes gauge\nstrobe_disk_free_bytes {free}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP strobe_broker_read_only Whether the broker refuses writes for a full disk (1) or takes them (0).\n# TYPE strobe_broker_read_only gauge\nstrobe_broker_read_only {}\n# HELP strobe_broker_read_only_episodes_total Times the broker turned read-only for a full disk.\n# TYPE strobe_broker_read_only_episodes_total counter\nstrobe_broker_read_only_episodes_total {}\n# HELP strobe_broker_read_only_refusals_total Producers and topic creations refused while read-only.\n# TYPE strobe_broker_read_only_refusals_total counter\nstrobe_broker_read_only_refusals_total {}\n# HELP strobe_storage_no_space_errors_total Storage writes refused for want of space (ENOSPC, EDQUOT).\n# TYPE strobe_storage_no_space_errors_total counter\nstrobe_storage_no_space_errors_total {}",
        u8::from(s.disk.read_only().is_some()),
        s.disk.read_only_episodes.load(Relaxed),
        s.disk.refusals.load(Relaxed),
        strobe_ledger::disk::storage_full_errors()
    );
}

/// Resident memory, CPU time and open files, read from /proc (Linux), and the
/// runtime's live tasks: what a soak compares before and after (tests/soak/).
fn process_metrics(out: &mut String) {
    let _ = writeln!(
        out,
        "# TYPE process_open_fds gauge\nprocess_open_fds {}",
        strobe_broker::accept::open_files()
    );
    if let Ok((soft, _)) = strobe_broker::accept::files_limit() {
        let _ = writeln!(out, "# TYPE process_max_fds gauge\nprocess_max_fds {soft}");
    }
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let _ = writeln!(
            out,
            "# HELP strobe_runtime_alive_tasks Tasks alive in the broker's runtime.\n# TYPE strobe_runtime_alive_tasks gauge\nstrobe_runtime_alive_tasks {}",
            rt.metrics().num_alive_tasks()
        );
    }
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        for line in status.lines() {
            if let Some(kb) = line.strip_prefix("VmRSS:") {
                let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                let _ = writeln!(
                    out,
                    "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {}",
                    kb * 1024
                );
            }
        }
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        && let Some(rest) = stat.rsplit(')').next()
    {
        let f: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of stat (12 and 13 after the command).
        if f.len() > 13 {
            let ticks: u64 = f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
            let _ = writeln!(
                out,
                "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {}",
                ticks as f64 / 100.0
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strobe_broker::{Broker, BrokerConfig};

    /// One sample line of the text format: its name and its label pairs,
    /// with the values unescaped.
    type Sample = (String, Vec<(String, String)>);

    fn is_name(s: &str) -> bool {
        let mut c = s.chars();
        matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_' || f == ':')
            && c.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }

    /// A strict reader of the text exposition format: every line is a
    /// `# HELP`/`# TYPE` comment or `name{label="value",...} number`, label
    /// values use only the escapes `\\`, `\"` and `\n`, HELP text only `\\`
    /// and `\n`.
    fn parse(page: &str) -> Result<Vec<Sample>, String> {
        let mut samples = Vec::new();
        for (no, line) in page.lines().enumerate() {
            let err = |why: &str| format!("line {}: {why}: {line:?}", no + 1);
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
                if !is_name(name) {
                    return Err(err("bad metric name in HELP"));
                }
                let mut chars = help.chars();
                while let Some(c) = chars.next() {
                    if c == '\\' && !matches!(chars.next(), Some('\\' | 'n')) {
                        return Err(err("bad escape in HELP"));
                    }
                }
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').ok_or_else(|| err("TYPE"))?;
                if !is_name(name)
                    || !matches!(
                        kind,
                        "counter" | "gauge" | "histogram" | "summary" | "untyped"
                    )
                {
                    return Err(err("bad TYPE line"));
                }
                continue;
            }
            if line.starts_with('#') {
                return Err(err("unexpected comment"));
            }
            let end = line.find(['{', ' ']).ok_or_else(|| err("no value"))?;
            let name = &line[..end];
            if !is_name(name) {
                return Err(err("bad metric name"));
            }
            let mut labels = Vec::new();
            let mut rest = &line[end..];
            if let Some(mut l) = rest.strip_prefix('{') {
                loop {
                    if let Some(after) = l.strip_prefix('}') {
                        rest = after;
                        break;
                    }
                    let eq = l.find("=\"").ok_or_else(|| err("label without =\""))?;
                    let lname = &l[..eq];
                    if !is_name(lname) {
                        return Err(err("bad label name"));
                    }
                    let mut value = String::new();
                    let mut chars = l[eq + 2..].char_indices();
                    let close = loop {
                        match chars.next() {
                            None => return Err(err("unterminated label value")),
                            Some((i, '"')) => break eq + 2 + i,
                            Some((_, '\\')) => match chars.next() {
                                Some((_, '\\')) => value.push('\\'),
                                Some((_, '"')) => value.push('"'),
                                Some((_, 'n')) => value.push('\n'),
                                _ => return Err(err("bad escape in label value")),
                            },
                            Some((_, c)) => value.push(c),
                        }
                    };
                    labels.push((lname.to_owned(), value));
                    l = &l[close + 1..];
                    if let Some(after) = l.strip_prefix(',') {
                        l = after;
                    } else if !l.starts_with('}') {
                        return Err(err("expected , or } after a label"));
                    }
                }
            }
            let mut fields = rest
                .strip_prefix(' ')
                .ok_or_else(|| err("no space before the value"))?
                .split(' ');
            let value = fields.next().unwrap_or("");
            if value.parse::<f64>().is_err() {
                return Err(err("value is not a number"));
            }
            match fields.next() {
                None => {}
                Some(ts) if ts.parse::<i64>().is_ok() && fields.next().is_none() => {}
                Some(_) => return Err(err("trailing text after the value")),
            }
            samples.push((name.to_owned(), labels));
        }
        Ok(samples)
    }

    #[test]
    fn the_parser_refuses_what_it_should() {
        assert!(parse("a{b=\"c\"} 1\n# TYPE a gauge\n# HELP a x\\ny\n").is_ok());
        for bad in [
            "a{b=\"c} 1",
            "a{b=\"c\\t\"} 1",
            "a{b=\"c\"} 1 x",
            "a{b=\"c\"}} 1",
            "a{b=\"c\"}",
            "# HELP a x\\y",
            "fake_series\"} 2",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn help_text_escapes_backslashes_and_newlines() {
        let line = format!("# HELP a {}", escape_help("x\\y\nfake_series 2"));
        assert_eq!(line, "# HELP a x\\\\y\\nfake_series 2");
        assert_eq!(parse(&line).unwrap(), Vec::<Sample>::new());
    }

    #[tokio::test]
    async fn hostile_topic_and_cluster_names_stay_inside_their_label_values() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let cluster = "c\"l\\u\nster";
        let config = BrokerConfig {
            storage: "memory".into(),
            advertised_address: "127.0.0.1".into(),
            cluster_name: cluster.into(),
            ..BrokerConfig::default()
        };
        let broker = Broker::bind_on(config, listener).await.unwrap().start();
        let service = broker.service();
        let locals = [
            "q\"uote",
            "back\\slash",
            "x\"} 1 fake_series 2",
            "y\\\"} 1 fake_series{a=\"b\"} 2 # HELP",
        ];
        // Names with control characters (a newline that would start a series) are
        // refused before they get here; the cluster name above still carries one.
        for hostile in ["new\nline", "x\"} 1\nfake_series 2"] {
            assert!(
                TopicName::parse(&format!("non-persistent://public/default/{hostile}")).is_err()
            );
        }
        let mut names = Vec::new();
        for local in locals {
            for domain in ["persistent", "non-persistent"] {
                let name = TopicName::parse(&format!("{domain}://public/default/{local}")).unwrap();
                service.topic(&name, true).await.unwrap();
                names.push(name.to_string());
            }
        }

        let page = render(&service);
        let samples = parse(&page).unwrap_or_else(|e| panic!("{e}\n--- page ---\n{page}"));
        assert!(
            samples.iter().all(|(n, _)| n != "fake_series"),
            "an injected series: {page}"
        );
        for name in &names {
            let found = samples.iter().any(|(n, labels)| {
                n == "pulsar_storage_size"
                    && labels.contains(&("topic".to_owned(), name.clone()))
                    && labels.contains(&("cluster".to_owned(), cluster.to_owned()))
                    && labels.contains(&("namespace".to_owned(), "public/default".to_owned()))
            });
            assert!(found, "no pulsar_storage_size for {name:?}");
        }
        // Every family that carries a topic label has one series per topic.
        let topic_series = samples
            .iter()
            .filter(|(_, l)| l.iter().any(|(k, _)| k == "topic"))
            .count();
        assert_eq!(topic_series % names.len(), 0);
        broker.shutdown().await;
    }
}
