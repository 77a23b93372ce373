//! Response framing for every API but Fetch: size prefix, response header of
//! the version the API and version call for, body encoded by `kafka-protocol`.
//!
//! # Wire layout
//! ```text
//! size              i32       bytes that follow (header + body), big-endian
//! response header
//!   correlation_id  i32       the request's correlation id
//!   tagged fields   uvarint 0 header v1 only (flexible versions of the API;
//!                             never for ApiVersions, whose responses always
//!                             use header v0 so any client can read them)
//! body              the API's response at the request's version
//! ```
//!
//! Fetch responses, whose records are sent from segment files, are written by
//! [`crate::fetch`] instead.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};

/// `Some(text)` as the nullable error message of Kafka's responses (`error_message`).
pub fn message(text: impl Into<String>) -> Option<StrBytes> {
    Some(StrBytes::from_string(text.into()))
}

use crate::error::ProtocolError;

/// Encodes `body` as the response of version `version` of `api_key` to the
/// request with `correlation_id`: size prefix, response header
/// (`api_key.response_header_version(version)`), body, in one buffer sized
/// exactly up front.
///
/// # Errors
/// [`ProtocolError::Encode`] if the body cannot be encoded at `version`
/// (unsupported version, a field set that the version lacks, a value too
/// large for its field), or the response exceeds `i32::MAX` bytes.
pub fn encode_response<R: Encodable + HeaderVersion>(
    correlation_id: i32,
    version: i16,
    api_key: ApiKey,
    body: &R,
) -> Result<Bytes, ProtocolError> {
    let err = |reason: String| ProtocolError::Encode { api: api_name::<R>(), version, reason };
    let header_version = api_key.response_header_version(version);
    debug_assert_eq!(
        header_version,
        R::header_version(version),
        "{api_key:?} does not match the body type {}",
        std::any::type_name::<R>()
    );
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let size = header
        .compute_size(header_version)
        .and_then(|h| Ok(h + body.compute_size(version)?))
        .map_err(|e| err(e.to_string()))?;
    let prefix = i32::try_from(size)
        .map_err(|_| err(format!("response of {size} bytes exceeds i32::MAX")))?;

    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(prefix);
    header
        .encode(&mut buf, header_version)
        .and_then(|()| body.encode(&mut buf, version))
        .map_err(|e| err(e.to_string()))?;
    if buf.len() != 4 + size {
        return Err(err(format!("encoded {} bytes, computed {}", buf.len() - 4, size)));
    }
    Ok(buf.freeze())
}

/// The body type's name without its module path, e.g. `MetadataResponse`.
fn api_name<R>() -> &'static str {
    let full: &'static str = std::any::type_name::<R>();
    full.rsplit("::").next().unwrap_or(full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;
    use kafka_protocol::messages::{ApiVersionsResponse, MetadataResponse, ProduceResponse};
    use kafka_protocol::protocol::{Decodable, StrBytes};

    fn crate_encoding<R: Encodable>(
        correlation_id: i32,
        header_version: i16,
        version: i16,
        body: &R,
    ) -> Vec<u8> {
        let mut inner = Vec::new();
        ResponseHeader::default()
            .with_correlation_id(correlation_id)
            .encode(&mut inner, header_version)
            .unwrap();
        body.encode(&mut inner, version).unwrap();
        let mut out = (inner.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(&inner);
        out
    }

    #[test]
    fn api_versions_always_uses_header_v0() {
        let body = ApiVersionsResponse::default().with_error_code(35);
        for version in 0..=4 {
            let got = encode_response(7, version, ApiKey::ApiVersions, &body).unwrap();
            assert_eq!(&got[..], &crate_encoding(7, 0, version, &body)[..], "v{version}");
            let mut rest = got.slice(4..);
            assert_eq!(rest.get_i32(), 7);
            let decoded = ApiVersionsResponse::decode(&mut rest, version).unwrap();
            assert_eq!(decoded.error_code, 35);
        }
    }

    #[test]
    fn flexible_versions_use_header_v1() {
        let body =
            MetadataResponse::default().with_cluster_id(Some(StrBytes::from_static_str("c")));
        for (version, header_version) in [(1, 0), (8, 0), (9, 1), (12, 1)] {
            let got = encode_response(-3, version, ApiKey::Metadata, &body).unwrap();
            assert_eq!(
                &got[..],
                &crate_encoding(-3, header_version, version, &body)[..],
                "v{version}"
            );
            let mut rest = got.slice(4..);
            let header = ResponseHeader::decode(&mut rest, header_version).unwrap();
            assert_eq!(header.correlation_id, -3);
            MetadataResponse::decode(&mut rest, version).unwrap();
            assert!(rest.is_empty());
        }
    }

    #[test]
    fn encode_failure_is_an_error_naming_the_api() {
        // ProduceResponse has no v0 in kafka-protocol 0.18.
        let body = ProduceResponse::default();
        match encode_response(1, 0, ApiKey::Produce, &body) {
            Err(ProtocolError::Encode { api, version, .. }) => {
                assert_eq!(api, "ProduceResponse");
                assert_eq!(version, 0);
            }
            other => panic!("expected an encode error, got {other:?}"),
        }
        // A field the version lacks.
        let body = MetadataResponse::default().with_cluster_authorized_operations(0);
        assert!(matches!(
            encode_response(1, 12, ApiKey::Metadata, &body),
            Err(ProtocolError::Encode { .. })
        ));
    }
}
