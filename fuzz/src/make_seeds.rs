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

/// One body each route of the `admin_json` target accepts (the first byte picks
/// the route in `strobe_fuzz::ADMIN_ROUTES`, the second the names in its path).
fn admin_bodies() {
    let avro = r#"{"type":"AVRO","schema":"{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"a\",\"type\":\"int\"}]}","properties":{"k":"v"}}"#;
    let seeds: &[(&str, &str, u8, &str)] = &[
        (
            "PUT",
            "/admin/v2/clusters/fuzz",
            0,
            r#"{"serviceUrl":"http://localhost:8080","brokerServiceUrl":"pulsar://localhost:6650"}"#,
        ),
        (
            "PUT",
            "/admin/v2/tenants/{t}",
            1,
            r#"{"adminRoles":["admin"],"allowedClusters":["fuzz"]}"#,
        ),
        (
            "POST",
            "/admin/v2/tenants/{t}",
            0,
            r#"{"adminRoles":[],"allowedClusters":["fuzz"]}"#,
        ),
        (
            "PUT",
            "/admin/v2/namespaces/{t}/{n}",
            3,
            r#"{"bundles":{"numBundles":4}}"#,
        ),
        (
            "POST",
            "/admin/v2/namespaces/{t}/{n}/deduplication",
            0,
            "true",
        ),
        ("POST", "/admin/v2/namespaces/{t}/{n}/messageTTL", 0, "3600"),
        (
            "POST",
            "/admin/v2/namespaces/{t}/{n}/retention",
            0,
            r#"{"retentionTimeInMinutes":60,"retentionSizeInMB":100}"#,
        ),
        (
            "PUT",
            "/admin/v2/namespaces/{t}/{n}/schemaCompatibilityStrategy",
            0,
            r#""BACKWARD_TRANSITIVE""#,
        ),
        (
            "POST",
            "/admin/v2/namespaces/{t}/{n}/backlogQuota",
            0,
            r#"{"limitSize":1048576,"limitTime":-1,"policy":"producer_request_hold"}"#,
        ),
        (
            "POST",
            "/admin/v2/namespaces/{t}/{n}/backlogQuota?backlogQuotaType=message_age",
            0,
            r#"{"limitSize":-1,"limitTime":60,"policy":"consumer_backlog_eviction"}"#,
        ),
        (
            "POST",
            "/admin/v2/namespaces/{t}/{n}/permissions/role-a",
            0,
            r#"["produce","consume"]"#,
        ),
        (
            "POST",
            "/admin/v2/namespaces/{t}/{n}/permissions/subscription/{s}",
            0,
            r#"["role-a","role-b"]"#,
        ),
        (
            "POST",
            "/admin/v2/namespaces/{t}/{n}/compactionThreshold",
            0,
            "1048576",
        ),
        (
            "POST",
            "/admin/v2/namespaces/{t}/{n}/isAllowAutoUpdateSchema",
            0,
            "true",
        ),
        (
            "POST",
            "/admin/v2/namespaces/{t}/{n}/schemaValidationEnforced",
            0,
            "false",
        ),
        (
            "PUT",
            "/admin/v2/namespaces/{t}/{n}/0x00000000_0xffffffff/split",
            0,
            "",
        ),
        (
            "POST",
            "/admin/v2/persistent/{t}/{n}/{p}/permissions/role-b",
            0,
            r#"["consume"]"#,
        ),
        ("PUT", "/admin/v2/persistent/{t}/{n}/{p}", 12, ""),
        ("PUT", "/admin/v2/persistent/{t}/{n}/{p}/partitions", 4, "3"),
        (
            "POST",
            "/admin/v2/persistent/{t}/{n}/{p}/partitions",
            0,
            "4",
        ),
        (
            "PUT",
            "/admin/v2/non-persistent/{t}/{n}/{p}/partitions",
            4,
            "2",
        ),
        (
            "PUT",
            "/admin/v2/persistent/{t}/{n}/{p}/subscription/{s}",
            2 << 2,
            r#"{"ledgerId":-1,"entryId":-1,"partitionIndex":-1}"#,
        ),
        (
            "POST",
            "/admin/v2/persistent/{t}/{n}/{p}/subscription/{s}/resetcursor",
            2 << 2,
            r#"{"ledgerId":0,"entryId":0,"partitionIndex":-1}"#,
        ),
        (
            "POST",
            "/admin/v2/persistent/{t}/{n}/{p}/subscription/{s}/resetcursor?isExcluded=true",
            2 << 2,
            r#"{"ledgerId":0,"entryId":5,"batchIndex":2}"#,
        ),
        ("POST", "/admin/v2/schemas/{t}/{n}/{p}/schema", 1 << 2, avro),
        (
            "POST",
            "/admin/v2/schemas/{t}/{n}/{p}/compatibility",
            1 << 2,
            avro,
        ),
        (
            "POST",
            "/admin/v2/schemas/{t}/{n}/{p}/version",
            1 << 2,
            avro,
        ),
        (
            "POST",
            "/admin/v2/schemas/{t}/{n}/{p}/schema",
            3 << 2,
            r#"{"type":"STRING","schema":"","properties":{}}"#,
        ),
        (
            "POST",
            "/admin/v2/schemas/{t}/{n}/{p}/schema",
            3 << 2,
            r#"{"type":"JSON","schema":"{\"type\":\"record\",\"name\":\"J\",\"fields\":[]}"}"#,
        ),
    ];
    for (i, (method, path, names, body)) in seeds.iter().enumerate() {
        let mut bytes = vec![strobe_fuzz::admin_route(method, path), *names];
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
