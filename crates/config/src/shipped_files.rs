use super::*;

fn shipped(name: &str) -> BrokerConfig {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../config")
        .join(name);
    BrokerConfig::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn standalone_toml_is_the_defaults() {
    assert_eq!(shipped("standalone.toml"), BrokerConfig::default());
}

#[test]
fn etcd_endpoints_parse() {
    let mut c = BrokerConfig {
        metadata_store_url: "etcd:http://a:2379, http://b:2379".into(),
        ..BrokerConfig::default()
    };
    assert_eq!(
        c.etcd_endpoints().unwrap(),
        vec!["http://a:2379".to_string(), "http://b:2379".to_string()]
    );
    c.metadata_store_url = "http://a:2379".into();
    assert_eq!(c.etcd_endpoints().unwrap().len(), 1);
    c.metadata_store_url = "zk:a:2181".into();
    assert!(c.etcd_endpoints().is_err());
    c.metadata_store_url = String::new();
    assert!(c.etcd_endpoints().is_err());
}

#[test]
fn cluster_toml_parses() {
    let cfg = shipped("cluster.toml");
    assert_eq!(cfg.metadata_store_url, "etcd:http://127.0.0.1:2379");
    assert_eq!(
        cfg.etcd_endpoints().unwrap(),
        vec!["http://127.0.0.1:2379".to_string()]
    );
    assert!(cfg.storage.starts_with("file:///"));
    assert_eq!(cfg.cluster_name, "strobe-cluster");
}
