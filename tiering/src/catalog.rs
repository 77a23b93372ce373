//! The Iceberg catalog Floe commits to: by default an embedded SQLite SQL
//! catalog (`DATA_DIR/iceberg/catalog.db`) over a local warehouse directory
//! (`DATA_DIR/iceberg/warehouse`), readable by pyiceberg's `SqlCatalog`; or,
//! per [`CatalogConfig`], a warehouse on S3 and/or an external REST catalog.
//!
//! Hands out [`TopicTable`]s, one per topic (namespace configurable, table
//! named as the topic), created on first use with the topic's partition spec,
//! each with the process-wide writer lock of its table.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iceberg::io::{LocalFsStorageFactory, StorageFactory};
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableCreation, TableIdent};
use iceberg_catalog_rest::{
    RestCatalogBuilder, REST_CATALOG_PROP_URI, REST_CATALOG_PROP_WAREHOUSE,
};
use iceberg_catalog_sql::{SqlBindStyle, SqlCatalogBuilder};
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;
use tracing::info;

use crate::catalog_config::{CatalogConfig, CatalogType};
use crate::error::{Result, TieringError};
use crate::schema::{
    dlq_iceberg_schema, iceberg_schema, log_iceberg_schema, lossless_dlq_iceberg_schema,
    lossless_iceberg_schema, lossless_typed_table_schema, parse_partition_spec, typed_table_schema,
};
use crate::table::TopicTable;
use crate::typed::{DataFormat, TypedLayout};

/// Table property naming the Kafka topic id the table was created for.
pub const TOPIC_ID_PROPERTY: &str = "floe.topic-id";

/// Connecting to a REST catalog gives up after this long (then the caller's retry applies).
const REST_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A REST catalog request (a commit included) gives up after this long: a hung
/// catalog must not hold the tiering thread forever.
const REST_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// How the SQLite catalog database is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SqliteMode {
    /// Read and write, creating the database if it does not exist (the tiering writer).
    ReadWriteCreate,
    /// Read only (SQLite `mode=ro`): readers serving the catalog cannot write even by mistake.
    ReadOnly,
}

/// The FileIO backend: a local warehouse of the SQL catalog stays on the
/// crate's own local storage (what the embedded catalog has always used);
/// anything else (an S3 warehouse, or a REST catalog, which may hand out any
/// location) goes through OpenDAL, which picks file or S3 per path.
fn storage_factory(config: &CatalogConfig) -> Arc<dyn StorageFactory> {
    if config.catalog_type == CatalogType::Sql && config.local_warehouse().is_some() {
        Arc::new(LocalFsStorageFactory)
    } else {
        Arc::new(OpenDalResolvingStorageFactory::new())
    }
}

/// Opens the catalog `config` describes. A SQL catalog opened
/// [`SqliteMode::ReadWriteCreate`] creates its database; a REST catalog is
/// reached lazily (the first call on it is what talks to the server), and
/// `mode` does not apply to it.
///
/// # Errors
/// [`TieringError::Iceberg`] if the catalog cannot be opened;
/// [`TieringError::HttpClient`] if the REST client cannot be built.
pub(crate) async fn open_catalog(
    config: &CatalogConfig,
    mode: SqliteMode,
) -> Result<Arc<dyn Catalog>> {
    let props: HashMap<String, String> = config.properties().into_iter().collect();
    let factory = storage_factory(config);
    match config.catalog_type {
        CatalogType::Sql => {
            let catalog = SqlCatalogBuilder::default()
                .uri(config.sqlite_uri(mode == SqliteMode::ReadWriteCreate))
                .warehouse_location(config.warehouse.clone())
                .sql_bind_style(SqlBindStyle::QMark)
                // SQLite allows one writer: a single connection avoids "database is locked".
                .prop("pool.max-connections", "1")
                .with_storage_factory(factory)
                .load(&config.name, props)
                .await
                .map_err(TieringError::iceberg("open catalog", &config.name))?;
            Ok(Arc::new(catalog))
        }
        CatalogType::Rest => {
            let mut props = props;
            props.insert(REST_CATALOG_PROP_URI.to_string(), config.uri.clone());
            if !config.warehouse.is_empty() {
                props.insert(REST_CATALOG_PROP_WAREHOUSE.to_string(), config.warehouse.clone());
            }
            // Our own client: timeouts (the default has none), and TLS with the
            // system's roots for https:// catalogs.
            let client = reqwest::Client::builder()
                .connect_timeout(REST_CONNECT_TIMEOUT)
                .timeout(REST_REQUEST_TIMEOUT)
                .build()
                .map_err(TieringError::HttpClient)?;
            let catalog = RestCatalogBuilder::default()
                .with_client(client)
                .with_storage_factory(factory)
                .load(&config.name, props)
                .await
                .map_err(TieringError::iceberg("open catalog", &config.name))?;
            Ok(Arc::new(catalog))
        }
    }
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
    /// What the catalog was opened with (its `s3.*` properties list S3 tables for orphans).
    config: Option<Arc<CatalogConfig>>,
}

