//! The subject of an X.509 certificate as an RFC 2253 string, the form
//! Kafka's default principal builder gives an SSL client (`User:CN=alice,O=Example`).
//!
//! Only the DER needed to reach the subject is read: Certificate →
//! TBSCertificate → (optional `[0]` version, serial, signature algorithm,
//! issuer, validity) → subject, a SEQUENCE of RDNs (SETs of
//! type-and-value SEQUENCEs). As Java's `X500Principal.getName()`, RDNs are
//! printed last first, multi-valued RDNs joined with `+`, well-known
//! attribute types by name, others as `OID=#hex` of the value's DER. The
//! certificate has already been verified by rustls; a subject this reader
//! cannot parse yields `None` (the client is then `User:ANONYMOUS`).

/// One DER element: tag, contents, and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;

/// The subject DN of a DER certificate, RFC 2253.
pub fn subject_dn(cert_der: &[u8]) -> Option<String> {
    let (tag, cert, _) = element(cert_der)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs, _) = element(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut rest = tbs;
    // The optional explicit version, [0].
    if rest.first() == Some(&0xa0) {
        rest = element(rest)?.2;
    }
    // serialNumber, signature, issuer, validity.
    for _ in 0..4 {
        rest = element(rest)?.2;
    }
    let (tag, subject, _) = element(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut rdns = Vec::new();
    let mut names = subject;
    while !names.is_empty() {
        let (tag, set, next) = element(names)?;
        if tag != SET {
            return None;
        }
        let mut parts = Vec::new();
        let mut atvs = set;
        while !atvs.is_empty() {
            let (tag, atv, after) = element(atvs)?;
            if tag != SEQUENCE {
                return None;
            }
            let (tag, oid, value_der) = element(atv)?;
            if tag != OID {
                return None;
            }
            let (value_tag, value, _) = element(value_der)?;
            parts.push(attribute(oid, value_tag, value, value_der));
            atvs = after;
        }
        rdns.push(parts.join("+"));
        names = next;
    }
    rdns.reverse();
    Some(rdns.join(","))
}

fn attribute(oid: &[u8], value_tag: u8, value: &[u8], value_der: &[u8]) -> String {
    // 2.5.4.x (id-at), DC and UID: the names RFC 2253 and Java print.
    let name = match oid {
        [0x55, 0x04, 0x03] => Some("CN"),
        [0x55, 0x04, 0x06] => Some("C"),
        [0x55, 0x04, 0x07] => Some("L"),
        [0x55, 0x04, 0x08] => Some("ST"),
        [0x55, 0x04, 0x09] => Some("STREET"),
        [0x55, 0x04, 0x0a] => Some("O"),
        [0x55, 0x04, 0x0b] => Some("OU"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => Some("DC"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => Some("UID"),
        _ => None,
    };
    // UTF8String, PrintableString, IA5String, TeletexString (read as Latin-1 would be
    // wrong for T.61, but real certificates use it for ASCII).
    let text = matches!(value_tag, 0x0c | 0x13 | 0x16 | 0x14)
        .then(|| String::from_utf8_lossy(value).into_owned());
    match (name, text) {
        (Some(n), Some(t)) => format!("{n}={}", escape(&t)),
        (n, _) => {
            let hex: String = value_der.iter().map(|b| format!("{b:02x}")).collect();
            format!("{}=#{hex}", n.map(str::to_string).unwrap_or_else(|| dotted(oid)))
        }
    }
}

/// RFC 2253 §2.4 escaping.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn dotted(oid: &[u8]) -> String {
    let mut arcs: Vec<u64> = Vec::new();
    let mut acc = 0u64;
    for (i, b) in oid.iter().enumerate() {
        acc = (acc << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if arcs.is_empty() && i < oid.len() {
                arcs.push((acc / 40).min(2));
                arcs.push(acc - 40 * (acc / 40).min(2));
            } else {
                arcs.push(acc);
            }
            acc = 0;
        }
    }
    arcs.iter().map(u64::to_string).collect::<Vec<_>>().join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        if content.len() < 0x80 {
            v.push(content.len() as u8);
        } else {
            v.push(0x82);
            v.extend_from_slice(&(content.len() as u16).to_be_bytes());
        }
        v.extend_from_slice(content);
        v
    }

    fn rdn(oid: &[u8], tag: u8, value: &str) -> Vec<u8> {
        let atv = [tlv(OID, oid), tlv(tag, value.as_bytes())].concat();
        tlv(SET, &tlv(SEQUENCE, &atv))
    }

    /// A certificate skeleton: only the fields the reader walks.
    fn cert(subject: Vec<u8>) -> Vec<u8> {
        let tbs = [
            tlv(0xa0, &tlv(0x02, &[2])),
            tlv(0x02, &[1, 2, 3]),
            tlv(SEQUENCE, &tlv(OID, &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02])),
            tlv(SEQUENCE, &rdn(&[0x55, 0x04, 0x03], 0x0c, "ca")),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &subject),
            tlv(SEQUENCE, &[]),
        ]
        .concat();
        tlv(SEQUENCE, &[tlv(SEQUENCE, &tbs), tlv(SEQUENCE, &[]), tlv(0x03, &[0])].concat())
    }

    #[test]
    fn prints_rdns_last_first_with_escapes_and_unknown_types_in_hex() {
        let subject = [
            rdn(&[0x55, 0x04, 0x06], 0x13, "US"),
            rdn(&[0x55, 0x04, 0x0a], 0x0c, "Example, Inc"),
            rdn(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01], 0x16, "a@b"),
            rdn(&[0x55, 0x04, 0x03], 0x0c, "alice"),
        ]
        .concat();
        assert_eq!(
            subject_dn(&cert(subject)).as_deref(),
            Some("CN=alice,1.2.840.113549.1.9.1=#1603614062,O=Example\\, Inc,C=US")
        );
    }

    #[test]
    fn garbage_is_none_not_a_panic() {
        assert_eq!(subject_dn(&[]), None);
        assert_eq!(subject_dn(&[0x30, 0x85, 1, 2, 3, 4, 5]), None);
        let mut c = cert(rdn(&[0x55, 0x04, 0x03], 0x0c, "x"));
        c.truncate(c.len() / 2);
        assert_eq!(subject_dn(&c), None);
    }
}
