//! Floe's Schema Registry: the model behind the Confluent Schema Registry's REST
//! API, so that the serializers of confluent-kafka, kafkajs and Kafka Connect work
//! against Floe unchanged.
//!
//! The registry's state is a fold of records, as Confluent's is: every change
//! (a schema registered under a subject, a version soft- or permanently deleted, a
//! compatibility level or a mode set) is a key/value record of the compacted
//! `_schemas` topic, in Confluent's own JSON layouts ([`records`]). A write is
//! *planned* against the current state ([`Registry::register`] and the other
//! planners return the records and the answer), appended to the topic by the
//! caller, and only then *applied* ([`Registry::apply`]); a restart replays the
//! topic through the same [`Registry::apply`]. The caller serialises writes (plan,
//! append, apply under one lock), so a plan never races another write, and what a
//! client was answered is what the log holds.
//!
//! What a schema *means* (parsing, canonical form, reader/writer compatibility) is
//! the job of a [`SchemaFormat`] per schema type (Avro, JSON Schema, Protobuf);
//! this crate's rules (which versions a new one is checked against, ids shared by
//! equal schemas, soft deletion) are the same for all of them.
//!
//! [`SchemaStore`] keeps the registry as that fold of the `_schemas` topic (in a
//! cluster, through a [`ClusterSide`] the broker implements), [`rest`] answers
//! Confluent's REST API from it (the broker runs the HTTP server, authenticates
//! and authorizes), and [`validation`] checks produced records against it.
//!
//! Beside the registry, [`typed`] decodes record values framed with a schema id
//! into Arrow batches typed from that schema, for typed Iceberg tables.
//!
//! # Layout
//! - [`registry`]: `Registry`, the subjects, versions and schemas, its planners and `apply`.
//! - [`compatibility`]: compatibility levels, modes, and the `SchemaFormat` trait.
//! - [`avro`]: `AvroFormat`, Avro's parsing and resolution rules.
//! - [`json_schema`]: `JsonSchemaFormat`, JSON Schema's keywords, `$ref`s and Confluent's compatibility rules.
//! - [`protobuf`]: `ProtobufFormat`, .proto files compiled by protox, and Confluent's Protobuf rules.
//! - [`records`]: the `_schemas` key and value layouts.
//! - [`store`]: `SchemaStore`, the registry as a fold of the `_schemas` topic; `ClusterSide`, what it needs of a cluster.
//! - [`rest`]: the REST API: method + path → `Route`, a route and its body → `Reply` (status + JSON).
//! - [`validation`]: Confluent Server's broker-side schema validation of produced records.
//! - [`typed`]: `TypedDecoder`, wire-format record values to Arrow batches typed from their schemas.
//! - [`error`]: `RegistryError`, with Confluent's error codes and HTTP statuses.

#![warn(missing_docs, missing_debug_implementations)]

pub mod avro;
pub mod compatibility;
pub mod error;
pub mod json_schema;
pub mod protobuf;
pub mod records;
pub mod registry;
pub mod rest;
pub mod store;
pub mod typed;
pub mod validation;

pub use avro::AvroFormat;
pub use compatibility::{CompatibilityLevel, Mode, ParsedSchema, SchemaFormat, SchemaType};
pub use error::RegistryError;
pub use json_schema::JsonSchemaFormat;
pub use protobuf::ProtobufFormat;
pub use records::{Record, SchemaReference};
pub use registry::{Planned, RegisteredSchema, Registry, SchemaVersion, VersionSpec};
pub use store::{ClusterSide, SchemaStore, SCHEMAS_TOPIC};
pub use typed::{DecodeError, Decoded, TypedDecoder};
