//! Avro values as the JSON people read: what `floe topic consume
//! --schema-registry` prints and the console's message browser shows (both
//! go through [`super::consume::SchemaDecoder`], which calls [`to_json`]).
//!
//! apache-avro's own conversion to JSON prints logical types by their
//! encoding: a decimal as an array of bytes, a timestamp as a number. Here
//! each prints as its value, with the schema at hand for a decimal's scale:
//!
//! | Avro type | JSON |
//! | --- | --- |
//! | `decimal` (bytes or fixed), `big-decimal` | `"12.34"` (a string: exact, any precision) |
//! | `timestamp-millis` / `-micros` / `-nanos` | `"2024-05-01T12:00:00.123Z"` (UTC, ISO-8601, the unit's digits) |
//! | `local-timestamp-millis` / `-micros` / `-nanos` | `"2024-05-01T12:00:00.123"` (no zone) |
//! | `date` | `"2024-05-01"` |
//! | `time-millis` / `time-micros` | `"12:00:00.123"` / `"12:00:00.123456"` |
//! | `uuid` | `"550e8400-e29b-41d4-a716-446655440000"` |
//! | `duration` | `{"months": 1, "days": 2, "millis": 3}` |
//! | `float`/`double` NaN or infinite | `"NaN"`, `"Infinity"`, `"-Infinity"` |
//!
//! Other types print as apache-avro prints them (a `long` as an exact JSON
//! integer, `bytes` and `fixed` as arrays of byte values, a union as its
//! branch's value). A value beyond what the calendar formatting takes (a
//! timestamp past the year 9999, a time past midnight) prints as its number.

use std::collections::HashMap;

use apache_avro::schema::{Name, ResolvedSchema, Schema};
use apache_avro::types::Value as Avro;
use serde_json::{json, Map, Value};

/// A decoded Avro datum as JSON, logical types as their values.
///
/// # Errors
/// A schema whose named references do not resolve.
pub fn to_json(value: Avro, schema: &Schema) -> Result<Value, String> {
    let resolved = ResolvedSchema::try_from(schema).map_err(|e| e.to_string())?;
    let names: HashMap<Name, &Schema> =
        resolved.get_names().iter().map(|(n, s)| (n.clone(), *s)).collect();
    Ok(convert(value, Some(schema), &names))
}

/// `value` as JSON; `schema` is its schema when known (only a decimal needs it).
fn convert(value: Avro, schema: Option<&Schema>, names: &HashMap<Name, &Schema>) -> Value {
    let schema = match schema {
        Some(Schema::Ref { name }) => names.get(name).copied(),
        other => other,
    };
    match value {
        Avro::Null => Value::Null,
        Avro::Boolean(b) => Value::Bool(b),
        Avro::Int(i) => json!(i),
        Avro::Long(l) => json!(l),
        Avro::Float(f) => float(f64::from(f)),
        Avro::Double(d) => float(d),
        Avro::Bytes(b) | Avro::Fixed(_, b) => {
            Value::Array(b.into_iter().map(|x| json!(x)).collect())
        }
        Avro::String(s) | Avro::Enum(_, s) => Value::String(s),
        Avro::Union(i, inner) => {
            let branch = match schema {
                Some(Schema::Union(u)) => usize::try_from(i).ok().and_then(|i| u.variants().get(i)),
                _ => None,
            };
            convert(*inner, branch, names)
        }
        Avro::Array(items) => {
            let item = match schema {
                Some(Schema::Array(a)) => Some(&*a.items),
                _ => None,
            };
            Value::Array(items.into_iter().map(|v| convert(v, item, names)).collect())
        }
        Avro::Map(entries) => {
            let of = match schema {
                Some(Schema::Map(m)) => Some(&*m.types),
                _ => None,
            };
            let mut sorted: Vec<(String, Avro)> = entries.into_iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(sorted.into_iter().map(|(k, v)| (k, convert(v, of, names))).collect())
        }
        Avro::Record(fields) => {
            let record = match schema {
                Some(Schema::Record(r)) => Some(r),
                _ => None,
            };
            let mut out = Map::new();
            for (name, v) in fields {
                let field = record
                    .and_then(|r| r.lookup.get(&name).and_then(|&i| r.fields.get(i)))
                    .map(|f| &f.schema);
                out.insert(name, convert(v, field, names));
            }
            Value::Object(out)
        }
        Avro::Decimal(d) => {
            let scale = match schema {
                Some(Schema::Decimal(s)) => s.scale,
                _ => 0,
            };
            match <Vec<u8>>::try_from(&d) {
                Ok(bytes) => Value::String(decimal_text(&bytes, scale)),
                Err(e) => Value::String(format!("(decimal: {e})")),
            }
        }
        Avro::BigDecimal(d) => Value::String(d.to_string()),
        Avro::Date(days) => Value::String(date_text(i64::from(days))),
        Avro::TimeMillis(ms) => time_text(i64::from(ms), 1_000, 3).map_or(json!(ms), Value::String),
        Avro::TimeMicros(us) => time_text(us, 1_000_000, 6).map_or(json!(us), Value::String),
        Avro::TimestampMillis(t) => {
            timestamp_text(t, 1_000, 3, "Z").map_or(json!(t), Value::String)
        }
        Avro::TimestampMicros(t) => {
            timestamp_text(t, 1_000_000, 6, "Z").map_or(json!(t), Value::String)
        }
        Avro::TimestampNanos(t) => {
            timestamp_text(t, 1_000_000_000, 9, "Z").map_or(json!(t), Value::String)
        }
        Avro::LocalTimestampMillis(t) => {
            timestamp_text(t, 1_000, 3, "").map_or(json!(t), Value::String)
        }
        Avro::LocalTimestampMicros(t) => {
            timestamp_text(t, 1_000_000, 6, "").map_or(json!(t), Value::String)
        }
        Avro::LocalTimestampNanos(t) => {
            timestamp_text(t, 1_000_000_000, 9, "").map_or(json!(t), Value::String)
        }
        Avro::Duration(d) => {
            json!({"months": u32::from(d.months()), "days": u32::from(d.days()), "millis": u32::from(d.millis())})
        }
        Avro::Uuid(u) => Value::String(u.as_hyphenated().to_string()),
    }
}

