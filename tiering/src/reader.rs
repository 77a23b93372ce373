//! Read-only view of the catalog, for serving it to other engines (the
//! broker's Iceberg REST endpoint).
//!
//! Answers what a REST catalog is asked — which namespaces and tables exist,
//! a table's current metadata and where that metadata is stored — and
//! nothing that writes: the SQLite database is opened with `mode=ro`. The
//! warehouse may be local or on S3 (the metadata files are read through the
//! same FileIO settings the writer uses). "Not found" is an answer (`None`),
//! not an error, so a caller can tell a missing table from a catalog that failed.
//!
//! The database is opened on first use, once it exists: before the first
//! tiered table the catalog is simply empty, and the reader creates no file.

use std::path::Path;
use std::sync::Arc;

use iceberg::spec::TableMetadataRef;
use iceberg::{Catalog, ErrorKind, Namespace, NamespaceIdent, TableIdent};
use tokio::sync::OnceCell;

use crate::catalog::{open_catalog, SqliteMode};
use crate::catalog_config::CatalogConfig;
use crate::error::{Result, TieringError};

/// A table as the catalog holds it now.
#[derive(Debug, Clone)]
pub struct TableState {
    /// Where the current metadata file is (`file:///…/metadata/….metadata.json`).
    pub metadata_location: Option<String>,
    /// The current metadata (schemas, partition specs, snapshots, properties).
    pub metadata: TableMetadataRef,
}

/// Read-only access to a catalog.
///
/// # Thread-safety
/// `Send + Sync`; every method takes `&self`. Each call reads the catalog
/// afresh, so a table committed a moment ago is visible to the next call.
#[derive(Debug)]
pub struct CatalogReader {
    source: Source,
    opened: OnceCell<Arc<dyn Catalog>>,
}

#[derive(Debug)]
enum Source {
    Config(Box<CatalogConfig>),
    Opened,
}

impl CatalogReader {
    /// A reader of the SQLite catalog `catalog_db` named `catalog_name`, with
    /// its warehouse in `warehouse`. Nothing is opened until the first call.
    pub fn sqlite(catalog_name: &str, catalog_db: &Path, warehouse: &Path) -> Self {
        Self::from_config(CatalogConfig::sqlite(catalog_name, catalog_db, warehouse))
    }

    /// A reader of the SQL catalog `config` describes (its warehouse local or
    /// on S3). Nothing is opened until the first call.
    pub fn from_config(config: CatalogConfig) -> Self {
        Self { source: Source::Config(Box::new(config)), opened: OnceCell::new() }
    }

    /// A reader of an already opened catalog (tests, other catalog kinds).
    pub fn new(catalog: Arc<dyn Catalog>) -> Self {
        Self { source: Source::Opened, opened: OnceCell::new_with(Some(catalog)) }
    }

    /// The catalog, or `None` while its database does not exist yet.
    async fn catalog(&self) -> Result<Option<&Arc<dyn Catalog>>> {
        if let Some(c) = self.opened.get() {
            return Ok(Some(c));
        }
        let Source::Config(config) = &self.source else { return Ok(None) };
        // A metadata lookup of one path: cheap enough for the reader's own runtime.
        if config.sqlite_path().is_some_and(|db| !db.exists()) {
            return Ok(None);
        }
        let c = self.opened.get_or_try_init(|| open_catalog(config, SqliteMode::ReadOnly)).await?;
        Ok(Some(c))
    }

    /// The namespaces directly under `parent` (top-level ones without), or
    /// `None` if `parent` does not exist. Sorted.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] if the catalog fails.
    pub async fn namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Option<Vec<NamespaceIdent>>> {
        let Some(catalog) = self.catalog().await? else {
            return Ok(parent.is_none().then(Vec::new));
        };
        let what = parent.map_or_else(String::new, |p| p.join("."));
        let found = not_found_is_none(catalog.list_namespaces(parent).await)
            .map_err(TieringError::iceberg("list namespaces", what))?;
        Ok(found.map(|mut list| {
            list.sort_by_key(|ns| ns.join("."));
            list
        }))
    }

