use super::*;

#[test]
fn unknown_key_is_named() {
    let err = BrokerConfig::from_toml_str("broker_prot = 1\n", Path::new("x.toml")).unwrap_err();
    assert!(err.to_string().contains("broker_prot"), "{err}");
}

#[test]
fn defaults_fill_missing_keys() {
    let cfg = BrokerConfig::from_toml_str("broker_port = 7000\n", Path::new("x.toml")).unwrap();
    assert_eq!(cfg.broker_port, 7000);
    assert_eq!(cfg.http_port, 8080);
}

#[test]
fn bad_values_are_refused() {
    assert!(BrokerConfig::from_toml_str("max_message_size = 0\n", Path::new("x.toml")).is_err());
    assert!(
        BrokerConfig::from_toml_str("keepalive_interval_secs = 0\n", Path::new("x.toml")).is_err()
    );
    let err = BrokerConfig::from_toml_str("sync_min_interval_us = 100001\n", Path::new("x.toml"))
        .unwrap_err();
    assert!(err.to_string().contains("sync_min_interval_us"), "{err}");
    let cfg =
        BrokerConfig::from_toml_str("sync_min_interval_us = 0\n", Path::new("x.toml")).unwrap();
    assert_eq!(cfg.sync_min_interval_us, 0);
    let err = BrokerConfig::from_toml_str("sync_max_interval_us = 100001\n", Path::new("x.toml"))
        .unwrap_err();
    assert!(err.to_string().contains("sync_max_interval_us"), "{err}");
    for bad in [
        "page_cache_window_mb = 8\n",
        "page_cache_window_mb = 2000000\n",
    ] {
        let err = BrokerConfig::from_toml_str(bad, Path::new("x.toml")).unwrap_err();
        assert!(err.to_string().contains("page_cache_window_mb"), "{err}");
    }
    let err =
        BrokerConfig::from_toml_str("worker_threads = 1025\n", Path::new("x.toml")).unwrap_err();
    assert!(err.to_string().contains("worker_threads"), "{err}");
    let cfg = BrokerConfig::from_toml_str("worker_threads = 1\n", Path::new("x.toml")).unwrap();
    assert_eq!(cfg.worker_threads, 1);
    let err =
        BrokerConfig::from_toml_str("cpu_affinity = \"0-\"\n", Path::new("x.toml")).unwrap_err();
    assert!(err.to_string().contains("cpu_affinity"), "{err}");
    for ok in [0, 16, 4096] {
        let cfg = BrokerConfig::from_toml_str(
            &format!("page_cache_window_mb = {ok}\n"),
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(cfg.page_cache_window_mb, ok);
    }
    let cfg = BrokerConfig::from_toml_str(
        "page_cache_budget_mb = 0
",
        Path::new("x.toml"),
    )
    .unwrap();
    assert_eq!(cfg.page_cache_budget_mb, 0);
    let err = BrokerConfig::from_toml_str(
        "page_cache_budget_mb = 2000000
",
        Path::new("x.toml"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("page_cache_budget_mb"), "{err}");
}