impl IcebergCatalog {
    /// Opens (creating) the SQLite catalog `catalog_db` named `catalog_name`
    /// with its warehouse in the local directory `warehouse`, and ensures
    /// `namespace` exists. Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// As [`IcebergCatalog::open`].
    pub async fn open_sqlite(
        catalog_name: &str,
        catalog_db: &Path,
        warehouse: &Path,
        namespace: &str,
    ) -> Result<Self> {
        Self::open(&CatalogConfig::sqlite(catalog_name, catalog_db, warehouse), namespace).await
    }

    /// Opens the catalog `config` describes for writing and ensures
    /// `namespace` exists. A local SQLite database and a local warehouse
    /// directory are created if missing. Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// [`TieringError::SegmentIo`] if a local directory cannot be created;
    /// [`TieringError::Iceberg`] if the catalog cannot be opened or reached, or
    /// the namespace cannot be checked or created.
    pub async fn open(config: &CatalogConfig, namespace: &str) -> Result<Self> {
        let db_dir =
            config.sqlite_path().map(|db| db.parent().map(Path::to_path_buf).unwrap_or_default());
        for dir in db_dir.into_iter().chain(config.local_warehouse()) {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(&dir)
                    .map_err(|source| TieringError::SegmentIo { path: dir.clone(), source })?;
            }
        }
        let catalog = open_catalog(config, SqliteMode::ReadWriteCreate).await?;
        let mut opened = Self::new(catalog, namespace).await?;
        opened.config = Some(Arc::new(config.clone()));
        Ok(opened)
    }

    /// Opens the catalog `config` describes for reading only (SQLite `mode=ro`;
    /// a REST catalog as for writing): the shared-storage read threads, which
    /// must never write it. Nothing is created.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] if the catalog cannot be opened (a SQLite
    /// database not created yet among them).
    pub async fn open_read_only(config: &CatalogConfig, namespace: &str) -> Result<Self> {
        let catalog = open_catalog(config, SqliteMode::ReadOnly).await?;
        let ns = NamespaceIdent::new(namespace.to_string());
        Ok(Self {
            catalog,
            namespace: ns,
            locks: Arc::default(),
            config: Some(Arc::new(config.clone())),
        })
    }

    /// Wraps an opened catalog, ensuring `namespace` exists.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] if the namespace cannot be checked or created.
    pub async fn new(catalog: Arc<dyn Catalog>, namespace: &str) -> Result<Self> {
        let ns = NamespaceIdent::new(namespace.to_string());
        let exists = catalog
            .namespace_exists(&ns)
            .await
            .map_err(TieringError::iceberg("namespace", namespace))?;
        if !exists {
            if let Err(e) = catalog.create_namespace(&ns, HashMap::new()).await {
                // Another broker of the cluster may have created it first.
                if !catalog.namespace_exists(&ns).await.unwrap_or(false) {
                    return Err(TieringError::iceberg("namespace", namespace)(e));
                }
            }
        }
        Ok(Self { catalog, namespace: ns, locks: Arc::default(), config: None })
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
    pub async fn topic_table(
        &self,
        topic: &str,
        topic_id: &str,
        partition_spec: &str,
    ) -> Result<TopicTable> {
        self.open_table(topic, topic_id, partition_spec, iceberg_schema()).await
    }

    /// As [`IcebergCatalog::topic_table`], for a topic whose values are in the
    /// Confluent wire format (`floe.iceberg.value.format=schema-registry`): a new
    /// table starts with the Kafka columns (and the raw `value` if `keep_raw`), its
    /// value columns added as schemas are seen; values that cannot be typed go to the
    /// dead-letter table `<topic>__dlq`, opened here too. `schemas` gives the decoders.
    ///
    /// # Errors
    /// As [`IcebergCatalog::topic_table`], for either table.
    pub async fn typed_topic_table(
        &self,
        topic: &str,
        topic_id: &str,
        partition_spec: &str,
        keep_raw: bool,
        schemas: Arc<dyn crate::typed::SchemaSource>,
    ) -> Result<TopicTable> {
        let layout =
            TypedLayout { key: DataFormat::Raw, value: DataFormat::SchemaRegistry, keep_raw };
        self.typed_table(topic, topic_id, partition_spec, layout, Some(schemas)).await
    }

    /// As [`IcebergCatalog::typed_topic_table`], for any layout with something typed:
    /// keys and values each raw, in the wire format (typed by `schemas`, which must
    /// then be there), or schemaless JSON ([`crate::typed::json`]). A new table starts
    /// with the Kafka columns of [`crate::schema::typed_table_schema`].
    ///
    /// # Errors
    /// As [`IcebergCatalog::topic_table`], for either table; [`TieringError::SchemaRegistry`]
    /// when the layout needs the registry and `schemas` is `None`.
    pub async fn typed_table(
        &self,
        topic: &str,
        topic_id: &str,
        partition_spec: &str,
        layout: TypedLayout,
        schemas: Option<Arc<dyn crate::typed::SchemaSource>>,
    ) -> Result<TopicTable> {
        require_registry(&layout, schemas.as_ref())?;
        let dlq = self
            .open_table(
                &dead_letter_table_name(topic),
                topic_id,
                partition_spec,
                dlq_iceberg_schema(),
            )
            .await?;
        let table =
            self.open_table(topic, topic_id, partition_spec, typed_table_schema(&layout)).await?;
        Ok(table.with_typed_values(schemas, layout, dlq))
    }

    /// As [`IcebergCatalog::topic_table`], for a topic with `floe.iceberg.storage=shared`:
    /// the table has the lossless layout ([`crate::schema::lossless_iceberg_schema`]), and
    /// what a READ_COMMITTED reader would not keep (markers, aborted records, batches that
    /// cannot be decoded, damaged ranges) goes to `<topic>__log`, opened here too.
    ///
    /// # Errors
    /// As [`IcebergCatalog::topic_table`]; [`TieringError::NotLossless`] for an existing
    /// table created in copy mode.
    pub async fn shared_topic_table(
        &self,
        topic: &str,
        topic_id: &str,
        partition_spec: &str,
    ) -> Result<TopicTable> {
        let table =
            self.open_table(topic, topic_id, partition_spec, lossless_iceberg_schema()).await?;
        if !crate::schema::is_lossless(table.load().await?.metadata().current_schema()) {
            return Err(TieringError::NotLossless { table: table.ident().to_string() });
        }
        let log = self
            .open_table(&log_table_name(topic), topic_id, partition_spec, log_iceberg_schema())
            .await?;
        Ok(table.with_log_table(log))
    }

    /// As [`IcebergCatalog::shared_topic_table`] and [`IcebergCatalog::typed_table`] at
    /// once, for a shared topic with a typed key or value format (issue #16): the
    /// table has the typed layout with the raw bytes kept (`layout.keep_raw`, which
    /// validation demands: a fetch is rebuilt from `value` and `key_raw`) and the
    /// lossless columns ([`crate::schema::lossless_typed_table_schema`]); the
    /// records that cannot be typed go to `<topic>__dlq` in the lossless layout
    /// (plus `error`), so the rebuild finds them there; `<topic>__log` as for any
    /// shared table. Commit order: `__log`, `__dlq`, then the table.
    ///
    /// # Errors
    /// As [`IcebergCatalog::typed_table`]; [`TieringError::Unsupported`] when
    /// `keep_raw` is off; [`TieringError::NotLossless`] for an existing table or
    /// dead-letter table created in copy mode.
    pub async fn shared_typed_table(
        &self,
        topic: &str,
        topic_id: &str,
        partition_spec: &str,
        layout: TypedLayout,
        schemas: Option<Arc<dyn crate::typed::SchemaSource>>,
    ) -> Result<TopicTable> {
        require_registry(&layout, schemas.as_ref())?;
        if !layout.keep_raw {
            // Without the bytes no fetch can be rebuilt from the table.
            return Err(TieringError::Unsupported(format!(
                "{}: shared storage with a typed key or value format needs floe.iceberg.keep-raw=true",
                self.ident(topic)
            )));
        }
        let dlq = self
            .open_table(
                &dead_letter_table_name(topic),
                topic_id,
                partition_spec,
                lossless_dlq_iceberg_schema(),
            )
            .await?;
        let table = self
            .open_table(topic, topic_id, partition_spec, lossless_typed_table_schema(&layout))
            .await?;
        for t in [&table, &dlq] {
            if !crate::schema::is_lossless(t.load().await?.metadata().current_schema()) {
                return Err(TieringError::NotLossless { table: t.ident().to_string() });
            }
        }
        let log = self
            .open_table(&log_table_name(topic), topic_id, partition_spec, log_iceberg_schema())
            .await?;
        Ok(table.with_typed_values(schemas, layout, dlq).with_log_table(log))
    }

    async fn open_table(
        &self,
        topic: &str,
        topic_id: &str,
        partition_spec: &str,
        schema: iceberg::spec::Schema,
    ) -> Result<TopicTable> {
        let ident = self.ident(topic);
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            locks.entry(topic.to_string()).or_default().clone()
        };
        let exists = self
            .catalog
            .table_exists(&ident)
            .await
            .map_err(TieringError::iceberg("load", &ident))?;
        if exists {
            let table = self
                .catalog
                .load_table(&ident)
                .await
                .map_err(TieringError::iceberg("load", &ident))?;
            Self::check_location(&ident, &table)?;
            Self::check_topic_id(&ident, &table, topic_id)?;
        } else {
            let spec = parse_partition_spec(partition_spec)?;
            let lossless = crate::schema::is_lossless(&schema);
            // A lossless (shared) table is read by Kafka fetches a row group at a time: smaller ones.
            let kafka_columns = lossless
                .then(|| {
                    [
                        (
                            crate::schema::KAFKA_COLUMNS_PROPERTY.to_string(),
                            crate::schema::kafka_columns_property(),
                        ),
                        (
                            crate::sink::ROW_GROUP_LIMIT_PROPERTY.to_string(),
                            crate::sink::SHARED_ROW_GROUP_ROWS.to_string(),
                        ),
                    ]
                })
                .into_iter()
                .flatten();
            let creation = TableCreation::builder()
                .name(topic.to_string())
                .schema(schema)
                .partition_spec(spec)
                .properties(
                    [
                        ("write.parquet.compression-codec".to_string(), "zstd".to_string()),
                        (TOPIC_ID_PROPERTY.to_string(), topic_id.to_string()),
                        // A metadata file per commit: keep the last 100, delete the ones before (Iceberg's names).
                        (
                            crate::maintenance::METADATA_DELETE_AFTER_COMMIT.to_string(),
                            "true".to_string(),
                        ),
                        (
                            crate::maintenance::METADATA_PREVIOUS_VERSIONS_MAX.to_string(),
                            "100".to_string(),
                        ),
                    ]
                    .into_iter()
                    .chain(kafka_columns),
                )
                .build();
            match self.catalog.create_table(&self.namespace, creation).await {
                Ok(_) => info!(table = %ident, partition_spec, "created iceberg table"),
                // Another broker of the cluster created it first (or the catalog refused):
                // use theirs if it is there, after the same topic id check.
                Err(e) => {
                    let exists = self.catalog.table_exists(&ident).await.unwrap_or(false);
                    if !exists {
                        return Err(TieringError::iceberg("create", &ident)(e));
                    }
                    info!(table = %ident, error = %e, "iceberg table created by another writer meanwhile");
                    let table = self
                        .catalog
                        .load_table(&ident)
                        .await
                        .map_err(TieringError::iceberg("load", &ident))?;
                    Self::check_topic_id(&ident, &table, topic_id)?;
                }
            }
        }
        Ok(TopicTable::new(self.catalog.clone(), ident, lock, self.config.clone()))
    }

    /// A table whose location is not absolute (`file://./…`, `file://dir/…`, or a bare
    /// relative path) is refused: see [`TieringError::RelativeLocation`].
    fn check_location(ident: &TableIdent, table: &iceberg::table::Table) -> Result<()> {
        let location = table.metadata().location();
        match relative_location(location) {
            None => Ok(()),
            Some(files_at) => Err(TieringError::RelativeLocation {
                table: ident.to_string(),
                location: location.to_string(),
                files_at,
            }),
        }
    }

    /// A table left by an earlier, deleted topic of the same name is refused.
    fn check_topic_id(
        ident: &TableIdent,
        table: &iceberg::table::Table,
        topic_id: &str,
    ) -> Result<()> {
        match table.metadata().properties().get(TOPIC_ID_PROPERTY) {
            Some(id) if id != topic_id => Err(TieringError::TopicMismatch {
                table: ident.to_string(),
                table_topic_id: id.clone(),
                topic_id: topic_id.to_string(),
            }),
            _ => Ok(()),
        }
    }
}

