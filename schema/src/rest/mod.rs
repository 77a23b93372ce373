//! The Confluent Schema Registry's REST API over a [`SchemaStore`](crate::SchemaStore),
//! free of any HTTP server: the broker's server (`floe_broker::schema_registry`)
//! hands each request's method, path and query to [`route`], authorizes the
//! [`Route`], passes it and the body to [`answer`], and writes the [`Reply`] back.
//!
//! # Layout
//! - [`routes`]: method + path → [`Route`] (pure parsing, unit-tested).
//! - [`service`]: a route and its body → status + JSON, in Confluent's shapes.

pub mod routes;
pub mod service;

pub use routes::{route, Route};
pub use service::{answer, Reply, CONTENT_TYPE};
