//! Prometheus `/metrics`: Pulsar's metric names over the broker's, topics'
//! and storage engine's counters, in the text exposition format.

use crate::*;
use strobe_ledger::{EngineMetric, MetricKind, MetricValue};

pub(crate) async fn metrics(State(s): State<Svc>) -> Response {
    let mut out = String::new();
    let cluster = &s.config.cluster_name;
    let families: [(&str, &str, &str); 10] = [
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
    ];
    let topics = s.loaded_topics();
    for (name, kind, help) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for t in &topics {
            let ls = t.ledger.stats();
            let subs = t.subscriptions();
            let v = match name {
                "pulsar_in_messages_total" => t.counters.msg_in.load(Relaxed),
                "pulsar_in_bytes_total" => t.counters.bytes_in.load(Relaxed),
                "pulsar_out_messages_total" => t.counters.msg_out.load(Relaxed),
                "pulsar_out_bytes_total" => t.counters.bytes_out.load(Relaxed),
                "pulsar_storage_read_entries_total" => t.counters.entries_read.load(Relaxed),
                "pulsar_storage_size" => ls.bytes,
                "pulsar_storage_entries" => ls.entries,
                "pulsar_subscriptions_count" => subs.len() as u64,
                "pulsar_producers_count" => t.producer_names().len() as u64,
                _ => subs.iter().map(|s| s.cursor.backlog()).sum(),
            };
            let _ = writeln!(
                out,
                "{name}{{cluster=\"{cluster}\",namespace=\"{}\",topic=\"{}\"}} {v}",
                t.name.namespace(),
                t.name
            );
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
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for t in &topics {
            let r = *t.counters.rates.lock();
            let v = match name {
                "pulsar_rate_in" => r.msg_in,
                "pulsar_rate_out" => r.msg_out,
                "pulsar_throughput_in" => r.bytes_in,
                _ => r.bytes_out,
            };
            let _ = writeln!(
                out,
                "{name}{{cluster=\"{cluster}\",namespace=\"{}\",topic=\"{}\"}} {v:.3}",
                t.name.namespace(),
                t.name
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP pulsar_storage_backlog_size Estimated bytes not yet acknowledged by the slowest subscription\n# TYPE pulsar_storage_backlog_size gauge"
    );
    for t in &topics {
        let _ = writeln!(
            out,
            "pulsar_storage_backlog_size{{cluster=\"{cluster}\",namespace=\"{}\",topic=\"{}\"}} {}",
            t.name.namespace(),
            t.name,
            t.backlog_bytes()
        );
    }
    storage_latency_metrics(&mut out, cluster, &topics);
    storage_engine_metrics(&mut out, cluster, &s.storage_engine_stats());
    cluster_metrics(&mut out, cluster, &s.cluster_counters);
    let _ = writeln!(
        out,
        "# HELP pulsar_topics_count Topics loaded on this broker\n# TYPE pulsar_topics_count gauge"
    );
    let _ = writeln!(
        out,
        "pulsar_topics_count{{cluster=\"{cluster}\"}} {}",
        topics.len()
    );
    process_metrics(&mut out);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// Lookups served and bundles moved (PIP-307 transfers and plain unloads),
/// with the transfers' phase times.
fn cluster_metrics(out: &mut String, cluster: &str, c: &strobe_broker::service::ClusterCounters) {
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
    let rows: [(&str, &str, &str, String); 6] = [
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
    for (name, kind, help, value) in rows {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{cluster=\"{cluster}\"}} {value}"
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
        let (name, help) = (&m.name, m.help);
        let _ = match m.value {
            MetricValue::Int(v) => writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{cluster=\"{cluster}\"}} {v}"
            ),
            MetricValue::Float(v) => writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{cluster=\"{cluster}\"}} {v:.3}"
            ),
        };
    }
}

/// Pulsar's storage write latency buckets (publish to durable), per topic:
/// `pulsar_storage_write_latency_le_0_5` … `_le_1000`, `_overflow`, `_count`
/// and `_sum` (milliseconds).
fn storage_latency_metrics(out: &mut String, cluster: &str, topics: &[Arc<Topic>]) {
    let names = strobe_broker::topic::LatencyBuckets::bucket_names("pulsar_storage_write_latency");
    for (i, name) in names.iter().enumerate() {
        let _ = writeln!(
            out,
            "# HELP {name} Entries whose publish-to-durable latency fell in this bucket\n# TYPE {name} gauge"
        );
        for t in topics {
            let _ = writeln!(
                out,
                "{name}{{cluster=\"{cluster}\",namespace=\"{}\",topic=\"{}\"}} {}",
                t.name.namespace(),
                t.name,
                t.counters.write_latency.buckets[i].load(Relaxed)
            );
        }
    }
    let _ = writeln!(
        out,
        "# TYPE pulsar_storage_write_latency_count gauge\n# TYPE pulsar_storage_write_latency_sum gauge"
    );
    for t in topics {
        let l = &t.counters.write_latency;
        let labels = format!(
            "cluster=\"{cluster}\",namespace=\"{}\",topic=\"{}\"",
            t.name.namespace(),
            t.name
        );
        let _ = writeln!(
            out,
            "pulsar_storage_write_latency_count{{{labels}}} {}\npulsar_storage_write_latency_sum{{{labels}}} {:.3}",
            l.count(),
            l.sum_micros.load(Relaxed) as f64 / 1000.0
        );
    }
}

/// Resident memory and CPU time, read from /proc (Linux).
fn process_metrics(out: &mut String) {
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
