//! Opening a backend from a storage URL, so the broker picks its storage by
//! configuration without knowing which backends exist.
//!
//! | URL | backend |
//! |---|---|
//! | `memory:` (or `memory`) | [`MemoryBackend`]: lost on exit |
//! | `file:///abs/dir`, `file:rel/dir` or a bare path | [`FileBackend`] in that directory |
//! | `s3://bucket/prefix` | the object backend on S3 (cluster brokers, [`open_shared_backend`]) |
//!
//! A cluster broker opens its storage with `open_shared_backend` (feature
//! `object`): the same URLs, but every kind goes through the object backend,
//! which several brokers can share: `file://` is a shared directory (each put
//! fsynced with its directory), `s3://` an S3 bucket or compatible server
//! (credentials, region and `AWS_ENDPOINT_URL` from the environment), and
//! `memory:` one process's memory (tests).

use std::path::PathBuf;
use std::sync::Arc;

use crate::{FileBackend, FileBackendConfig, LedgerBackend, LedgerError, MemoryBackend, Result};

/// Where a broker keeps its topics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageUrl {
    Memory,
    File(PathBuf),
    /// An S3 bucket and a key prefix inside it (may be empty).
    S3 {
        bucket: String,
        prefix: String,
    },
}

impl StorageUrl {
    /// Parses a storage URL (see the module docs); an unknown scheme is an
    /// error naming it and the schemes there are.
    pub fn parse(url: &str) -> Result<StorageUrl> {
        let url = url.trim();
        if url == "memory" || url == "memory:" {
            return Ok(StorageUrl::Memory);
        }
        match url.split_once(':') {
            Some(("file", rest)) => {
                let path = rest.strip_prefix("//").unwrap_or(rest);
                if path.is_empty() {
                    return Err(LedgerError::Config(format!(
                        "storage URL {url:?} names no directory"
                    )));
                }
                Ok(StorageUrl::File(PathBuf::from(path)))
            }
            Some(("s3", rest)) => {
                let rest = rest.strip_prefix("//").unwrap_or(rest);
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(LedgerError::Config(format!(
                        "storage URL {url:?} names no bucket (s3://bucket/prefix)"
                    )));
                }
                Ok(StorageUrl::S3 {
                    bucket: bucket.to_string(),
                    prefix: prefix.trim_matches('/').to_string(),
                })
            }
            Some((scheme, _)) if !scheme.contains('/') && scheme.len() > 1 => {
                Err(LedgerError::Config(format!(
                    "storage URL {url:?}: unknown scheme {scheme:?} (known: memory:, file://, s3://)"
                )))
            }
            _ if url.is_empty() => Err(LedgerError::Config("empty storage URL".into())),
            // A bare path (also a Windows-style one the split above cut).
            _ => Ok(StorageUrl::File(PathBuf::from(url))),
        }
    }
}

/// Opens the backend `url` names. `tuning` configures the file backend (its
/// directory comes from the URL); other backends ignore it.
pub fn open_backend(url: &StorageUrl, tuning: FileBackendConfig) -> Result<Arc<dyn LedgerBackend>> {
    Ok(match url {
        StorageUrl::S3 { .. } => {
            return Err(LedgerError::Config(
                "s3:// storage is for cluster brokers (strobe broker); standalone keeps topics in local files".into(),
            ));
        }
        StorageUrl::Memory => Arc::new(MemoryBackend::new()),
        StorageUrl::File(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| LedgerError::io("create", dir, e))?;
            Arc::new(FileBackend::open(FileBackendConfig {
                dir: dir.clone(),
                ..tuning
            })?)
        }
    })
}

/// Opens the object backend a cluster's brokers share (see the module docs),
/// after checking that the store honours create-only puts.
#[cfg(feature = "object")]
pub async fn open_shared_backend(
    url: &StorageUrl,
    cfg: crate::ObjectBackendConfig,
) -> Result<Arc<dyn LedgerBackend>> {
    use object_store::ObjectStore;
    use object_store::path::Path;
    let (store, prefix): (Arc<dyn ObjectStore>, Path) = match url {
        StorageUrl::Memory => (
            Arc::new(object_store::memory::InMemory::new()),
            Path::default(),
        ),
        StorageUrl::File(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| LedgerError::io("create", dir, e))?;
            let fs = object_store::local::LocalFileSystem::new_with_prefix(dir)
                .map_err(|e| LedgerError::Config(format!("storage {}: {e}", dir.display())))?
                .with_fsync(true);
            (Arc::new(fs), Path::default())
        }
        StorageUrl::S3 { bucket, prefix } => {
            // object_store's HTTP client uses rustls; this build gives it the
            // ring provider (as the rest of the broker), not aws-lc.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
            let endpoint = std::env::var("AWS_ENDPOINT_URL")
                .or_else(|_| std::env::var("AWS_ENDPOINT"))
                .unwrap_or_default();
            if endpoint.starts_with("http://") {
                b = b.with_allow_http(true);
            }
            if !endpoint.is_empty() {
                b = b.with_endpoint(endpoint);
            }
            let s3 = b
                .build()
                .map_err(|e| LedgerError::Config(format!("storage s3://{bucket}: {e}")))?;
            (Arc::new(s3), Path::from(prefix.as_str()))
        }
    };
    crate::object::probe_create_only(&store, &prefix).await?;
    Ok(Arc::new(crate::ObjectBackend::new(store, prefix, cfg)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_backend() {
        assert_eq!(StorageUrl::parse("memory:").unwrap(), StorageUrl::Memory);
        assert_eq!(StorageUrl::parse("memory").unwrap(), StorageUrl::Memory);
        assert_eq!(
            StorageUrl::parse("file:///var/lib/strobe").unwrap(),
            StorageUrl::File("/var/lib/strobe".into())
        );
        assert_eq!(
            StorageUrl::parse("file:data/ledgers").unwrap(),
            StorageUrl::File("data/ledgers".into())
        );
        assert_eq!(
            StorageUrl::parse("/srv/strobe").unwrap(),
            StorageUrl::File("/srv/strobe".into())
        );
        assert_eq!(
            StorageUrl::parse("s3://bucket/a/b/").unwrap(),
            StorageUrl::S3 {
                bucket: "bucket".into(),
                prefix: "a/b".into()
            }
        );
        assert!(StorageUrl::parse("s3://").is_err());
        let e = StorageUrl::parse("gs://bucket/prefix")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown scheme \"gs\""), "{e}");
        assert!(StorageUrl::parse("file://").is_err());
        assert!(StorageUrl::parse("").is_err());
    }

    #[tokio::test]
    async fn open_backend_opens_what_the_url_names() {
        let mem = open_backend(&StorageUrl::Memory, FileBackendConfig::new("")).unwrap();
        assert_eq!(mem.kind(), "memory");
        assert!(mem.engine_stats().is_empty());
        let dir = tempfile::tempdir().unwrap();
        let url = StorageUrl::File(dir.path().join("ledgers"));
        let file = open_backend(&url, FileBackendConfig::new("ignored")).unwrap();
        assert_eq!(file.kind(), "file");
        assert!(dir.path().join("ledgers").join("LOCK").exists());
        assert!(
            file.engine_stats()
                .iter()
                .any(|m| m.name == "strobe_storage_journal_fsyncs_total")
        );
        file.close().unwrap();
    }
}
