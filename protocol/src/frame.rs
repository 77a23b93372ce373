//! Frames and request headers.
//!
//! Every Kafka request and response is a frame: a 4-byte big-endian size
//! followed by that many bytes. A request frame starts with a header:
//!
//! ```text
//! request_api_key      i16
//! request_api_version  i16
//! correlation_id       i32
//! client_id            nullable string (i16 length, -1 = null)   header v1+
//! tagged fields        unsigned varint count, …                  header v2 (flexible versions)
//! ```
//!
//! A partial frame is not an error: [`parse_frame`] returns `Ok(None)` and
//! the caller reads more bytes.

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::Decodable;

use crate::ProtocolError;

/// Size of the length prefix of every frame.
pub const SIZE_PREFIX_LEN: usize = 4;

/// Smallest step by which a partial frame's buffer grows.
const RESERVE_STEP: usize = 64 * 1024;

/// Takes one complete frame (without its size prefix) off the front of `buf`.
///
/// Returns `Ok(None)` when `buf` does not yet hold a whole frame; reserves
/// room for more of it, at most about as much as has arrived (at least 64 KiB),
/// so memory follows the bytes received rather than the size announced.
///
/// # Errors
/// [`ProtocolError::FrameTooLarge`] when the announced size is negative or
/// above `max_size` (`socket.request.max.bytes`): the caller closes the
/// connection, as Kafka does, since the stream cannot be resynchronised.
pub fn parse_frame(buf: &mut BytesMut, max_size: usize) -> Result<Option<Bytes>, ProtocolError> {
    if buf.len() < SIZE_PREFIX_LEN {
        return Ok(None);
    }
    let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if size < 0 || size as usize > max_size {
        return Err(ProtocolError::FrameTooLarge { size: size as i64, limit: max_size });
    }
    let total = SIZE_PREFIX_LEN + size as usize;
    if buf.len() < total {
        // Grow with the bytes that arrived, not the size announced: a client
        // announcing 100 MiB and sending 4 bytes must not cost 100 MiB.
        // Doubling keeps a large frame's reads amortised.
        let missing = total - buf.len();
        buf.reserve(missing.min(buf.len().max(RESERVE_STEP)));
        return Ok(None);
    }
    buf.advance(SIZE_PREFIX_LEN);
    Ok(Some(buf.split_to(size as usize).freeze()))
}

/// The header of a request whose API key is known, and its body bytes.
#[derive(Debug)]
pub struct RequestFrame {
    /// The API the request is for.
    pub api_key: ApiKey,
    /// The decoded header.
    pub header: RequestHeader,
    /// Everything after the header.
    pub body: Bytes,
}

/// Why a frame's header could not be turned into a [`RequestFrame`].
#[derive(Debug)]
pub enum HeaderError {
    /// The API key is not one Kafka defines: the connection is closed.
    UnknownApiKey {
        /// The key as sent.
        api_key: i16,
        /// The correlation id, for the log line.
        correlation_id: i32,
    },
    /// Too short or otherwise undecodable.
    Malformed(ProtocolError),
}

/// Decodes the request header at the front of `frame`.
///
/// The header version follows from the API key and version. For a version
/// the crate does not know (a newer client), the header version of the
/// highest known version is assumed, which is what KIP-511 relies on for
/// ApiVersions: the body is not decoded then, only answered.
///
/// # Errors
/// See [`HeaderError`].
pub fn parse_request_header(mut frame: Bytes) -> Result<RequestFrame, HeaderError> {
    if frame.len() < 8 {
        return Err(HeaderError::Malformed(ProtocolError::MalformedHeader(format!(
            "{} bytes is too short for a request header",
            frame.len()
        ))));
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api_key = ApiKey::try_from(raw_key)
        .map_err(|()| HeaderError::UnknownApiKey { api_key: raw_key, correlation_id })?;
    let valid = api_key.valid_versions();
    let known_version = version.clamp(valid.min, valid.max);
    let header_version = api_key.request_header_version(known_version);
    let header = RequestHeader::decode(&mut frame, header_version)
        .map_err(|e| HeaderError::Malformed(ProtocolError::MalformedHeader(e.to_string())))?;
    Ok(RequestFrame { api_key, header, body: frame })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn frame_of(payload: &[u8]) -> BytesMut {
        let mut b = BytesMut::new();
        b.put_i32(payload.len() as i32);
        b.put_slice(payload);
        b
    }

    #[test]
    fn partial_frames_wait_for_more_bytes() {
        let whole = frame_of(b"hello world");
        for cut in 0..whole.len() {
            let mut part = BytesMut::from(&whole[..cut]);
            assert!(parse_frame(&mut part, 1024).unwrap().is_none(), "cut at {cut}");
        }
        let mut two = frame_of(b"one");
        two.extend_from_slice(&frame_of(b"two"));
        assert_eq!(&parse_frame(&mut two, 1024).unwrap().unwrap()[..], b"one");
        assert_eq!(&parse_frame(&mut two, 1024).unwrap().unwrap()[..], b"two");
        assert!(two.is_empty());
    }

    #[test]
    fn oversized_and_negative_frames_are_refused() {
        let mut big = frame_of(&[0u8; 100]);
        assert!(matches!(
            parse_frame(&mut big, 99),
            Err(ProtocolError::FrameTooLarge { size: 100, .. })
        ));
        let mut neg = BytesMut::from(&(-5i32).to_be_bytes()[..]);
        assert!(parse_frame(&mut neg, 99).is_err());
    }

    #[test]
    fn headers_decode_for_flexible_and_classic_versions() {
        for (key, version) in
            [(ApiKey::Metadata, 1), (ApiKey::Metadata, 12), (ApiKey::ApiVersions, 3)]
        {
            let header = RequestHeader::default()
                .with_request_api_key(key as i16)
                .with_request_api_version(version)
                .with_correlation_id(77)
                .with_client_id(Some(StrBytes::from_static_str("test")));
            let mut buf = BytesMut::new();
            header.encode(&mut buf, key.request_header_version(version)).unwrap();
            buf.put_slice(b"body");
            let parsed = parse_request_header(buf.freeze()).unwrap();
            assert_eq!(parsed.api_key, key);
            assert_eq!(parsed.header.correlation_id, 77);
            assert_eq!(parsed.header.client_id.as_deref(), Some("test"));
            assert_eq!(&parsed.body[..], b"body");
        }
    }

    #[test]
    fn unknown_keys_and_short_headers_are_errors() {
        let mut raw = BytesMut::new();
        raw.put_i16(9999);
        raw.put_i16(0);
        raw.put_i32(5);
        raw.put_i16(-1);
        assert!(matches!(
            parse_request_header(raw.freeze()),
            Err(HeaderError::UnknownApiKey { api_key: 9999, correlation_id: 5 })
        ));
        assert!(matches!(
            parse_request_header(Bytes::from_static(&[0, 3, 0])),
            Err(HeaderError::Malformed(_))
        ));
    }
}
