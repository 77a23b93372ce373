//! The Iceberg catalog Floe commits to: by default an embedded SQLite SQL
//! catalog (`DATA_DIR/iceberg/catalog.db`) over a local warehouse directory
//! (`DATA_DIR/iceberg/warehouse`), readable by pyiceberg's `SqlCatalog`.
//!
//! Hands out [`TopicTable`]s, one per topic (namespace configurable, table
//! named as the topic), created on first use with the topic's partition spec,
//! each with the process-wide writer lock of its table.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use iceberg::io::LocalFsStorageFactory;
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableCreation, TableIdent};
use iceberg_catalog_sql::{SqlBindStyle, SqlCatalogBuilder};
use tracing::info;

use crate::error::{Result, TieringError};
use crate::schema::{iceberg_schema, parse_partition_spec};
use crate::table::TopicTable;

/// Table property naming the Kafka topic id the table was created for.
pub const TOPIC_ID_PROPERTY: &str = "floe.topic-id";

/// How the SQLite catalog database is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SqliteMode {
    /// Read and write, creating the database if it does not exist (the tiering writer).
    ReadWriteCreate,
    /// Read only (SQLite `mode=ro`): readers serving the catalog cannot write even by mistake.
    ReadOnly,
}

/// Opens the SQLite SQL catalog `catalog_db` named `catalog_name` over the local `warehouse`.
///
/// # Errors
/// [`TieringError::Iceberg`] if the database cannot be opened (or, read-write, its tables created).
pub(crate) async fn open_sql_catalog(
    catalog_name: &str,
    catalog_db: &Path,
    warehouse: &Path,
    mode: SqliteMode,
) -> Result<Arc<dyn Catalog>> {
    let mode = match mode {
        SqliteMode::ReadWriteCreate => "rwc",
        SqliteMode::ReadOnly => "ro",
    };
    let catalog = SqlCatalogBuilder::default()
        .uri(format!("sqlite:{}?mode={mode}", catalog_db.display()))
        .warehouse_location(format!("file://{}", warehouse.display()))
        .sql_bind_style(SqlBindStyle::QMark)
        // SQLite allows one writer: a single connection avoids "database is locked".
        .prop("pool.max-connections", "1")
        .with_storage_factory(Arc::new(LocalFsStorageFactory))
        .load(catalog_name, HashMap::new())
        .await
        .map_err(TieringError::iceberg("open catalog", catalog_name))?;
    Ok(Arc::new(catalog))
}

/// A catalog and the namespace tiered tables live in.
///
/// # Thread-safety
/// `Send + Sync`; the lock map is a `std::sync::Mutex` held only to look up
/// or insert a table's lock (no `.await` under it).
#[derive(Debug, Clone)]
pub struct IcebergCatalog {
    catalog: Arc<dyn Catalog>,
    namespace: NamespaceIdent,
    locks: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl IcebergCatalog {
    /// Opens (creating) the SQLite catalog `catalog_db` named `catalog_name`
    /// with its warehouse in `warehouse`, and ensures `namespace` exists.
    /// Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] if the database or the namespace cannot be opened or created.
    pub async fn open_sqlite(catalog_name: &str, catalog_db: &Path, warehouse: &Path, namespace: &str) -> Result<Self> {
        for dir in [catalog_db.parent().unwrap_or(Path::new(".")), warehouse] {
            std::fs::create_dir_all(dir).map_err(|source| TieringError::SegmentIo { path: dir.to_path_buf(), source })?;
        }
        let catalog = open_sql_catalog(catalog_name, catalog_db, warehouse, SqliteMode::ReadWriteCreate).await?;
        Self::new(catalog, namespace).await
    }

    /// Wraps an opened catalog, ensuring `namespace` exists.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] if the namespace cannot be checked or created.
    pub async fn new(catalog: Arc<dyn Catalog>, namespace: &str) -> Result<Self> {
        let ns = NamespaceIdent::new(namespace.to_string());
        let exists = catalog.namespace_exists(&ns).await.map_err(TieringError::iceberg("namespace", namespace))?;
        if !exists {
            catalog
                .create_namespace(&ns, HashMap::new())
                .await
                .map_err(TieringError::iceberg("namespace", namespace))?;
        }
        Ok(Self { catalog, namespace: ns, locks: Arc::default() })
    }

    /// The underlying catalog.
    pub fn catalog(&self) -> &Arc<dyn Catalog> {
        &self.catalog
    }

    /// The table of `topic`.
    pub fn ident(&self, topic: &str) -> TableIdent {
        TableIdent::new(self.namespace.clone(), topic.to_string())
    }

    /// The table of `topic`, created with `partition_spec` if it does not exist
    /// (an existing table keeps its spec). `topic_id` is recorded in the table's
    /// properties (`floe.topic-id`) at creation: a table left by an earlier,
    /// deleted topic of the same name is refused, as its committed offsets
    /// would make the new topic's records look tiered already.
    ///
    /// # Errors
    /// [`TieringError::InvalidPartitionSpec`]; [`TieringError::TopicMismatch`];
    /// [`TieringError::Iceberg`] if the catalog fails.
    pub async fn topic_table(&self, topic: &str, topic_id: &str, partition_spec: &str) -> Result<TopicTable> {
        let ident = self.ident(topic);
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            locks.entry(topic.to_string()).or_default().clone()
        };
        let exists = self.catalog.table_exists(&ident).await.map_err(TieringError::iceberg("load", &ident))?;
        if exists {
            let table = self.catalog.load_table(&ident).await.map_err(TieringError::iceberg("load", &ident))?;
            if let Some(id) = table.metadata().properties().get(TOPIC_ID_PROPERTY) {
                if id != topic_id {
                    return Err(TieringError::TopicMismatch { table: ident.to_string(), table_topic_id: id.clone(), topic_id: topic_id.to_string() });
                }
            }
        } else {
            let spec = parse_partition_spec(partition_spec)?;
            let creation = TableCreation::builder()
                .name(topic.to_string())
                .schema(iceberg_schema())
                .partition_spec(spec)
                .properties([
                    ("write.parquet.compression-codec".to_string(), "zstd".to_string()),
                    (TOPIC_ID_PROPERTY.to_string(), topic_id.to_string()),
                ])
                .build();
            self.catalog
                .create_table(&self.namespace, creation)
                .await
                .map_err(TieringError::iceberg("create", &ident))?;
            info!(table = %ident, partition_spec, "created iceberg table");
        }
        Ok(TopicTable::new(self.catalog.clone(), ident, lock))
    }
}
