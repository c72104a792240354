//! `strobe admin scalable-topics`: pulsar-admin's `scalable-topics` verbs
//! (list, create, get-metadata, stats, delete, split-segment,
//! merge-segments, seek, clear-backlog) over `/admin/v2/scalable/...`.

use anyhow::{Context, bail};
use clap::Subcommand;
use serde_json::Value;

use crate::admin_http::{Http, seg, segs};

#[derive(Debug, Subcommand)]
pub enum ScalableCmd {
    /// The scalable topics of a namespace.
    List {
        /// tenant/namespace
        namespace: String,
        /// Only topics with this property (key=value; repeatable, all must match).
        #[arg(short = 'p', long = "property")]
        properties: Vec<String>,
    },
    /// Creates a scalable topic.
    Create {
        /// topic://tenant/ns/name or tenant/ns/name
        topic: String,
        /// Initial segments.
        #[arg(short = 's', long = "num-segments", default_value_t = 1)]
        segments: u32,
        /// A property (key=value; repeatable).
        #[arg(short = 'p', long = "property")]
        properties: Vec<String>,
    },
    /// The topic's layout: its segments, their ranges, states and lineage.
    GetMetadata { topic: String },
    /// Its segments' producers, consumers and backlogs.
    Stats { topic: String },
    /// Deletes the topic and its segments.
    Delete {
        topic: String,
        /// Even with producers or consumers connected.
        #[arg(short = 'f', long)]
        force: bool,
    },
    /// Splits an active segment in two at the middle of its range.
    SplitSegment {
        topic: String,
        #[arg(short = 's', long = "segment-id")]
        segment: u64,
    },
    /// Merges two adjacent active segments.
    MergeSegments {
        topic: String,
        #[arg(long = "segment-id-1")]
        first: u64,
        #[arg(long = "segment-id-2")]
        second: u64,
    },
    /// Moves a subscription to a time on every segment.
    Seek {
        topic: String,
        #[arg(short = 's', long = "subscription")]
        subscription: String,
        /// How far back: 30s, 10m, 1h, 2d.
        #[arg(short = 't', long = "time")]
        time: String,
    },
    /// Makes a v4 topic (persistent://, partitioned or not) the scalable
    /// topic of the same name: its partitions become sealed parents.
    Migrate {
        /// tenant/ns/name (its persistent:// topic)
        topic: String,
        /// Even while v4 producers or consumers use it.
        #[arg(short = 'f', long)]
        force: bool,
    },
    /// The topic's override of the autoscale policy.
    GetAutoScalePolicy { topic: String },
    /// Sets the topic's override: JSON with any of enabled, minSegments,
    /// maxSegments, maxDagDepth, split/mergeCooldownSeconds,
    /// mergeWindowSeconds and the eight split/merge thresholds.
    SetAutoScalePolicy { topic: String, policy: String },
    /// Removes the topic's override (the namespace's and the broker's apply).
    RemoveAutoScalePolicy { topic: String },
    /// Acknowledges everything a subscription has on every segment.
    ClearBacklog {
        topic: String,
        #[arg(short = 's', long = "subscription")]
        subscription: String,
    },
}

/// `topic://t/ns/x` or `t/ns/x` as the path `t/ns/x` (each part escaped).
fn topic_path(topic: &str) -> anyhow::Result<String> {
    let rest = topic.strip_prefix("topic://").unwrap_or(topic);
    let mut parts = rest.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(t), Some(n), Some(x)) if !t.is_empty() && !n.is_empty() && !x.is_empty() => {
            Ok(format!("{}/{}/{}", seg(t), seg(n), seg(x)))
        }
        _ => {
            bail!("topic {topic:?}: expected topic://<tenant>/<ns>/<name> or <tenant>/<ns>/<name>")
        }
    }
}

fn key_value(p: &str) -> anyhow::Result<(String, String)> {
    p.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .with_context(|| format!("property {p:?}: expected key=value"))
}

/// `30s`, `10m`, `1h`, `2d` (or plain seconds) in milliseconds.
fn duration_ms(s: &str) -> anyhow::Result<u64> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n.parse().with_context(|| format!("time {s:?}"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        "w" => n * 7 * 86_400,
        _ => bail!("time {s:?}: units are s, m, h, d, w"),
    };
    Ok(secs * 1000)
}

/// What a verb printed: a JSON document, or a sentence.
pub enum Answer {
    Json(Value),
    Done(String),
}

