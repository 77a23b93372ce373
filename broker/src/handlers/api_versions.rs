//! ApiVersions: which APIs and versions this broker serves.
//!
//! The list comes from [`floe_protocol::apis::SUPPORTED_APIS`], so what is
//! advertised is exactly what [`super::dispatch`] accepts.

use floe_protocol::apis::SUPPORTED_APIS;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

use crate::broker::Broker;

pub(super) fn handle(
    _broker: &Broker,
    request: ApiVersionsRequest,
    version: i16,
) -> ApiVersionsResponse {
    if version >= 3 {
        tracing::debug!(
            client = %request.client_software_name.as_str(),
            client_version = %request.client_software_version.as_str(),
            "ApiVersions"
        );
    }
    ApiVersionsResponse::default().with_api_keys(api_keys())
}

/// The KIP-511 reply to a version we do not serve: a v0 body with
/// UNSUPPORTED_VERSION and our ranges, so the client retries with one of them.
pub(super) fn unsupported_version() -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(api_keys())
}

fn api_keys() -> Vec<ApiVersion> {
    SUPPORTED_APIS
        .iter()
        .map(|r| {
            ApiVersion::default()
                .with_api_key(r.key as i16)
                .with_min_version(r.min)
                .with_max_version(r.max)
        })
        .collect()
}
