//! Where transaction state lives in the metadata store (after PIP-473's `TxnPaths`).
//!
//! - `/txn/tc-seq/<N>`: coordinator N's sequence counter (the next unreserved `leastSigBits`).
//! - `/txn/id/<most>_<least>`: a transaction's [`crate::TxnHeader`].
//! - `/txn/part/<most>_<least>/<participant>`: a participant that has not yet applied the outcome
//!   (written with ADD_PARTITION / ADD_SUBSCRIPTION, deleted by the participant once the outcome
//!   is durable there). A header is collected only when none is left.
//! - `/txn/buffer/<topic>`: a topic's transaction-buffer snapshot.
//! - `/txn/pending-ack/<topic>/<subscription>/<most>_<least>`: a subscription's pending acks.
//!
//! Topic and subscription names are escaped into one path segment each (`%`, `/` and `:` as
//! `%25`, `%2F`, `%3A`).

use strobe_model::TxnId;

pub const SEQ_PREFIX: &str = "/txn/tc-seq/";
pub const HEADER_PREFIX: &str = "/txn/id/";
pub const PART_PREFIX: &str = "/txn/part/";
pub const BUFFER_PREFIX: &str = "/txn/buffer/";
pub const PENDING_ACK_PREFIX: &str = "/txn/pending-ack/";

/// `"<most>_<least>"` (Pulsar's `TxnIds.toKey`).
pub fn txn_key(t: TxnId) -> String {
    format!("{}_{}", t.most_sig_bits, t.least_sig_bits)
}

/// The inverse of [`txn_key`].
pub fn parse_txn_key(s: &str) -> Option<TxnId> {
    let (m, l) = s.split_once('_')?;
    Some(TxnId {
        most_sig_bits: m.parse().ok()?,
        least_sig_bits: l.parse().ok()?,
    })
}

pub fn seq_path(tc: u64) -> String {
    format!("{SEQ_PREFIX}{tc}")
}

pub fn header_path(t: TxnId) -> String {
    format!("{HEADER_PREFIX}{}", txn_key(t))
}

/// Every header of coordinator `tc` (the `_` keeps `1_` from matching `11_`).
pub fn header_prefix_of(tc: u64) -> String {
    format!("{HEADER_PREFIX}{tc}_")
}

/// The transaction a header key names.
pub fn txn_of_header(key: &str) -> Option<TxnId> {
    parse_txn_key(key.strip_prefix(HEADER_PREFIX)?)
}

/// One participant of a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Participant {
    /// A topic (partition) written in the transaction.
    Partition(String),
    /// A subscription acked in the transaction.
    Subscription { topic: String, subscription: String },
}

impl Participant {
    /// Its path segment under [`part_prefix`].
    pub fn segment(&self) -> String {
        match self {
            Participant::Partition(t) => format!("p:{}", escape(t)),
            Participant::Subscription {
                topic,
                subscription,
            } => format!("s:{}:{}", escape(topic), escape(subscription)),
        }
    }

    /// The inverse of [`Participant::segment`].
    pub fn parse(segment: &str) -> Option<Participant> {
        if let Some(t) = segment.strip_prefix("p:") {
            return Some(Participant::Partition(unescape(t)?));
        }
        let rest = segment.strip_prefix("s:")?;
        let (t, s) = rest.split_once(':')?;
        Some(Participant::Subscription {
            topic: unescape(t)?,
            subscription: unescape(s)?,
        })
    }

    /// The topic the participant lives on.
    pub fn topic(&self) -> &str {
        match self {
            Participant::Partition(t) => t,
            Participant::Subscription { topic, .. } => topic,
        }
    }
}

/// `/txn/part/<txn>/`.
pub fn part_prefix(t: TxnId) -> String {
    format!("{PART_PREFIX}{}/", txn_key(t))
}

pub fn part_path(t: TxnId, p: &Participant) -> String {
    format!("{}{}", part_prefix(t), p.segment())
}

pub fn buffer_path(topic: &str) -> String {
    format!("{BUFFER_PREFIX}{}", escape(topic))
}

pub fn pending_ack_prefix(topic: &str, subscription: &str) -> String {
    format!(
        "{PENDING_ACK_PREFIX}{}/{}/",
        escape(topic),
        escape(subscription)
    )
}

pub fn pending_ack_path(topic: &str, subscription: &str, t: TxnId) -> String {
    format!("{}{}", pending_ack_prefix(topic, subscription), txn_key(t))
}

/// One path segment for any name.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            ':' => out.push_str("%3A"),
            c => out.push(c),
        }
    }
    out
}

/// The inverse of [`escape`]; `None` for an escape it never writes.
pub fn unescape(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 3)?;
        out.push(match code {
            "25" => '%',
            "2F" => '/',
            "3A" => ':',
            _ => return None,
        });
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys() {
        let t = TxnId {
            most_sig_bits: 3,
            least_sig_bits: 42,
        };
        assert_eq!(header_path(t), "/txn/id/3_42");
        assert_eq!(txn_of_header("/txn/id/3_42"), Some(t));
        assert!(header_path(t).starts_with(&header_prefix_of(3)));
        assert!(!header_path(t).starts_with(&header_prefix_of(33)));
        let p = Participant::Subscription {
            topic: "persistent://public/default/t-partition-1".into(),
            subscription: "a:b/c".into(),
        };
        assert_eq!(
            part_path(t, &p),
            "/txn/part/3_42/s:persistent%3A%2F%2Fpublic%2Fdefault%2Ft-partition-1:a%3Ab%2Fc"
        );
        strobe_metadata::validate_key(&part_path(t, &p)).unwrap();
    }

    proptest! {
        #[test]
        fn escape_round_trips(s in ".*", t in ".*") {
            prop_assert_eq!(unescape(&escape(&s)), Some(s.clone()));
            prop_assert!(!escape(&s).contains('/'));
            let p = Participant::Subscription { topic: s.clone(), subscription: t };
            prop_assert_eq!(Participant::parse(&p.segment()), Some(p));
            let q = Participant::Partition(s);
            prop_assert_eq!(Participant::parse(&q.segment()), Some(q));
        }
    }
}