/// A finite float as a JSON number; NaN and the infinities as strings (JSON has no such numbers).
fn float(f: f64) -> Value {
    match serde_json::Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None if f.is_nan() => json!("NaN"),
        None if f > 0.0 => json!("Infinity"),
        None => json!("-Infinity"),
    }
}

/// A decimal's unscaled value (big-endian two's complement, any length) with
/// `scale` digits after the point: `[0x04, 0xD2]`, 2 → `"12.34"`.
pub fn decimal_text(bytes: &[u8], scale: usize) -> String {
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    // The magnitude: two's complement negated for a negative value.
    let mut magnitude: Vec<u8> =
        if negative { bytes.iter().map(|b| !b).collect() } else { bytes.to_vec() };
    if negative {
        for b in magnitude.iter_mut().rev() {
            let (sum, carry) = b.overflowing_add(1);
            *b = sum;
            if !carry {
                break;
            }
        }
    }
    // Base 256 to base 10, by repeated division.
    let mut digits = Vec::new();
    let mut rest: Vec<u8> = magnitude.into_iter().skip_while(|b| *b == 0).collect();
    while !rest.is_empty() {
        let mut remainder = 0u32;
        let mut quotient = Vec::with_capacity(rest.len());
        for b in &rest {
            let acc = (remainder << 8) | u32::from(*b);
            let q = acc / 10;
            remainder = acc % 10;
            if !(quotient.is_empty() && q == 0) {
                quotient.push(u8::try_from(q).unwrap_or(0));
            }
        }
        digits.push(char::from(b'0' + u8::try_from(remainder).unwrap_or(0)));
        rest = quotient;
    }
    while digits.len() <= scale {
        digits.push('0');
    }
    digits.reverse();
    let point = digits.len() - scale;
    let (whole, fraction): (String, String) =
        (digits[..point].iter().collect(), digits[point..].iter().collect());
    let sign = if negative { "-" } else { "" };
    if scale == 0 {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    }
}

/// The civil date of a day count since 1970-01-01 (proleptic Gregorian;
/// Howard Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, u32::try_from(month).unwrap_or(1), u32::try_from(day).unwrap_or(1))
}

/// `YYYY-MM-DD` of an Avro `date` (days since the epoch).
fn date_text(days: i64) -> String {
    let (y, m, d) = civil(days);
    if (0..=9999).contains(&y) {
        format!("{y:04}-{m:02}-{d:02}")
    } else {
        format!("{y:+05}-{m:02}-{d:02}")
    }
}

