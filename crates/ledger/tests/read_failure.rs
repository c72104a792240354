//! A read the store fails must not move a cursor past what it did not read.

mod common;

use bytes::Bytes;
use strobe_ledger::testing::Impaired;
use strobe_ledger::{InitialPosition, LedgerConfig, ManagedLedger};

#[tokio::test]
async fn a_failed_read_leaves_the_cursor_where_it_was() {
    let backend = Impaired::default();
    let ml = ManagedLedger::open(&backend, "t", LedgerConfig::default())
        .await
        .unwrap();
    for i in 0..10u32 {
        ml.append(Bytes::from(i.to_string())).await.unwrap();
    }
    let c = ml
        .open_cursor("c", InitialPosition::Earliest)
        .await
        .unwrap();
    let first = c.read(3).await.unwrap();
    assert_eq!(first.len(), 3);
    backend.fail_reads(true);
    for _ in 0..3 {
        assert!(c.read(3).await.is_err());
    }
    backend.fail_reads(false);
    let rest = c.read(100).await.unwrap();
    let got: Vec<Bytes> = rest.iter().map(|e| e.data.clone()).collect();
    let want: Vec<Bytes> = (3..10u32).map(|i| Bytes::from(i.to_string())).collect();
    assert_eq!(
        got, want,
        "the entries the failed reads did not read come next"
    );
}
