//! Writes seed inputs for the fuzz targets under `fuzz/corpus/<target>/`, made by
//! the code under test itself: certificate chains signed by the fuzz CA, Avro
//! schemas, a metadata store's log, and a ledger journal cut off mid-run (as after
//! kill -9), and an admin body for each route that reads one. Run from `fuzz/`: `cargo run --bin make_seeds`.

use std::path::Path;
use std::sync::mpsc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use strobe_fuzz::{ca_key, ca_params, join};
use strobe_ledger::{FileBackend, FileBackendConfig, LedgerBackend as _};
use strobe_metadata::{EmbeddedOptions, EmbeddedStore, Expect, MetadataStore as _};

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new("corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn leaf(cn: &str) -> CertificateParams {
    let mut p = CertificateParams::new(vec!["localhost".into()]).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    p
}

fn certificates() {
    let ca_params = ca_params();
    let ca_key = ca_key();
    let ca = Issuer::from_params(&ca_params, &ca_key);
    let direct = leaf("direct")
        .signed_by(&KeyPair::generate().unwrap(), &ca)
        .unwrap();
    write("tls_chain", "direct", &join(&[direct.der()]));
    let mut mid_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    mid_params
        .distinguished_name
        .push(DnType::CommonName, "Fuzz Intermediate");
    mid_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let mid_key = KeyPair::generate().unwrap();
    let mid = mid_params.clone().signed_by(&mid_key, &ca).unwrap();
    let deep = leaf("deep")
        .signed_by(
            &KeyPair::generate().unwrap(),
            &Issuer::from_params(&mid_params, &mid_key),
        )
        .unwrap();
    write(
        "tls_chain",
        "via-intermediate",
        &join(&[deep.der(), mid.der()]),
    );
    // A same-subject loop (the shape the bound exists for), small.
    let loop_key = KeyPair::generate().unwrap();
    let loop_issuer = Issuer::from_params(&ca_params, &loop_key);
    let mut parts = vec![
        leaf("loop")
            .signed_by(&KeyPair::generate().unwrap(), &loop_issuer)
            .unwrap()
            .der()
            .to_vec(),
    ];
    for _ in 0..3 {
        parts.push(
            ca_params
                .clone()
                .signed_by(&loop_key, &loop_issuer)
                .unwrap()
                .der()
                .to_vec(),
        );
    }
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    write("tls_chain", "loop", &join(&refs));
}

fn schemas() {
    let record = br#"{"type":"record","name":"User","namespace":"example","fields":[{"name":"name","type":"string"},{"name":"age","type":["null","int"],"default":null},{"name":"tags","type":{"type":"array","items":"string"}},{"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"]}}]}"#;
    let evolved = br#"{"type":"record","name":"User","namespace":"example","fields":[{"name":"name","type":"string"},{"name":"age","type":["null","int"],"default":null},{"name":"email","type":"string","default":""}]}"#;
    let nested = br#"{"type":"record","name":"Outer","fields":[{"name":"inner","type":{"type":"record","name":"Inner","fields":[{"name":"m","type":{"type":"map","values":"long"}},{"name":"f","type":{"type":"fixed","name":"F","size":4}}]}},{"name":"again","type":"Inner"}]}"#;
    write(
        "avro_schema",
        "avro-evolve",
        &join(&[&[0], record, evolved]),
    );
    write("avro_schema", "avro-nested", &join(&[&[0], nested, record]));
    write("avro_schema", "json", &join(&[&[1], record, evolved]));
    let kv = br#"{"key":{"type":"record","name":"K","fields":[{"name":"id","type":"long"}]},"value":{"type":"record","name":"V","fields":[{"name":"v","type":"string"}]}}"#;
    write("avro_schema", "key-value", &join(&[&[2], kv, kv]));
}

fn metadata(rt: &tokio::runtime::Runtime) {
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let store = EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).unwrap();
        store
            .put(
                "/admin/clusters/standalone",
                b"{\"serviceUrl\":\"pulsar://localhost:6650\"}",
                Expect::Any,
            )
            .await
            .unwrap();
        store
            .put("/admin/policies/public/default", b"{}", Expect::Any)
            .await
            .unwrap();
        store
            .put(
                "/managed-ledgers/public/default/persistent/t",
                b"\x01\x02",
                Expect::Any,
            )
            .await
            .unwrap();
        store
            .delete("/admin/policies/public/default", None)
            .await
            .unwrap();
    });
    let wal = std::fs::read(dir.path().join(strobe_fuzz::METADATA_WAL)).unwrap();
    write("metadata_log", "log", &wal);
    write("metadata_log", "torn", &wal[..wal.len() * 2 / 3]);
}