/// `HH:MM:SS.fff…` of `units` since midnight (`per_second` a second), or
/// `None` if not within a day.
fn time_text(units: i64, per_second: i64, digits: usize) -> Option<String> {
    if !(0..86_400 * per_second).contains(&units) {
        return None;
    }
    let (seconds, fraction) = (units / per_second, units % per_second);
    Some(format!(
        "{:02}:{:02}:{:02}.{fraction:0digits$}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    ))
}

/// `YYYY-MM-DDTHH:MM:SS.fff…` and `zone` of `units` since the epoch, for
/// the years 0000 to 9999; else `None`.
fn timestamp_text(units: i64, per_second: i64, digits: usize, zone: &str) -> Option<String> {
    let seconds = units.div_euclid(per_second);
    let fraction = units.rem_euclid(per_second);
    let (days, second_of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (y, m, d) = civil(days);
    if !(0..=9999).contains(&y) {
        return None;
    }
    let (hh, mm, ss) = (second_of_day / 3600, second_of_day / 60 % 60, second_of_day % 60);
    Some(format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{fraction:0digits$}{zone}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(schema: &str, value: Avro) -> Value {
        let schema = Schema::parse_str(schema).expect("schema parses");
        // Through the bytes, as the decoder gets them.
        let bytes = apache_avro::to_avro_datum(&schema, value).expect("encodes");
        let back = apache_avro::from_avro_datum(&schema, &mut &bytes[..], None).expect("decodes");
        to_json(back, &schema).expect("converts")
    }

    #[test]
    fn decimals_print_with_their_scale() {
        assert_eq!(decimal_text(&[0x04, 0xD2], 2), "12.34");
        assert_eq!(decimal_text(&[0xFB, 0x2E], 2), "-12.34");
        assert_eq!(decimal_text(&[0x05], 3), "0.005");
        assert_eq!(decimal_text(&[0xFF], 1), "-0.1");
        assert_eq!(decimal_text(&[], 2), "0.00");
        assert_eq!(decimal_text(&[0x00, 0x00], 0), "0");
        assert_eq!(decimal_text(&[0x80], 0), "-128");
        // Beyond i128: 2^128 = 340282366920938463463374607431768211456.
        let mut big = vec![0x01];
        big.extend([0u8; 16]);
        assert_eq!(decimal_text(&big, 10), "34028236692093846346337460743.1768211456");
        let bytes_schema =
            r#"{"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}"#;
        assert_eq!(decode(bytes_schema, Avro::Decimal(vec![0x04u8, 0xD2].into())), json!("12.34"));
        let fixed_schema = r#"{"type": "fixed", "name": "money", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 4}"#;
        assert_eq!(
            decode(
                fixed_schema,
                Avro::Decimal(vec![0xFFu8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE].into())
            ),
            json!("-0.0002")
        );
    }

    #[test]
    fn times_and_dates_print_as_calendar_text() {
        assert_eq!(date_text(0), "1970-01-01");
        assert_eq!(date_text(19_844), "2024-05-01");
        assert_eq!(date_text(-1), "1969-12-31");
        assert_eq!(date_text(11_016), "2000-02-29");
        assert_eq!(
            timestamp_text(1_714_564_800_123, 1_000, 3, "Z").as_deref(),
            Some("2024-05-01T12:00:00.123Z")
        );
        assert_eq!(timestamp_text(-1, 1_000, 3, "Z").as_deref(), Some("1969-12-31T23:59:59.999Z"));
        assert_eq!(
            timestamp_text(1_714_564_800_000_001, 1_000_000, 6, "").as_deref(),
            Some("2024-05-01T12:00:00.000001")
        );
        assert_eq!(timestamp_text(i64::MAX, 1_000, 3, "Z"), None);
        assert_eq!(time_text(45_296_789, 1_000, 3).as_deref(), Some("12:34:56.789"));
        assert_eq!(time_text(1, 1_000_000, 6).as_deref(), Some("00:00:00.000001"));
        assert_eq!(time_text(86_400_000, 1_000, 3), None);
    }

    #[test]
    fn a_record_prints_each_logical_type_as_its_value() {
        let schema = r#"{"type": "record", "name": "Payment", "fields": [
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
            {"name": "fee", "type": ["null", {"type": "fixed", "name": "Fee", "size": 4, "logicalType": "decimal", "precision": 6, "scale": 3}]},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "clock", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "clock_us", "type": {"type": "long", "logicalType": "time-micros"}},
            {"name": "fees", "type": {"type": "array", "items": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 3}}},
            {"name": "count", "type": "long"},
            {"name": "ratio", "type": "double"}
        ]}"#;
        let value = Avro::Record(vec![
            (
                "id".into(),
                Avro::Uuid("550e8400-e29b-41d4-a716-446655440000".parse().expect("uuid")),
            ),
            ("amount".into(), Avro::Decimal(vec![0x04u8, 0xD2].into())),
            (
                "fee".into(),
                Avro::Union(1, Box::new(Avro::Decimal(vec![0u8, 0, 0x01, 0xF4].into()))),
            ),
            ("at".into(), Avro::TimestampMillis(1_714_564_800_123)),
            ("at_us".into(), Avro::TimestampMicros(1_714_564_800_123_456)),
            ("local".into(), Avro::LocalTimestampMillis(0)),
            ("day".into(), Avro::Date(19_844)),
            ("clock".into(), Avro::TimeMillis(45_296_789)),
            ("clock_us".into(), Avro::TimeMicros(45_296_789_012)),
            ("fees".into(), Avro::Array(vec![Avro::Decimal(vec![0x07u8].into())])),
            ("count".into(), Avro::Long(2_780_273_657_115_940_031)),
            ("ratio".into(), Avro::Double(f64::NAN)),
        ]);
        let doc = decode(schema, value);
        assert_eq!(
            doc,
            json!({
                "id": "550e8400-e29b-41d4-a716-446655440000",
                "amount": "12.34",
                "fee": "0.500",
                "at": "2024-05-01T12:00:00.123Z",
                "at_us": "2024-05-01T12:00:00.123456Z",
                "local": "1970-01-01T00:00:00.000",
                "day": "2024-05-01",
                "clock": "12:34:56.789",
                "clock_us": "12:34:56.789012",
                "fees": ["0.007"],
                "count": 2_780_273_657_115_940_031_i64,
                "ratio": "NaN",
            })
        );
        // A long prints exactly (serde_json keeps i64; nothing goes through f64).
        assert!(doc.to_string().contains("2780273657115940031"));
    }
}
