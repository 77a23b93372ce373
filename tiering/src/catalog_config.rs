//! Where tiered tables live: which catalog (the embedded SQL catalog or an
//! external Iceberg REST catalog), the warehouse location (a local directory
//! or `s3://bucket/prefix`) and the properties handed to the catalog and its
//! FileIO (S3 endpoint and keys, REST credentials).
//!
//! Property names are the Iceberg ones (`s3.endpoint`, `credential`, `token`,
//! …), so a value means here what it means to pyiceberg or Spark. Secrets are
//! kept in [`Secret`], whose `Debug` and `Display` print a mask, so no log line
//! or status output can show them.

use std::collections::BTreeMap;
use std::fmt;

/// Iceberg property: S3 endpoint (MinIO, moto, any S3-compatible store).
pub const S3_ENDPOINT: &str = "s3.endpoint";
/// Iceberg property: S3 region.
pub const S3_REGION: &str = "s3.region";
/// Iceberg property: S3 access key id.
pub const S3_ACCESS_KEY_ID: &str = "s3.access-key-id";
/// Iceberg property: S3 secret access key.
pub const S3_SECRET_ACCESS_KEY: &str = "s3.secret-access-key";
/// Iceberg property: path-style requests (`http://endpoint/bucket/key`) instead of virtual-host style.
pub const S3_PATH_STYLE_ACCESS: &str = "s3.path-style-access";
/// Iceberg REST property: OAuth2 client credential `client_id:client_secret` (or a bare secret).
pub const REST_CREDENTIAL: &str = "credential";
/// Iceberg REST property: a bearer token sent as is.
pub const REST_TOKEN: &str = "token";

/// A value that must never be printed: `Debug` and `Display` show `****`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether no value was given.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "****" })
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The kind of catalog tables are committed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogType {
    /// An Iceberg SQL catalog over SQLite (the embedded one by default).
    Sql,
    /// An external catalog speaking the Iceberg REST protocol.
    Rest,
}

impl std::str::FromStr for CatalogType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sql" => Ok(Self::Sql),
            "rest" => Ok(Self::Rest),
            other => Err(format!("`{other}` is not a catalog type (sql or rest)")),
        }
    }
}

impl fmt::Display for CatalogType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Sql => "sql",
            Self::Rest => "rest",
        })
    }
}

/// S3 settings of the warehouse (empty fields are left to the S3 client's
/// own defaults, which include the standard `AWS_*` environment variables).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct S3Settings {
    /// Endpoint URL, e.g. `http://127.0.0.1:9000`; empty for AWS.
    pub endpoint: String,
    /// Region.
    pub region: String,
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: Secret,
    /// Path-style requests (MinIO and most S3-compatible stores want this).
    pub path_style_access: bool,
}

/// Everything needed to open the catalog. `Debug` masks the secrets and any
/// `user:password@` in the URIs.
#[derive(Clone, PartialEq, Eq)]
pub struct CatalogConfig {
    /// The catalog's name (readers of a SQL catalog must use the same).
    pub name: String,
    /// SQL or REST.
    pub catalog_type: CatalogType,
    /// SQL: `sqlite:PATH` (opened `?mode=rwc` by the writer, `?mode=ro` by
    /// readers unless the URI has its own query); REST: the catalog's base URI
    /// (`http://host:8181`, `https://…`).
    pub uri: String,
    /// The warehouse: `file:///dir`, `s3://bucket/prefix`, or for REST whatever
    /// the catalog understands (may be empty: the catalog decides).
    pub warehouse: String,
    /// S3 settings, used when the warehouse (or a table location) is on S3.
    pub s3: S3Settings,
    /// REST: OAuth2 client credential (`client_id:client_secret`).
    pub rest_credential: Secret,
    /// REST: bearer token.
    pub rest_token: Secret,
}

impl CatalogConfig {
    /// The embedded SQLite catalog `catalog_db` over the local directory `warehouse`.
    pub fn sqlite(name: &str, catalog_db: &std::path::Path, warehouse: &std::path::Path) -> Self {
        Self {
            name: name.to_string(),
            catalog_type: CatalogType::Sql,
            uri: format!("sqlite:{}", catalog_db.display()),
            warehouse: format!("file://{}", warehouse.display()),
            s3: S3Settings::default(),
            rest_credential: Secret::default(),
            rest_token: Secret::default(),
        }
    }

    /// SQL: the SQLite database file (`None` for an in-memory database or a REST catalog).
    pub fn sqlite_path(&self) -> Option<std::path::PathBuf> {
        if self.catalog_type != CatalogType::Sql {
            return None;
        }
        let rest = self.uri.strip_prefix("sqlite:")?;
        let path = rest.split('?').next().unwrap_or(rest);
        let path = path.strip_prefix("//").unwrap_or(path);
        (!path.is_empty() && path != ":memory:").then(|| std::path::PathBuf::from(path))
    }

    /// The SQLite URI opened read-write (`create`: creating the database) or read-only.
    pub(crate) fn sqlite_uri(&self, writable: bool) -> String {
        if self.uri.contains('?') {
            return self.uri.clone();
        }
        format!("{}?mode={}", self.uri, if writable { "rwc" } else { "ro" })
    }

    /// The local directory of a `file://` (or bare absolute path) warehouse; `None` for object stores.
    pub fn local_warehouse(&self) -> Option<std::path::PathBuf> {
        local_path(&self.warehouse)
    }