/// Where a local file system put the files of a table stored at a relative
/// `location`, or `None` when the location is absolute (`file:///…`, `s3://…`, `/…`).
pub fn relative_location(location: &str) -> Option<String> {
    let path = match location.strip_prefix("file://") {
        Some(rest) if rest.starts_with('/') => return None,
        Some(rest) => rest,
        None if location.contains("://") || location.starts_with('/') => return None,
        None => location,
    };
    // The file system root, as the local I/O resolves a location with a host.
    Some(format!("/{}", path.trim_start_matches("./")))
}

/// A layout that types through the Schema Registry needs it on.
fn require_registry(
    layout: &TypedLayout,
    schemas: Option<&Arc<dyn crate::typed::SchemaSource>>,
) -> Result<()> {
    if layout.needs_registry() && schemas.is_none() {
        return Err(TieringError::SchemaRegistry(
            "the key or value format is schema-registry, which needs the Schema Registry (it is off)".into(),
        ));
    }
    Ok(())
}

/// The companion table of a shared topic's table: `<topic>__log`.
pub fn log_table_name(topic: &str) -> String {
    format!("{topic}__log")
}

/// The dead-letter table of a typed topic's table: `<topic>__dlq`.
pub fn dead_letter_table_name(topic: &str) -> String {
    format!("{topic}__dlq")
}

#[cfg(test)]
mod location_tests {
    use super::relative_location;

    #[test]
    fn only_absolute_locations_are_written_to() {
        for absolute in [
            "file:///srv/floe-data/iceberg/warehouse/kafka/t",
            "s3://bucket/wh/kafka/t",
            "/srv/wh/kafka/t",
        ] {
            assert_eq!(relative_location(absolute), None, "{absolute}");
        }
        assert_eq!(
            relative_location("file://./floe-data/iceberg/warehouse/kafka/t").as_deref(),
            Some("/floe-data/iceberg/warehouse/kafka/t")
        );
        assert_eq!(
            relative_location("file://floe-data/wh/kafka/t").as_deref(),
            Some("/floe-data/wh/kafka/t")
        );
        assert_eq!(
            relative_location("./floe-data/wh/kafka/t").as_deref(),
            Some("/floe-data/wh/kafka/t")
        );
    }
}