fn ledger(rt: &tokio::runtime::Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = FileBackendConfig {
        preallocate: false,
        journal_pool: 0,
        journal_file_bytes: 1 << 16,
        ..FileBackendConfig::new(dir.path())
    };
    let backend = FileBackend::open(cfg).unwrap();
    rt.block_on(async {
        let (topic, recovered) = backend
            .open_topic(strobe_fuzz::LEDGER_TOPIC, 0)
            .await
            .unwrap();
        let (tx, rx) = mpsc::channel();
        for i in 0..8u64 {
            let data = bytes::Bytes::from(format!("entry {i}").into_bytes());
            let crc = crc32c::crc32c(&data);
            let tx = tx.clone();
            topic.append(
                recovered.next_ledger_id,
                i,
                1_700_000_000_000 + i,
                data,
                crc,
                Box::new(move |r| tx.send(r).unwrap()),
            );
        }
        for _ in 0..8 {
            rx.recv().unwrap().unwrap();
        }
    });
    // Copied while the backend is open: the journal as a crash would leave it.
    let journal = dir.path().join("journal");
    let mut names: Vec<_> = std::fs::read_dir(&journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let first = std::fs::read(&names[0]).unwrap();
    let used = first.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    write("ledger_journal", "journal", &first[..used]);
    write("ledger_journal", "torn", &first[..used / 2]);
    let _ = backend.close();
}

/// One body each route of the `admin_json` target accepts (the first byte is the
/// route's index in that target's table, the second picks the names).
fn admin_bodies() {
    let avro = r#"{"type":"AVRO","schema":"{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"a\",\"type\":\"int\"}]}","properties":{"k":"v"}}"#;
    let seeds: &[(u8, u8, &str)] = &[
        (0, 0, r#"{"serviceUrl":"http://localhost:8080","brokerServiceUrl":"pulsar://localhost:6650"}"#),
        (2, 1, r#"{"adminRoles":["admin"],"allowedClusters":["fuzz"]}"#),
        (3, 0, r#"{"adminRoles":[],"allowedClusters":["fuzz"]}"#),
        (4, 3, r#"{"bundles":{"numBundles":4}}"#),
        (5, 0, "true"),
        (6, 0, "3600"),
        (7, 0, r#"{"retentionTimeInMinutes":60,"retentionSizeInMB":100}"#),
        (8, 0, r#""BACKWARD_TRANSITIVE""#),
        (9, 0, r#"{"limitSize":1048576,"limitTime":-1,"policy":"producer_request_hold"}"#),
        (10, 0, r#"{"limitSize":-1,"limitTime":60,"policy":"consumer_backlog_eviction"}"#),
        (11, 0, r#"["produce","consume"]"#),
        (12, 0, r#"["role-a","role-b"]"#),
        (13, 0, "1048576"),
        (14, 0, "true"),
        (15, 0, "false"),
        (16, 0, ""),
        (17, 0, r#"["consume"]"#),
        (18, 12, ""),
        (19, 4, "3"),
        (20, 0, "4"),
        (21, 4, "2"),
        (22, 2 << 2, r#"{"ledgerId":-1,"entryId":-1,"partitionIndex":-1}"#),
        (23, 2 << 2, r#"{"ledgerId":0,"entryId":0,"partitionIndex":-1}"#),
        (24, 2 << 2, r#"{"ledgerId":0,"entryId":5,"batchIndex":2}"#),
        (25, 1 << 2, avro),
        (26, 1 << 2, avro),
        (27, 1 << 2, avro),
        (25, 3 << 2, r#"{"type":"STRING","schema":"","properties":{}}"#),
        (25, 3 << 2, r#"{"type":"JSON","schema":"{\"type\":\"record\",\"name\":\"J\",\"fields\":[]}"}"#),
    ];
    for (i, (route, names, body)) in seeds.iter().enumerate() {
        let mut bytes = vec![*route, *names];
        bytes.extend_from_slice(body.as_bytes());
        write("admin_json", &format!("seed-{i:02}"), &bytes);
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    certificates();
    schemas();
    metadata(&rt);
    ledger(&rt);
    admin_bodies();
    println!("seeds written under corpus/");
}
