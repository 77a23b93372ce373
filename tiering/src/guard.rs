//! The commit guard: a catalog wrapper that refuses to let a commit be
//! rebased onto a snapshot the plan did not see.
//!
//! `Transaction::commit` re-loads the table before applying its actions and
//! retries catalog conflicts by re-loading again, so a fast append planned
//! on snapshot S silently lands on top of whatever another writer committed
//! after S. Committing through [`ExpectSnapshot`] closes that: every load of
//! the table during the commit must show the planned snapshot as current, or
//! the commit fails (not retryable). The SQL catalog's own compare-and-swap
//! on the metadata location, with the append's `RefSnapshotIdMatch`
//! requirement, covers the moment between that load and the swap.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, TableCommit, TableCreation, TableIdent,
};

/// Delegates to `inner`; loads of `ident` fail unless its current snapshot is `expected`.
#[derive(Debug)]
pub(crate) struct ExpectSnapshot {
    pub(crate) inner: Arc<dyn Catalog>,
    pub(crate) ident: TableIdent,
    pub(crate) expected: Option<i64>,
}

/// The message of the error a moved table produces.
pub(crate) const MOVED: &str = "floe: table moved past the planned snapshot";

#[async_trait]
impl Catalog for ExpectSnapshot {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }
    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        self.inner.create_namespace(namespace, properties).await
    }
    async fn get_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        self.inner.get_namespace(namespace).await
    }
    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        self.inner.namespace_exists(namespace).await
    }
    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        self.inner.update_namespace(namespace, properties).await
    }
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<()> {
        self.inner.drop_namespace(namespace).await
    }
    async fn list_tables(&self, namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        self.inner.list_tables(namespace).await
    }
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> iceberg::Result<Table> {
        self.inner.create_table(namespace, creation).await
    }
    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        let loaded = self.inner.load_table(table).await?;
        let current = loaded.metadata().current_snapshot_id();
        if *table == self.ident && current != self.expected {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "{MOVED}: planned on snapshot {}, current {}",
                    crate::error::snapshot_name(self.expected),
                    crate::error::snapshot_name(current)
                ),
            ));
        }
        Ok(loaded)
    }
    async fn drop_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.inner.drop_table(table).await
    }
    async fn purge_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.inner.purge_table(table).await
    }
    async fn table_exists(&self, table: &TableIdent) -> iceberg::Result<bool> {
        self.inner.table_exists(table).await
    }
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> iceberg::Result<()> {
        self.inner.rename_table(src, dest).await
    }
    async fn register_table(
        &self,
        table: &TableIdent,
        metadata_location: String,
    ) -> iceberg::Result<Table> {
        self.inner.register_table(table, metadata_location).await
    }
    async fn update_table(&self, commit: TableCommit) -> iceberg::Result<Table> {
        self.inner.update_table(commit).await
    }
}
