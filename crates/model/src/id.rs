//! Positions, message ids, subscription types and transaction ids.

use std::fmt;

/// Where an entry sits in a topic's log: Pulsar's `(ledgerId, entryId)`.
/// Ordered by ledger, then entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Position {
    pub ledger_id: u64,
    pub entry_id: u64,
}

impl Position {
    pub const fn new(ledger_id: u64, entry_id: u64) -> Position {
        Position {
            ledger_id,
            entry_id,
        }
    }
    /// Before every position ("earliest").
    pub const EARLIEST: Position = Position::new(0, 0);
    /// After every position ("latest").
    pub const LATEST: Position = Position::new(u64::MAX, u64::MAX);
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ledger_id, self.entry_id)
    }
}

/// A message id as clients see it: a position, the partition it was read from,
/// and for a message inside a batch its index and the batch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId {
    pub position: Position,
    pub partition: i32,
    pub batch_index: i32,
    pub batch_size: i32,
}

impl MessageId {
    pub fn new(position: Position) -> MessageId {
        MessageId {
            position,
            partition: -1,
            batch_index: -1,
            batch_size: 0,
        }
    }
}

/// The four subscription types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubType {
    Exclusive,
    Shared,
    Failover,
    KeyShared,
}

impl SubType {
    pub fn as_str(self) -> &'static str {
        match self {
            SubType::Exclusive => "Exclusive",
            SubType::Shared => "Shared",
            SubType::Failover => "Failover",
            SubType::KeyShared => "Key_Shared",
        }
    }
}

/// A transaction id. `most_sig_bits` is the coordinator partition that owns it,
/// `least_sig_bits` that partition's sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxnId {
    pub most_sig_bits: u64,
    pub least_sig_bits: u64,
}

impl TxnId {
    /// The coordinator partition this transaction belongs to.
    pub fn coordinator(&self) -> u64 {
        self.most_sig_bits
    }
}

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{})", self.most_sig_bits, self.least_sig_bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_order_by_ledger_then_entry() {
        assert!(Position::new(1, 99) < Position::new(2, 0));
        assert!(Position::new(2, 0) < Position::new(2, 1));
        assert!(Position::EARLIEST < Position::new(0, 1));
        assert!(Position::new(u64::MAX - 1, 0) < Position::LATEST);
        assert_eq!(Position::new(3, 4).to_string(), "3:4");
    }
}
