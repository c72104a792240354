//! Scalable topics' layout documents (Pulsar's `ScalableTopicResources`):
//! read, created and replaced only by compare-and-set, and checked against
//! the layout's invariants whenever they are read, so a document that is
//! not a layout is an error naming its path, never a DAG handed to clients.

use strobe_layout::Layout;
use strobe_metadata::{Expect, MetadataError};

use crate::error::ResourcesError;
use crate::paths;
use crate::store::{Resources, Versioned, encode};

impl Resources {
    /// The layout of `topic://<ns>/<local>`, with the version to replace it against.
    pub async fn layout(
        &self,
        ns: &str,
        local: &str,
    ) -> Result<Option<Versioned<Layout>>, ResourcesError> {
        let path = paths::scalable_topic(ns, local);
        let Some(v) = self.get::<Layout>(&path).await? else {
            return Ok(None);
        };
        v.value.validate().map_err(|e| ResourcesError::Corrupt {
            path,
            reason: e.to_string(),
        })?;
        Ok(Some(v))
    }

    /// Records a new scalable topic's layout; `AlreadyExists` if it has one.
    pub async fn create_layout(
        &self,
        ns: &str,
        local: &str,
        layout: &Layout,
    ) -> Result<u64, ResourcesError> {
        let path = paths::scalable_topic(ns, local);
        self.create(
            &path,
            layout,
            &format!("scalable topic topic://{ns}/{local}"),
        )
        .await
    }

    /// Replaces the layout read at `version`; `Conflict` if it changed since
    /// (another controller, or this one's earlier step, wrote first).
    pub async fn replace_layout(
        &self,
        ns: &str,
        local: &str,
        layout: &Layout,
        version: u64,
    ) -> Result<u64, ResourcesError> {
        let path = paths::scalable_topic(ns, local);
        match self
            .store()
            .put(&path, &encode(layout), Expect::Version(version))
            .await
        {
            Ok(stat) => Ok(stat.version),
            Err(MetadataError::BadVersion { .. } | MetadataError::NotFound(_)) => {
                Err(ResourcesError::Conflict(format!(
                    "the layout of topic://{ns}/{local} changed since version {version}"
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The local names of a namespace's scalable topics.
    pub async fn scalable_topics_of(&self, ns: &str) -> Result<Vec<String>, ResourcesError> {
        let prefix = paths::scalable_topics_of(ns);
        let mut out: Vec<String> = self
            .store()
            .list_keys(&prefix)
            .await?
            .into_iter()
            .filter_map(|k| {
                let rest = &k[prefix.len()..];
                (!rest.contains('/'))
                    .then(|| paths::decode_local(rest))
                    .flatten()
            })
            .collect();
        out.sort();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use strobe_metadata::{EmbeddedStore, MetadataStore};

    use super::*;

    #[test]
    fn local_names_are_url_encoded_as_pulsar_encodes_them() {
        assert_eq!(paths::scalable_topic("t/n", "a/b c"), "/topics/t/n/a%2Fb+c");
        assert_eq!(
            paths::scalable_controller("t/n", "x"),
            "/topics/t/n/x/controller"
        );
        for name in ["a/b c", "x%2F", "ünï/cödé", "plain-name_1.*"] {
            assert_eq!(
                paths::decode_local(&paths::encode_local(name)).as_deref(),
                Some(name)
            );
        }
        assert_eq!(paths::decode_local("bad%zz"), None);
    }

    #[tokio::test]
    async fn layouts_are_compare_and_set_and_checked_when_read() {
        let store: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::in_memory());
        let r = Resources::load(store.clone()).await.unwrap();
        assert!(r.layout("public/default", "a/b").await.unwrap().is_none());
        let l = Layout::create(2, 4, BTreeMap::new(), 1).unwrap();
        let v = r.create_layout("public/default", "a/b", &l).await.unwrap();
        assert!(matches!(
            r.create_layout("public/default", "a/b", &l).await,
            Err(ResourcesError::AlreadyExists(_))
        ));
        let read = r.layout("public/default", "a/b").await.unwrap().unwrap();
        assert_eq!((read.value, read.version), (l.clone(), v));
        let (split, _) = l.split(0, 2).unwrap();
        let v2 = r
            .replace_layout("public/default", "a/b", &split, v)
            .await
            .unwrap();
        // A second writer that read the first version loses.
        assert!(matches!(
            r.replace_layout("public/default", "a/b", &split, v).await,
            Err(ResourcesError::Conflict(_))
        ));
        assert_eq!(
            r.layout("public/default", "a/b")
                .await
                .unwrap()
                .unwrap()
                .version,
            v2
        );
        assert_eq!(
            r.scalable_topics_of("public/default").await.unwrap(),
            vec!["a/b".to_string()]
        );
        // A document that breaks the invariants is refused, naming its path.
        let mut broken = split.clone();
        broken.segments.remove(&2);
        store
            .put(
                &paths::scalable_topic("public/default", "x"),
                &encode(&broken),
                Expect::Any,
            )
            .await
            .unwrap();
        match r.layout("public/default", "x").await {
            Err(ResourcesError::Corrupt { path, .. }) => {
                assert_eq!(path, "/topics/public/default/x")
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
}