    /// Whether the warehouse is on S3 (`s3://`, `s3a://`, `s3n://`).
    pub fn warehouse_on_s3(&self) -> bool {
        is_s3(&self.warehouse)
    }

    /// The properties handed to the catalog builder (and through it to every
    /// FileIO it makes): the S3 ones that are set, and the REST credentials.
    pub fn properties(&self) -> BTreeMap<String, String> {
        let mut props = BTreeMap::new();
        let s3 = &self.s3;
        for (key, value) in [
            (S3_ENDPOINT, s3.endpoint.as_str()),
            (S3_REGION, s3.region.as_str()),
            (S3_ACCESS_KEY_ID, s3.access_key_id.as_str()),
            (S3_SECRET_ACCESS_KEY, s3.secret_access_key.expose()),
        ] {
            if !value.trim().is_empty() {
                props.insert(key.to_string(), value.trim().to_string());
            }
        }
        props.insert(S3_PATH_STYLE_ACCESS.to_string(), s3.path_style_access.to_string());
        if self.catalog_type == CatalogType::Rest {
            if !self.rest_credential.is_empty() {
                props
                    .insert(REST_CREDENTIAL.to_string(), self.rest_credential.expose().to_string());
            }
            if !self.rest_token.is_empty() {
                props.insert(REST_TOKEN.to_string(), self.rest_token.expose().to_string());
            }
        }
        props
    }

    /// A one-line description safe to log or print: type, URI (userinfo
    /// masked), warehouse, S3 endpoint; never a secret.
    pub fn describe(&self) -> String {
        let mut out =
            format!("{} catalog {} at {}", self.catalog_type, self.name, mask_userinfo(&self.uri));
        if !self.warehouse.is_empty() {
            out.push_str(&format!(", warehouse {}", mask_userinfo(&self.warehouse)));
        }
        if !self.s3.endpoint.is_empty() {
            out.push_str(&format!(", s3 endpoint {}", mask_userinfo(&self.s3.endpoint)));
        }
        out
    }
}

impl fmt::Debug for CatalogConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s3 = S3Settings { endpoint: mask_userinfo(&self.s3.endpoint), ..self.s3.clone() };
        f.debug_struct("CatalogConfig")
            .field("name", &self.name)
            .field("catalog_type", &self.catalog_type)
            .field("uri", &mask_userinfo(&self.uri))
            .field("warehouse", &mask_userinfo(&self.warehouse))
            .field("s3", &s3)
            .field("rest_credential", &self.rest_credential)
            .field("rest_token", &self.rest_token)
            .finish()
    }
}

/// The local path of a `file://` location or bare absolute path.
pub(crate) fn local_path(location: &str) -> Option<std::path::PathBuf> {
    location
        .strip_prefix("file://")
        .or_else(|| location.starts_with('/').then_some(location))
        .map(std::path::PathBuf::from)
}

/// Whether `location` is an S3 URL.
pub(crate) fn is_s3(location: &str) -> bool {
    ["s3://", "s3a://", "s3n://"].iter().any(|scheme| location.starts_with(scheme))
}

/// `scheme://user:pass@host/…` → `scheme://****@host/…`: URIs may carry credentials.
pub fn mask_userinfo(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else { return uri.to_string() };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://****{}", &rest[at..]),
        None => uri.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let mut c = CatalogConfig::sqlite("floe", "/d/catalog.db".as_ref(), "/d/wh".as_ref());
        c.catalog_type = CatalogType::Rest;
        c.uri = "https://bob:hunter2@cat.example/api".into();
        c.s3.secret_access_key = Secret::new("s3-secret-value");
        c.rest_credential = Secret::new("client:rest-secret-value");
        c.rest_token = Secret::new("token-value");
        let shown = format!("{c:?} {} {}", c.describe(), c.rest_token);
        for secret in ["s3-secret-value", "rest-secret-value", "token-value", "hunter2"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("https://****@cat.example/api"), "{shown}");
        let props = c.properties();
        assert_eq!(props[S3_SECRET_ACCESS_KEY], "s3-secret-value");
        assert_eq!(props[REST_CREDENTIAL], "client:rest-secret-value");
        assert_eq!(props[REST_TOKEN], "token-value");
    }

    #[test]
    fn warehouse_kinds() {
        let mut c = CatalogConfig::sqlite("floe", "/d/catalog.db".as_ref(), "/d/wh".as_ref());
        assert_eq!(c.local_warehouse(), Some("/d/wh".into()));
        assert_eq!(c.sqlite_path(), Some("/d/catalog.db".into()));
        assert_eq!(c.sqlite_uri(false), "sqlite:/d/catalog.db?mode=ro");
        assert_eq!(c.sqlite_uri(true), "sqlite:/d/catalog.db?mode=rwc");
        assert!(!c.warehouse_on_s3());
        c.warehouse = "s3://bucket/prefix".into();
        assert_eq!(c.local_warehouse(), None);
        assert!(c.warehouse_on_s3());
        assert_eq!("REST".parse::<CatalogType>(), Ok(CatalogType::Rest));
        assert!("hive".parse::<CatalogType>().is_err());
        // Unset S3 keys are not passed, so the S3 client's own defaults (AWS_* variables) apply.
        assert!(!c.properties().contains_key(S3_ACCESS_KEY_ID));
        assert!(!c.properties().contains_key(REST_TOKEN));
    }
}
