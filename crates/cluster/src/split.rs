//! Splitting a bundle this broker owns (Pulsar's Splitting and Deleted
//! states): Owned → Splitting, then one transaction that writes the parent
//! Deleted, creates both halves' records Owned here, and writes the
//! namespace's new boundaries. The owner serves the bundle's topics
//! throughout: they map to the halves it holds from the moment the new
//! boundaries are in its cache, with the same fencing token, so no client is
//! disconnected. The Deleted record stays for [`TOMBSTONE_DELAY`] so brokers a
//! moment behind answer "being unloaded" for the old bundle.

use std::sync::Arc;
use std::time::Duration;

use strobe_metadata::{Expect, MetadataError, Op, OpResult};
use tracing::{debug, info};

use crate::ClusterError;
use crate::cluster::Cluster;
use crate::registry::{Held, OwnerInfo};
use crate::state::OwnerState;

/// How long a split's Deleted record stays (every broker follows the
/// boundaries by watch, within milliseconds; taking a bundle checks them in
/// its transaction anyway).
pub const TOMBSTONE_DELAY: Duration = Duration::from_secs(60);

impl Cluster {
    /// A split's first step: Owned → Splitting. The owner serves on; a
    /// transfer or another split of the bundle is refused meanwhile.
    pub async fn begin_split(&self, path: &str) -> Result<(), ClusterError> {
        let h = self.owned.lock().get(path).cloned();
        let Some(h) =
            h.filter(|h| h.info.state == OwnerState::Owned && self.session.is_alive_in(h.epoch))
        else {
            return Err(ClusterError::Invalid(format!(
                "bundle {path} is not owned by this broker"
            )));
        };
        let info = OwnerInfo {
            state: OwnerState::Splitting,
            ..h.info
        };
        self.write_checked(path, info, Expect::Version(h.version), Vec::new())
            .await?;
        Ok(())
    }

