//! `strobe admin clusters …`: pulsar-admin's cluster verbs. A Strobe
//! cluster serves one Pulsar cluster (its `cluster_name`): `get` shows its
//! service URLs, `create` and `update` of that cluster are accepted as
//! Pulsar's test setups declare it, any other name is refused by the broker
//! with its reason, and `delete` of the served cluster is refused (412).

use clap::Subcommand;
use serde_json::json;

use crate::admin_http::{Http, seg};
use crate::admin_output::Output;

#[derive(Debug, Subcommand)]
pub enum ClustersCmd {
    /// The clusters this broker knows (the one it serves).
    List,
    /// A cluster's service URLs.
    Get {
        cluster: String,
    },
    /// Declares the cluster (only the one this broker serves is accepted).
    Create {
        cluster: String,
        #[command(flatten)]
        urls: UrlArgs,
    },
    /// As `create`: the served cluster's URLs come from the brokers' configuration.
    Update {
        cluster: String,
        #[command(flatten)]
        urls: UrlArgs,
    },
    Delete {
        cluster: String,
    },
}

/// pulsar-admin's `clusters create` URL options.
#[derive(Debug, clap::Args)]
pub struct UrlArgs {
    #[arg(long)]
    url: Option<String>,
    #[arg(long = "url-secure")]
    url_secure: Option<String>,
    #[arg(long = "broker-url")]
    broker_url: Option<String>,
    #[arg(long = "broker-url-secure")]
    broker_url_secure: Option<String>,
}

impl UrlArgs {
    /// Pulsar's `ClusterData` JSON of the options given.
    fn body(&self) -> serde_json::Value {
        let mut v = json!({});
        for (k, o) in [
            ("serviceUrl", &self.url),
            ("serviceUrlTls", &self.url_secure),
            ("brokerServiceUrl", &self.broker_url),
            ("brokerServiceUrlTls", &self.broker_url_secure),
        ] {
            if let Some(u) = o {
                v[k] = json!(u);
            }
        }
        v
    }
}

pub fn clusters(http: &Http, cmd: ClustersCmd) -> anyhow::Result<Output> {
    use ClustersCmd as C;
    let path = |c: &str| format!("/admin/v2/clusters/{}", seg(c));
    Ok(match cmd {
        C::List => http.get("/admin/v2/clusters")?.into(),
        C::Get { cluster } => http.get(&path(&cluster))?.into(),
        C::Create { cluster, urls } => {
            http.send("PUT", &path(&cluster), &urls.body().to_string())?;
            Output::Done(format!("cluster {cluster} created"))
        }
        C::Update { cluster, urls } => {
            http.send("POST", &path(&cluster), &urls.body().to_string())?;
            Output::Done(format!("cluster {cluster} updated"))
        }
        C::Delete { cluster } => {
            http.send("DELETE", &path(&cluster), "")?;
            Output::Done(format!("cluster {cluster} deleted"))
        }
    })
}
