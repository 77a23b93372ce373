//! `floe.metadata.store`: `local` or `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`.

use std::fmt;
use std::str::FromStr;

use crate::ClusterError;

/// Where the cluster's metadata lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetadataStoreUrl {
    /// This broker alone, its metadata in its data directory.
    Local,
    /// An etcd cluster: client endpoints (`http://host:port`) and the key prefix all
    /// of this Floe cluster's keys live under (default `/floe`), so that several Floe
    /// clusters can share one etcd.
    Etcd { endpoints: Vec<String>, prefix: String },
}

const DEFAULT_PREFIX: &str = "/floe";

impl FromStr for MetadataStoreUrl {
    type Err = ClusterError;

    fn from_str(value: &str) -> Result<Self, ClusterError> {
        let bad = |reason: &str| ClusterError::InvalidStoreUrl {
            value: value.to_string(),
            reason: reason.to_string(),
        };
        let value_trimmed = value.trim();
        if value_trimmed.is_empty() || value_trimmed == "local" {
            return Ok(Self::Local);
        }
        let Some(rest) = value_trimmed.strip_prefix("etcd://") else {
            return Err(bad("expected `local` or `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`"));
        };
        let (hosts, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, DEFAULT_PREFIX),
        };
        let prefix = if prefix.is_empty() { DEFAULT_PREFIX } else { prefix };
        let mut endpoints = Vec::new();
        for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
            let (h, port) =
                host.rsplit_once(':').ok_or_else(|| bad(&format!("`{host}` has no port")))?;
            if h.is_empty() || port.parse::<u16>().is_err() {
                return Err(bad(&format!("`{host}` is not HOST:PORT")));
            }
            endpoints.push(format!("http://{host}"));
        }
        if endpoints.is_empty() {
            return Err(bad("no etcd endpoint"));
        }
        Ok(Self::Etcd { endpoints, prefix: prefix.to_string() })
    }
}

impl fmt::Display for MetadataStoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Local => f.write_str("local"),
            Self::Etcd { endpoints, prefix } => {
                let hosts: Vec<&str> =
                    endpoints.iter().map(|e| e.trim_start_matches("http://")).collect();
                write!(f, "etcd://{}{prefix}", hosts.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_is_the_default_spelling() {
        assert_eq!("local".parse::<MetadataStoreUrl>().unwrap(), MetadataStoreUrl::Local);
        assert_eq!("".parse::<MetadataStoreUrl>().unwrap(), MetadataStoreUrl::Local);
    }

    #[test]
    fn etcd_urls_take_several_hosts_and_a_prefix() {
        let url: MetadataStoreUrl =
            "etcd://127.0.0.1:2379,10.0.0.2:2379/prod/floe/".parse().unwrap();
        assert_eq!(
            url,
            MetadataStoreUrl::Etcd {
                endpoints: vec!["http://127.0.0.1:2379".into(), "http://10.0.0.2:2379".into()],
                prefix: "/prod/floe".into()
            }
        );
        assert_eq!(url.to_string(), "etcd://127.0.0.1:2379,10.0.0.2:2379/prod/floe");
        let url: MetadataStoreUrl = "etcd://localhost:2379".parse().unwrap();
        assert_eq!(url.to_string(), "etcd://localhost:2379/floe");
    }

    #[test]
    fn malformed_urls_say_what_is_wrong() {
        for bad in ["zk://h:1", "etcd://", "etcd://host", "etcd://host:port", "etcd://:2379"] {
            let err = bad.parse::<MetadataStoreUrl>().unwrap_err();
            assert!(matches!(err, ClusterError::InvalidStoreUrl { .. }), "{bad}: {err}");
        }
    }
}
