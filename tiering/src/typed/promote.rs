//! Iceberg type promotion: `int` → `long`, `float` → `double`, a decimal's precision
//! widened at the same scale, when a schema version widens a field.
//!
//! The iceberg crate (0.10) can add and delete columns but not promote one, and a
//! catalog commit can only be built through its own actions. So the table's
//! metadata with a new current schema (same field ids, wider types) is committed
//! by [`crate::metadata_commit`] (SQL catalog compare-and-swap, or a REST commit
//! conditional on the current schema). Data files written before keep their
//! narrower types; every Iceberg reader widens them on read.

use iceberg::spec::{
    ListType, MapType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type,
};
use iceberg::table::Table;

use crate::metadata_commit::{DirectCommitter, MetadataCommitError};

/// A field whose type widens: its id, and the type it becomes.
pub type Promotion = (i32, PrimitiveType);

/// `schema` with the promoted fields' types widened, ids and everything else kept.
///
/// # Errors
/// The schema does not build (a bug: only primitive types change).
pub fn promoted_schema(schema: &Schema, promotions: &[Promotion]) -> iceberg::Result<Schema> {
    let fields =
        schema.as_struct().fields().iter().map(|f| retype(f, promotions)).collect::<Vec<_>>();
    Schema::builder()
        .with_fields(fields)
        .with_identifier_field_ids(schema.identifier_field_ids())
        .build()
}

fn retype(field: &NestedFieldRef, promotions: &[Promotion]) -> NestedFieldRef {
    let field_type = match field.field_type.as_ref() {
        Type::Primitive(p) => Type::Primitive(
            promotions
                .iter()
                .find(|(id, _)| *id == field.id)
                .map_or_else(|| p.clone(), |(_, to)| to.clone()),
        ),
        Type::Struct(s) => Type::Struct(StructType::new(
            s.fields().iter().map(|f| retype(f, promotions)).collect(),
        )),
        Type::List(l) => Type::List(ListType::new(retype(&l.element_field, promotions))),
        Type::Map(m) => Type::Map(MapType::new(
            retype(&m.key_field, promotions),
            retype(&m.value_field, promotions),
        )),
    };
    NestedField { field_type: Box::new(field_type), ..NestedField::clone(field) }.into()
}

/// Commits `promotions` to `table` through `committer` ([`crate::metadata_commit`]).
///
/// # Errors
/// A message: the schema cannot be built, the catalog cannot be reached, or the
/// table's schema moved since it was loaded (nothing committed).
pub async fn commit_promotions(
    table: &Table,
    promotions: &[Promotion],
    committer: &DirectCommitter,
) -> Result<(), String> {
    let schema = promoted_schema(table.metadata().current_schema(), promotions)
        .map_err(|e| e.to_string())?;
    match committer.commit_current_schema(table, schema).await {
        Ok(()) => Ok(()),
        Err(MetadataCommitError::Moved(ident)) => Err(format!(
            "{ident} changed while its types were being promoted; retried on the next pass"
        )),
        Err(MetadataCommitError::Failed(why)) => Err(why),
    }
}
