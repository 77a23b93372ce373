//! The read-only Iceberg REST catalog: engines attach to Floe's tiered tables
//! by URL (`RestCatalog(uri=…)` in pyiceberg, `ATTACH … (TYPE iceberg,
//! ENDPOINT …)` in DuckDB) instead of opening the SQLite catalog file. This is
//! the catalog's side of it, free of any HTTP server: the broker's server
//! hands each request's method, path and query to [`route`], the route to
//! [`RestCatalog::answer`], and writes the [`Reply`] back.
//!
//! # Layout
//! - [`routes`]: method + path → [`Route`] (pure parsing, unit-tested).
//! - [`service`]: a route → status + JSON body, reading the catalog.
//! - `wire`: the JSON bodies of the spec.

pub mod routes;
pub mod service;
mod wire;

pub use routes::{route, Route, ENDPOINTS};
pub use service::{Reply, RestCatalog};
