//! Opening a backend from a storage URL, so the broker picks its storage by
//! configuration without knowing which backends exist.
//!
//! | URL | backend |
//! |---|---|
//! | `memory:` (or `memory`) | [`MemoryBackend`]: lost on exit |
//! | `file:///abs/dir`, `file:rel/dir` or a bare path | [`FileBackend`] in that directory |
//!
//! An object-storage backend adds its scheme here.

use std::path::PathBuf;
use std::sync::Arc;

use crate::{FileBackend, FileBackendConfig, LedgerBackend, LedgerError, MemoryBackend, Result};

/// Where a broker keeps its topics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageUrl {
    Memory,
    File(PathBuf),
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
            Some((scheme, _)) if !scheme.contains('/') && scheme.len() > 1 => {
                Err(LedgerError::Config(format!(
                    "storage URL {url:?}: unknown scheme {scheme:?} (known: memory:, file://)"
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
        let e = StorageUrl::parse("s3://bucket/prefix")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown scheme \"s3\""), "{e}");
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