    /// The namespace and its properties, or `None` if it does not exist.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] if the catalog fails.
    pub async fn namespace(&self, namespace: &NamespaceIdent) -> Result<Option<Namespace>> {
        let Some(catalog) = self.catalog().await? else { return Ok(None) };
        not_found_is_none(catalog.get_namespace(namespace).await)
            .map_err(TieringError::iceberg("load namespace", namespace.join(".")))
    }

    /// The tables of `namespace`, sorted by name, or `None` if the namespace does not exist.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] if the catalog fails.
    pub async fn tables(&self, namespace: &NamespaceIdent) -> Result<Option<Vec<TableIdent>>> {
        let Some(catalog) = self.catalog().await? else { return Ok(None) };
        let found = not_found_is_none(catalog.list_tables(namespace).await)
            .map_err(TieringError::iceberg("list tables", namespace.join(".")))?;
        Ok(found.map(|mut list| {
            list.sort_by(|a, b| a.name().cmp(b.name()));
            list
        }))
    }

    /// The table's current metadata and its location, or `None` if there is no such table.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] if the catalog fails or the metadata file cannot be read.
    pub async fn table(&self, ident: &TableIdent) -> Result<Option<TableState>> {
        let Some(catalog) = self.catalog().await? else { return Ok(None) };
        let table = not_found_is_none(catalog.load_table(ident).await)
            .map_err(TieringError::iceberg("load", ident))?;
        Ok(table.map(|t| TableState {
            metadata_location: t.metadata_location().map(str::to_string),
            metadata: t.metadata_ref(),
        }))
    }
}

/// `Ok(None)` for the catalog's "no such namespace/table" errors.
fn not_found_is_none<T>(result: iceberg::Result<T>) -> iceberg::Result<Option<T>> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if matches!(e.kind(), ErrorKind::NamespaceNotFound | ErrorKind::TableNotFound) => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::IcebergCatalog;

    #[tokio::test]
    async fn reads_what_the_writer_created_and_none_for_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("catalog.db");
        let warehouse = dir.path().join("warehouse");
        let reader = CatalogReader::sqlite("floe", &db, &warehouse);
        // No database yet: an empty catalog, and no file created.
        assert_eq!(reader.namespaces(None).await.unwrap(), Some(vec![]));
        assert!(reader.namespace(&NamespaceIdent::new("kafka".into())).await.unwrap().is_none());
        assert!(!db.exists());

        let writer = IcebergCatalog::open_sqlite("floe", &db, &warehouse, "kafka").await.unwrap();
        writer.topic_table("orders", "id-1", "day(timestamp)").await.unwrap();
        let kafka = NamespaceIdent::new("kafka".into());
        assert_eq!(reader.namespaces(None).await.unwrap(), Some(vec![kafka.clone()]));
        assert!(reader.namespace(&kafka).await.unwrap().is_some());
        let tables = reader.tables(&kafka).await.unwrap().unwrap();
        assert_eq!(tables, vec![TableIdent::new(kafka.clone(), "orders".into())]);
        let state = reader.table(&tables[0]).await.unwrap().unwrap();
        assert!(
            state.metadata_location.as_deref().is_some_and(|l| l.ends_with(".metadata.json")),
            "{state:?}"
        );
        assert_eq!(
            state.metadata.properties().get(crate::catalog::TOPIC_ID_PROPERTY).map(String::as_str),
            Some("id-1")
        );

        let missing = NamespaceIdent::new("nope".into());
        assert!(reader.tables(&missing).await.unwrap().is_none());
        assert!(reader.namespaces(Some(&missing)).await.unwrap().is_none());
        assert!(reader.table(&TableIdent::new(kafka, "nope".into())).await.unwrap().is_none());
    }
}
