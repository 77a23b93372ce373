//! The Confluent wire format's framing of a record value:
//!
//! ```text
//! byte 0      magic byte, 0
//! bytes 1..5  schema id, i32 big-endian
//! Protobuf only: the message indexes, zigzag varints: a count, then that many
//!             indexes (the path from a top-level message of the file to the
//!             nested one); a count of 0 alone means [0], the first message
//! then        the payload in the schema's format
//! ```

/// The magic byte every framed value starts with.
pub const MAGIC_BYTE: u8 = 0;

/// The schema id and the bytes after it (for Protobuf, the message indexes come first).
///
/// # Errors
/// No magic byte, or fewer than 5 bytes.
pub fn split_header(value: &[u8]) -> Result<(i32, &[u8]), String> {
    match value {
        [MAGIC_BYTE, a, b, c, d, rest @ ..] => Ok((i32::from_be_bytes([*a, *b, *c, *d]), rest)),
        [MAGIC_BYTE, ..] => {
            Err(format!("{} bytes: too short for the wire format's 5-byte header", value.len()))
        }
        [first, ..] => Err(format!("magic byte {first}, not 0: not in the Confluent wire format")),
        [] => Err("empty value: not in the Confluent wire format".to_string()),
    }
}

/// Indexes longer than this are refused (no schema nests messages this deep).
const MAX_MESSAGE_INDEXES: i64 = 64;

/// Protobuf's message indexes and the payload after them.
///
/// # Errors
/// A truncated or negative varint, or more indexes than any schema nests.
pub fn split_message_indexes(bytes: &[u8]) -> Result<(Vec<i32>, &[u8]), String> {
    let mut rest = bytes;
    let count = read_zigzag(&mut rest)?;
    if count == 0 {
        return Ok((vec![0], rest));
    }
    if !(1..=MAX_MESSAGE_INDEXES).contains(&count) {
        return Err(format!("message index count {count} out of range"));
    }
    let mut indexes = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for _ in 0..count {
        let index = read_zigzag(&mut rest)?;
        indexes.push(
            i32::try_from(index)
                .ok()
                .filter(|i| *i >= 0)
                .ok_or_else(|| format!("message index {index} out of range"))?,
        );
    }
    Ok((indexes, rest))
}

/// One zigzag-encoded varint (as Avro's int and long, and Confluent's indexes).
pub(crate) fn read_zigzag(bytes: &mut &[u8]) -> Result<i64, String> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let Some((&byte, rest)) = bytes.split_first() else {
            return Err("truncated varint".to_string());
        };
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
        }
    }
    Err("varint longer than 10 bytes".to_string())
}

/// The wire-format header for `id` (and, for Protobuf, the message indexes): what
/// Confluent's serializers put before a payload. For tests and tools.
pub fn header(id: i32, message_indexes: Option<&[i32]>) -> Vec<u8> {
    let mut out = vec![MAGIC_BYTE];
    out.extend_from_slice(&id.to_be_bytes());
    match message_indexes {
        None => {}
        Some([0]) => out.push(0),
        Some(indexes) => {
            write_zigzag(&mut out, indexes.len() as i64);
            indexes.iter().for_each(|i| write_zigzag(&mut out, i64::from(*i)));
        }
    }
    out
}

fn write_zigzag(out: &mut Vec<u8>, n: i64) {
    let mut v = ((n << 1) ^ (n >> 63)) as u64;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_refuses_other_framings() {
        let mut value = header(258, None);
        value.push(9);
        assert_eq!(split_header(&value), Ok((258, &[9u8][..])));
        assert!(split_header(&[1, 0, 0, 0, 1]).is_err(), "magic byte");
        assert!(split_header(&[0, 0, 0]).is_err(), "short");
        assert!(split_header(&[]).is_err(), "empty");
    }

    #[test]
    fn message_indexes_round_trip_with_the_short_form_for_the_first_message() {
        assert_eq!(header(1, Some(&[0])).len(), 6, "[0] is the single byte 0");
        for indexes in [vec![0], vec![2], vec![1, 0, 3]] {
            let mut value = header(1, Some(&indexes));
            value.push(42);
            let (_, rest) = split_header(&value).expect("header");
            assert_eq!(split_message_indexes(rest), Ok((indexes, &[42u8][..])));
        }
        assert!(split_message_indexes(&[0x80]).is_err(), "truncated");
        assert!(split_message_indexes(&[2]).is_err(), "count 1 without its index");
        assert!(split_message_indexes(&[1]).is_err(), "negative count");
    }
}