pub fn run(http: &Http, cmd: ScalableCmd) -> anyhow::Result<Answer> {
    let base = "/admin/v2/scalable";
    Ok(match cmd {
        ScalableCmd::List {
            namespace,
            properties,
        } => {
            let mut q = Vec::new();
            for p in &properties {
                key_value(p)?;
                q.push(format!("property={}", seg(p)));
            }
            let q = if q.is_empty() {
                String::new()
            } else {
                format!("?{}", q.join("&"))
            };
            Answer::Json(http.get(&format!("{base}/{}{q}", segs(&namespace)))?)
        }
        ScalableCmd::Create {
            topic,
            segments,
            properties,
        } => {
            let props: serde_json::Map<String, Value> = properties
                .iter()
                .map(|p| key_value(p).map(|(k, v)| (k, Value::String(v))))
                .collect::<anyhow::Result<_>>()?;
            http.send(
                "PUT",
                &format!(
                    "{base}/{}?numInitialSegments={segments}",
                    topic_path(&topic)?
                ),
                &Value::Object(props).to_string(),
            )?;
            Answer::Done(format!("created {topic} with {segments} segment(s)"))
        }
        ScalableCmd::GetMetadata { topic } => {
            Answer::Json(http.get(&format!("{base}/{}", topic_path(&topic)?))?)
        }
        ScalableCmd::Stats { topic } => {
            Answer::Json(http.get(&format!("{base}/{}/stats", topic_path(&topic)?))?)
        }
        ScalableCmd::Delete { topic, force } => {
            http.send(
                "DELETE",
                &format!("{base}/{}?force={force}", topic_path(&topic)?),
                "",
            )?;
            Answer::Done(format!("deleted {topic}"))
        }
        ScalableCmd::SplitSegment { topic, segment } => {
            let body = http.send(
                "POST",
                &format!("{base}/{}/split/{segment}", topic_path(&topic)?),
                "",
            )?;
            let layout: Value = serde_json::from_slice(&body)?;
            Answer::Done(format!(
                "split segment {segment} of {topic}: epoch {}",
                layout["epoch"]
            ))
        }
        ScalableCmd::MergeSegments {
            topic,
            first,
            second,
        } => {
            let body = http.send(
                "POST",
                &format!("{base}/{}/merge/{first}/{second}", topic_path(&topic)?),
                "",
            )?;
            let layout: Value = serde_json::from_slice(&body)?;
            Answer::Done(format!(
                "merged segments {first} and {second} of {topic}: epoch {}",
                layout["epoch"]
            ))
        }
        ScalableCmd::Seek {
            topic,
            subscription,
            time,
        } => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_millis() as u64;
            let ts = now.saturating_sub(duration_ms(&time)?);
            http.send(
                "POST",
                &format!(
                    "{base}/{}/subscriptions/{}/seek?timestamp={ts}",
                    topic_path(&topic)?,
                    seg(&subscription)
                ),
                "",
            )?;
            Answer::Done(format!("{subscription} on {topic} moved back {time}"))
        }
        ScalableCmd::Migrate { topic, force } => {
            let v4 = topic.strip_prefix("persistent://").unwrap_or(&topic);
            http.send(
                "POST",
                &format!("{base}/{}/migrate?force={force}", topic_path(v4)?),
                "",
            )?;
            Answer::Done(format!("migrated {topic} to a scalable topic"))
        }
        ScalableCmd::GetAutoScalePolicy { topic } => {
            Answer::Json(http.get(&format!("{base}/{}/autoScalePolicy", topic_path(&topic)?))?)
        }
        ScalableCmd::SetAutoScalePolicy { topic, policy } => {
            let v: Value = serde_json::from_str(&policy)
                .map_err(|e| anyhow::anyhow!("the policy is not JSON: {e}"))?;
            http.send(
                "POST",
                &format!("{base}/{}/autoScalePolicy", topic_path(&topic)?),
                &v.to_string(),
            )?;
            Answer::Done(format!("set the autoscale policy of {topic}"))
        }
        ScalableCmd::RemoveAutoScalePolicy { topic } => {
            http.send(
                "DELETE",
                &format!("{base}/{}/autoScalePolicy", topic_path(&topic)?),
                "",
            )?;
            Answer::Done(format!("removed the autoscale policy of {topic}"))
        }
        ScalableCmd::ClearBacklog {
            topic,
            subscription,
        } => {
            http.send(
                "POST",
                &format!(
                    "{base}/{}/subscriptions/{}/skip-all",
                    topic_path(&topic)?,
                    seg(&subscription)
                ),
                "",
            )?;
            Answer::Done(format!("cleared the backlog of {subscription} on {topic}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_times() {
        assert_eq!(topic_path("topic://t/n/a b").unwrap(), "t/n/a%20b");
        assert_eq!(topic_path("t/n/x").unwrap(), "t/n/x");
        assert!(topic_path("t/n").is_err());
        assert_eq!(duration_ms("90").unwrap(), 90_000);
        assert_eq!(duration_ms("2h").unwrap(), 7_200_000);
        assert!(duration_ms("1y").is_err());
        assert_eq!(key_value("a=b=c").unwrap(), ("a".into(), "b=c".into()));
    }
}
