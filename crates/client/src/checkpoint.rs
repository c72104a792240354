//! A checkpoint: positions in a scalable topic's segments that the
//! application keeps (Pulsar's `CheckpointV5`), its bytes, and where a
//! segment reader resumes from it. Its own file so the stream session
//! (which opens a checkpoint group member's readers) and the checkpoint
//! consumer both import it.

use std::collections::{BTreeMap, BTreeSet};

use prost::Message as _;
use strobe_model::{MessageId, Position};
use strobe_wire::proto::MessageIdData;

use crate::consumer::id_data;
use crate::error::{Error, Result};
use crate::scalable_consumer::{Positions, Segments, StartAt};

/// Where a checkpoint consumer starts on segments a checkpoint names no
/// position in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointKind {
    /// Each named segment after its position; the others from their start.
    Regular,
    /// Every segment from its start.
    Earliest,
    /// The segments there now at their end; later ones from their start.
    Latest,
}

/// Positions in a scalable topic's segments: the last message the
/// application received from each. Its bytes are Pulsar's
/// (`CheckpointV5`): `[kind u8: 0 regular, 1 earliest, 2 latest]
/// [count i32]`, then per segment `[segment id i64][length i32][MessageIdData]`,
/// big-endian.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub kind: CheckpointKind,
    pub positions: BTreeMap<u64, MessageId>,
    /// For `Latest`: the segments there when the consumer started (the
    /// others are read from their start). Not part of the bytes.
    pub(crate) at_start: BTreeSet<u64>,
}

/// Most segments a checkpoint may name (a bound on what bytes read).
const MAX_CHECKPOINT_SEGMENTS: usize = 1 << 16;

impl Checkpoint {
    pub fn earliest() -> Checkpoint {
        Checkpoint::of(CheckpointKind::Earliest, BTreeMap::new())
    }

    pub fn latest() -> Checkpoint {
        Checkpoint::of(CheckpointKind::Latest, BTreeMap::new())
    }

    pub fn of(kind: CheckpointKind, positions: BTreeMap<u64, MessageId>) -> Checkpoint {
        Checkpoint {
            kind,
            positions,
            at_start: BTreeSet::new(),
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![match self.kind {
            CheckpointKind::Regular => 0u8,
            CheckpointKind::Earliest => 1,
            CheckpointKind::Latest => 2,
        }];
        out.extend_from_slice(&(self.positions.len() as i32).to_be_bytes());
        for (id, mid) in &self.positions {
            let data = id_data(mid).encode_to_vec();
            out.extend_from_slice(&(*id as i64).to_be_bytes());
            out.extend_from_slice(&(data.len() as i32).to_be_bytes());
            out.extend_from_slice(&data);
        }
        out
    }

    pub fn from_bytes(b: &[u8]) -> Result<Checkpoint> {
        let bad = |why: &str| Error::Invalid(format!("a checkpoint's bytes: {why}"));
        let mut r = b;
        let mut take = |n: usize| -> Result<&[u8]> {
            if r.len() < n {
                return Err(bad("cut short"));
            }
            let (head, tail) = r.split_at(n);
            r = tail;
            Ok(head)
        };
        let kind = match take(1)?[0] {
            0 => CheckpointKind::Regular,
            1 => CheckpointKind::Earliest,
            2 => CheckpointKind::Latest,
            k => return Err(bad(&format!("kind {k}"))),
        };
        let count = i32::from_be_bytes(take(4)?.try_into().expect("4 bytes"));
        if count < 0 || count as usize > MAX_CHECKPOINT_SEGMENTS {
            return Err(bad(&format!("{count} segments")));
        }
        let mut positions = BTreeMap::new();
        for _ in 0..count {
            let id = i64::from_be_bytes(take(8)?.try_into().expect("8 bytes"));
            let len = i32::from_be_bytes(take(4)?.try_into().expect("4 bytes"));
            if id < 0 || len < 0 {
                return Err(bad("a negative segment id or length"));
            }
            let d = MessageIdData::decode(take(len as usize)?)
                .map_err(|e| bad(&format!("segment {id}'s message id: {e}")))?;
            positions.insert(
                id as u64,
                MessageId {
                    position: Position::new(d.ledger_id, d.entry_id),
                    partition: d.partition.unwrap_or(-1),
                    batch_index: d.batch_index.unwrap_or(-1),
                    batch_size: d.batch_size.unwrap_or(0),
                },
            );
        }
        if !r.is_empty() {
            return Err(bad("bytes after the last segment"));
        }
        Ok(Checkpoint::of(kind, positions))
    }

    /// Where segment `id` is read from when a reader opens on it: after
    /// what this consumer passed on, else after the checkpoint's position,
    /// else where a Latest start found its end, else as the kind says.
    pub(crate) fn start_of(&self, id: u64, segments: &Segments) -> StartAt {
        let known = |p: &Positions| p.lock().expect("positions lock").get(&id).copied();
        if let Some(m) = known(&segments.forwarded)
            .or_else(|| self.positions.get(&id).copied())
            .or_else(|| known(&segments.baseline))
        {
            return StartAt::After(m);
        }
        if self.kind == CheckpointKind::Latest && self.at_start.contains(&id) {
            StartAt::Latest
        } else {
            StartAt::Earliest
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_round_trip_and_refuse_bad_bytes() {
        let mut positions = BTreeMap::new();
        positions.insert(3, MessageId::new(Position::new(7, 9)));
        let mut batched = MessageId::new(Position::new(8, 1));
        batched.batch_index = 2;
        batched.batch_size = 5;
        positions.insert(12, batched);
        let c = Checkpoint::of(CheckpointKind::Regular, positions);
        let b = c.to_bytes();
        assert_eq!(&b[..5], &[0, 0, 0, 0, 2]);
        assert_eq!(&b[5..13], &3i64.to_be_bytes());
        assert_eq!(Checkpoint::from_bytes(&b).unwrap(), c);
        assert_eq!(
            Checkpoint::from_bytes(&Checkpoint::latest().to_bytes())
                .unwrap()
                .kind,
            CheckpointKind::Latest
        );
        assert!(Checkpoint::from_bytes(&b[..b.len() - 1]).is_err());
        assert!(Checkpoint::from_bytes(&[7, 0, 0, 0, 0]).is_err());
        assert!(Checkpoint::from_bytes(&[0, 0xff, 0xff, 0xff, 0xff]).is_err());
        let mut extra = b.clone();
        extra.push(0);
        assert!(Checkpoint::from_bytes(&extra).is_err());
    }
}