    /// The split, one transaction: the parent at `path` Splitting → Deleted,
    /// each of `halves` Owned here with the parent's fencing token, and
    /// `also` (the namespace's new boundaries). `committed` gets the
    /// transaction's revision once it landed, while the parent still counts
    /// as served here, so each of the bundle's topics maps to a bundle this
    /// broker serves at every moment.
    pub async fn finish_split(
        self: &Arc<Self>,
        path: &str,
        halves: &[String],
        also: Vec<Op>,
        committed: impl FnOnce(u64),
    ) -> Result<(), ClusterError> {
        let (lease, epoch) = self.lease()?;
        let h = self.owned.lock().get(path).cloned();
        let Some(h) = h.filter(|h| h.info.state == OwnerState::Splitting && h.epoch == epoch)
        else {
            return Err(ClusterError::Invalid(format!(
                "bundle {path} is not being split by this broker"
            )));
        };
        let put = |key: &str, info: &OwnerInfo, expect| Op::Put {
            key: key.to_string(),
            value: serde_json::to_vec(info).expect("an ownership record serialises"),
            expect,
            lease: Some(lease),
        };
        let deleted = OwnerInfo {
            state: OwnerState::Deleted,
            ..h.info.clone()
        };
        let owned = OwnerInfo::owned_by(&self.me());
        let mut ops = vec![put(path, &deleted, Expect::Version(h.version))];
        ops.extend(halves.iter().map(|k| put(k, &owned, Expect::Absent)));
        ops.extend(also);
        let r = self.session.store().txn(ops).await?;
        let version = |i: usize| match r.results.get(i) {
            Some(OpResult::Put(stat)) => Ok(stat.version),
            other => Err(ClusterError::Corrupt {
                path: path.to_string(),
                reason: format!("a split's put answered {other:?}"),
            }),
        };
        {
            let mut held = self.owned.lock();
            for (i, k) in halves.iter().enumerate() {
                held.insert(
                    k.clone(),
                    Held {
                        version: version(i + 1)?,
                        epoch,
                        fence: h.fence,
                        info: owned.clone(),
                    },
                );
            }
        }
        committed(r.revision);
        let parent_version = version(0)?;
        self.owned.lock().insert(
            path.to_string(),
            Held {
                version: parent_version,
                epoch,
                fence: h.fence,
                info: deleted,
            },
        );
        info!(bundle = path, halves = ?halves, fence = h.fence, "bundle split");
        let weak = Arc::downgrade(self);
        let path = path.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(TOMBSTONE_DELAY).await;
            if let Some(c) = weak.upgrade() {
                c.tombstone(&path, parent_version).await;
            }
        });
        Ok(())
    }

    /// Deleted → Free: removes a split parent's record (if it is still the
    /// one this broker wrote).
    pub(crate) async fn tombstone(&self, path: &str, version: u64) {
        {
            let mut held = self.owned.lock();
            match held.get(path) {
                Some(h) if h.version == version && h.info.state == OwnerState::Deleted => {
                    held.remove(path);
                }
                _ => return,
            }
        }
        match self.session.store().delete(path, Some(version)).await {
            Ok(()) | Err(MetadataError::NotFound(_)) | Err(MetadataError::BadVersion { .. }) => {
                debug!(bundle = path, "a split bundle's record removed")
            }
            Err(e) => {
                tracing::warn!(bundle = path, error = %e, "removing a split bundle's record failed")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{bundle_path, parse_bundle_path};
    use crate::testing::pair;
    use strobe_resources::BundlesData;
    use strobe_resources::policies::NamespacePolicies;

    /// The namespace's new boundaries, written in the split's transaction.
    async fn boundaries_op(c: &Cluster, ns: &str, split: BundlesData) -> Op {
        let key = strobe_resources::paths::namespace(ns);
        let v = c.session.store().get(&key).await.unwrap().unwrap();
        let p = NamespacePolicies {
            bundles: Some(split),
            ..NamespacePolicies::default()
        };
        Op::put_if(
            key,
            serde_json::to_vec(&p).unwrap(),
            Expect::Version(v.stat.version),
        )
    }

    #[tokio::test]
    async fn a_split_keeps_the_owner_and_its_token_and_the_old_bundle_is_never_taken_again() {
        let (a, b) = pair().await;
        let ns = "t/n";
        let whole = BundlesData::even(1);
        let parent = bundle_path(ns, "0x00000000_0xffffffff");
        let fa = a.acquire(&parent).await.unwrap();
        a.begin_split(&parent).await.unwrap();
        // The owner serves on while it splits; a transfer is refused.
        assert_eq!(a.holds(&parent), Some(fa));
        assert_eq!(a.owned_bundles(), vec![parent.clone()]);
        assert!(a.begin_transfer(&parent, &b.me()).await.is_err());
        let (split, halves) = whole.split("0x00000000_0xffffffff").unwrap();
        let paths: Vec<String> = halves.iter().map(|h| bundle_path(ns, h)).collect();
        let op = boundaries_op(&a, ns, split).await;
        let mut seen = None;
        a.finish_split(&parent, &paths, vec![op], |rev| seen = Some(rev))
            .await
            .unwrap();
        assert!(seen.is_some());
        // The halves are a's, with the parent's token: its topics go on
        // writing the same logs.
        for p in &paths {
            assert_eq!(a.holds(p), Some(fa), "{p}");
            assert_eq!(parse_bundle_path(p).unwrap().0, ns);
        }
        assert_eq!(a.owned_bundles(), paths);
        assert_eq!(a.holds(&parent), None);
        // b follows by watch: the parent is Deleted ("being unloaded").
        for _ in 0..100 {
            if b.owner_of(&parent).map(|o| o.state) == Some(OwnerState::Deleted) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for e in [b.place(&parent).await.err(), b.acquire(&parent).await.err()] {
            match e {
                Some(ClusterError::NotReady(m)) => {
                    assert!(m.contains("is being unloaded"), "{m}")
                }
                other => panic!("expected ServiceNotReady, got {other:?}"),
            }
        }
        assert!(b.acquire(&paths[0]).await.is_err(), "a owns the halves");
        // Even with the Deleted record gone (its holder died, or the
        // tombstone), the old bundle is not in the boundaries any more.
        let deleted_version = a.owned.lock()[&parent].version;
        a.tombstone(&parent, deleted_version).await;
        assert!(a.session.store().get(&parent).await.unwrap().is_none());
        match b.acquire(&parent).await {
            Err(ClusterError::NotReady(m)) => assert!(m.contains("it was split"), "{m}"),
            other => panic!("expected ServiceNotReady, got {other:?}"),
        }
        // A half moves on like any bundle, with a higher token.
        a.begin_transfer(&paths[1], &b.me()).await.unwrap();
        a.assign(&paths[1]).await.unwrap();
        assert!(a.wait_taken(&paths[1], "b", Duration::from_secs(5)).await);
        let fb = b.acquire(&paths[1]).await.unwrap();
        assert!(fb > fa, "{fb} > {fa}");
        a.leave().await;
        b.leave().await;
    }

    #[tokio::test]
    async fn a_split_against_changed_boundaries_changes_nothing() {
        let (a, _b) = pair().await;
        let ns = "t/n";
        let parent = bundle_path(ns, "0x00000000_0xffffffff");
        a.acquire(&parent).await.unwrap();
        a.begin_split(&parent).await.unwrap();
        let (split, halves) = BundlesData::even(1).split("0x00000000_0xffffffff").unwrap();
        let paths: Vec<String> = halves.iter().map(|h| bundle_path(ns, h)).collect();
        let stale = boundaries_op(&a, ns, split).await;
        // Someone changes the policies in between.
        let key = strobe_resources::paths::namespace(ns);
        a.session
            .store()
            .put(&key, b"{}", Expect::Any)
            .await
            .unwrap();
        let e = a
            .finish_split(&parent, &paths, vec![stale], |_| panic!("not committed"))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ClusterError::Metadata(MetadataError::BadVersion { key: k, .. }) if *k == key),
            "{e:?}"
        );
        for p in &paths {
            assert!(a.session.store().get(p).await.unwrap().is_none());
            assert_eq!(a.holds(p), None);
        }
        // Still Splitting: the owner serves on (and may retry or give up).
        assert!(a.holds(&parent).is_some());
        a.leave().await;
    }
}
