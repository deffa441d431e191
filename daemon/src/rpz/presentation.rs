//! Records as the lines of a stored zone file, in a presentation form kresd's zone reader
//! (libzscanner) takes for every record a transfer can bring, and ours reads back as the
//! same record.
//!
//! The rule for names, proven against libzscanner's grammar (`label_char`: letters, digits
//! and `*-_/` as they are, any byte as `\DDD`): every byte of a label outside
//! `[A-Za-z0-9*_/-]` is written `\DDD`, so no label holds a character the reader stops at
//! (white space, `;`, `(`, `"`, `.`, `@`, `$` …) and none is taken for anything but its byte.
//! `*` is a byte like any other to the reader: a label `*` is the wildcard by its byte.
//!
//! Record data: SOA, A, AAAA, CNAME, DNAME, NS, PTR, MX and TXT in their usual form (names by
//! the rule above, TXT strings quoted with `\DDD` for bytes outside printable ASCII and for
//! `"`, `\` and `;`); every other type in RFC 3597's generic form (`TYPEn \# len hex`), which
//! carries its wire bytes unchanged. A record libzscanner may refuse even so (empty data, of
//! any type but NULL, APL and the private-use ones) cannot be stored, and [`record_line`]
//! says so.

use std::fmt::Write as _;

use domain::base::iana::{Class, Rtype};
use domain::base::name::{ParsedName, ToName};
use domain::base::rdata::{ComposeRecordData, ParseRecordData, RecordData};
use domain::base::Record;
use domain::rdata::ZoneRecordData;
use domain::zonefile::inplace::{Entry, ScannedRecord, Zonefile};

/// Why a record cannot be stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unstorable {
    /// Its data is empty, and the zone reader requires data for its type.
    #[error("the {rtype} record of {owner} has empty data, which kresd's zone reader refuses")]
    EmptyData {
        /// The record's owner, as it would be written.
        owner: String,
        /// Its type.
        rtype: String,
    },
    /// Its line does not read back as the record (a fault of the writer, caught here).
    #[error("the record of {owner} does not read back as it came: {line:?}")]
    ReadsBackOtherwise {
        /// The record's owner, as written.
        owner: String,
        /// The line written.
        line: String,
    },
}

/// Whether empty data of `rtype` is stored. libzscanner refuses `\# 0` for every type it
/// knows data to be required for (its `nonempty_hex_r_data`, a list that grows with its
/// versions); empty data is meaningful only for NULL, APL and the private-use types, so only
/// those are stored empty, whatever version reads the file.
fn empty_data_stored(rtype: Rtype) -> bool {
    matches!(rtype.to_int(), 10 | 42 | 65280..=65534)
}

/// Whether `byte` stands for itself in a label libzscanner reads.
fn plain_in_label(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'*' | b'-' | b'_' | b'/')
}

/// Append `label`: bytes outside `[A-Za-z0-9*_/-]` as `\DDD`.
fn push_label(out: &mut String, label: &[u8]) {
    for &byte in label {
        if plain_in_label(byte) {
            out.push(char::from(byte));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "\\{byte:03}");
        }
    }
}

/// Append `name`, absolute (the root is `.`).
fn push_name<N: ToName + ?Sized>(out: &mut String, name: &N) {
    let mut labels = 0;
    for label in name.iter_labels() {
        let bytes = label.as_ref();
        if bytes.is_empty() {
            break;
        }
        push_label(out, bytes);
        out.push('.');
        labels += 1;
    }
    if labels == 0 {
        out.push('.');
    }
}

/// `name` as [`push_name`] writes it.
fn name_text<N: ToName + ?Sized>(name: &N) -> String {
    let mut out = String::with_capacity(usize::from(name.compose_len()) + 8);
    push_name(&mut out, name);
    out
}

/// The owner of a record as [`record_line`] writes it, lower case: what the stored lines of
/// one owner are found by.
pub(crate) fn owner_text<N: ToName + ?Sized>(owner: &N) -> String {
    let mut text = name_text(owner);
    text.make_ascii_lowercase();
    text
}

/// Append one character string, quoted: printable ASCII as it is but `"`, `\` and `;`; those
/// and every other byte as `\DDD`.
fn push_text(out: &mut String, text: &[u8]) {
    out.push('"');
    for &byte in text {
        if (b' '..=b'~').contains(&byte) && !matches!(byte, b'"' | b'\\' | b';') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "\\{byte:03}");
        }
    }
    out.push('"');
}

/// Append `data` in RFC 3597's generic form (`\# len hex`).
fn push_generic(out: &mut String, data: &[u8]) {
    let _ = write!(out, "\\# {}", data.len());
    if !data.is_empty() {
        out.push(' ');
        for byte in data {
            let _ = write!(out, "{byte:02x}");
        }
    }
}

/// A record as one line of a zone file (newline included), or why it cannot be stored.
pub(crate) fn record_line<N, O, M>(
    record: &Record<N, ZoneRecordData<O, M>>,
) -> Result<String, Unstorable>
where
    N: ToName,
    O: AsRef<[u8]>,
    M: ToName,
{
    let mut line = String::with_capacity(96);
    push_name(&mut line, record.owner());
    let _ = write!(line, " {} IN ", record.ttl().as_secs());
    let rtype = record.data().rtype();
    match record.data() {
        ZoneRecordData::A(a) => {
            let _ = write!(line, "A {}", a.addr());
        }
        ZoneRecordData::Aaaa(aaaa) => {
            let _ = write!(line, "AAAA {}", aaaa.addr());
        }
        ZoneRecordData::Cname(cname) => {
            line.push_str("CNAME ");
            push_name(&mut line, cname.cname());
        }
        ZoneRecordData::Dname(dname) => {
            line.push_str("DNAME ");
            push_name(&mut line, dname.dname());
        }
        ZoneRecordData::Ns(ns) => {
            line.push_str("NS ");
            push_name(&mut line, ns.nsdname());
        }
        ZoneRecordData::Ptr(ptr) => {
            line.push_str("PTR ");
            push_name(&mut line, ptr.ptrdname());
        }
        ZoneRecordData::Mx(mx) => {
            let _ = write!(line, "MX {} ", mx.preference());
            push_name(&mut line, mx.exchange());
        }
        ZoneRecordData::Soa(soa) => {
            line.push_str("SOA ");
            push_name(&mut line, soa.mname());
            line.push(' ');
            push_name(&mut line, soa.rname());
            let _ = write!(
                line,
                " {} {} {} {} {}",
                soa.serial().into_int(),
                soa.refresh().as_secs(),
                soa.retry().as_secs(),
                soa.expire().as_secs(),
                soa.minimum().as_secs()
            );
        }
        ZoneRecordData::Txt(txt) if txt.iter().next().is_some() => {
            line.push_str("TXT");
            for text in txt.iter() {
                line.push(' ');
                push_text(&mut line, text);
            }
        }
        data => {
            let mut wire = Vec::with_capacity(64);
            // Writing to a Vec cannot fail.
            let _ = data.compose_rdata(&mut wire);
            if wire.is_empty() && !empty_data_stored(rtype) {
                return Err(Unstorable::EmptyData {
                    owner: name_text(record.owner()),
                    rtype: rtype.to_string(),
                });
            }
            let _ = write!(line, "TYPE{} ", rtype.to_int());
            push_generic(&mut line, &wire);
        }
    }
    line.push('\n');
    Ok(line)
}

/// What identifies a record in a zone for IXFR (RFC 1995: name, type, class and data; not
/// the TTL), in canonical form (RFC 4034 §6.2) so that case does not matter where DNS says it
/// does not. Data in the generic form of a type the DNS library knows is read as that type
/// first, so a line and the record it was written from have one key.
pub(crate) fn record_key<N, O, M>(owner: &N, class: Class, data: &ZoneRecordData<O, M>) -> Vec<u8>
where
    N: ToName + ?Sized,
    O: AsRef<[u8]>,
    M: ToName,
{
    let mut key = Vec::with_capacity(64);
    // Writing to a Vec cannot fail.
    let _ = owner.compose_canonical(&mut key);
    key.extend_from_slice(&data.rtype().to_int().to_be_bytes());
    key.extend_from_slice(&class.to_int().to_be_bytes());
    match data {
        ZoneRecordData::Unknown(unknown) => {
            canonical_generic(unknown.rtype(), unknown.data().as_ref(), &mut key)
        }
        data => {
            let _ = data.compose_canonical_rdata(&mut key);
        }
    }
    key
}

/// Append the canonical form of `rtype` data given as `wire` bytes: as its type when the DNS
/// library knows it and the bytes are one whole value of it, else the bytes as they are.
fn canonical_generic(rtype: Rtype, wire: &[u8], key: &mut Vec<u8>) {
    let mut parser = domain::dep::octseq::Parser::from_ref(wire);
    let typed = ZoneRecordData::<&[u8], ParsedName<&[u8]>>::parse_rdata(rtype, &mut parser);
    match typed {
        Ok(Some(data))
            if parser.remaining() == 0 && !matches!(data, ZoneRecordData::Unknown(_)) =>
        {
            let _ = data.compose_canonical_rdata(key);
        }
        _ => key.extend_from_slice(wire),
    }
}

/// Why a line of a stored file is no record (the line quoted, as the file has it).
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// A directive or an empty line where a record should be.
    #[error("'{line}' is no record")]
    NoRecord { line: String },
    /// Text the zone file reader refused (its position and reason in `error`).
    #[error("'{line}': {error}")]
    Unreadable {
        line: String,
        error: domain::zonefile::inplace::Error,
    },
}

/// One line of a stored file, parsed.
pub(crate) fn parse_line(line: &str) -> Result<ScannedRecord, LineError> {
    let mut zone = Zonefile::with_capacity(line.len() + 1);
    zone.extend_from_slice(line.as_bytes());
    zone.extend_from_slice(b"\n");
    let quoted = || line.trim_end().to_owned();
    match zone.next_entry() {
        Ok(Some(Entry::Record(record))) => Ok(record),
        Ok(_) => Err(LineError::NoRecord { line: quoted() }),
        Err(error) => Err(LineError::Unreadable {
            line: quoted(),
            error,
        }),
    }
}

/// `line`, written from `record`, if it reads back as the record (same key and TTL). A line
/// with no `\\` is the readers' plain case (labels of `[A-Za-z0-9*_/-]`, numbers, addresses,
/// printable text) and is taken as it is; every line with an escape or in the generic form is
/// read back (about 1 µs a line), so the writer's work is proven where it does any.
pub(crate) fn checked<N, O, M>(
    line: String,
    record: &Record<N, ZoneRecordData<O, M>>,
) -> Result<String, Unstorable>
where
    N: ToName,
    O: AsRef<[u8]>,
    M: ToName,
{
    if !line.contains('\\') {
        return Ok(line);
    }
    let same = parse_line(&line).is_ok_and(|read| {
        read.ttl() == record.ttl()
            && record_key(read.owner(), read.class(), read.data())
                == record_key(record.owner(), record.class(), record.data())
    });
    if same {
        Ok(line)
    } else {
        Err(Unstorable::ReadsBackOtherwise {
            owner: name_text(record.owner()),
            line: line.trim_end().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use domain::base::name::NameBuilder;
    use domain::base::rdata::UnknownRecordData;
    use domain::base::{Name, Ttl};
    use domain::rdata::{Cname, Mx, Srv, Txt};

    use super::*;

    type Data = ZoneRecordData<Vec<u8>, Name<Vec<u8>>>;

    fn name(text: &str) -> Name<Vec<u8>> {
        Name::from_str(text).unwrap()
    }

    /// The name `labels` (each its bytes) under `feed.rpz.`.
    fn name_of(labels: &[&[u8]]) -> Name<Vec<u8>> {
        let mut builder = NameBuilder::new_vec();
        for label in labels {
            builder.append_label(label).unwrap();
        }
        builder.append_origin(&name("feed.rpz.")).unwrap()
    }

    fn record(owner: Name<Vec<u8>>, data: Data) -> Record<Name<Vec<u8>>, Data> {
        Record::new(owner, Class::IN, Ttl::from_secs(60), data)
    }

    /// The characters libzscanner's grammar takes in a name, each standing for its byte,
    /// with `\DDD` for any byte: the text of every name written here is of these only.
    fn read_as_libzscanner_does(text: &str) -> Option<Vec<Vec<u8>>> {
        if text == "." {
            return Some(Vec::new());
        }
        let mut labels = vec![Vec::new()];
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'.' => labels.push(Vec::new()),
                b'\\' => {
                    let digits = bytes.get(i + 1..i + 4)?;
                    if !digits.iter().all(u8::is_ascii_digit) {
                        return None;
                    }
                    let value: u16 = std::str::from_utf8(digits).ok()?.parse().ok()?;
                    labels.last_mut()?.push(u8::try_from(value).ok()?);
                    i += 3;
                }
                b if b.is_ascii_alphanumeric() || matches!(b, b'*' | b'-' | b'_' | b'/') => {
                    labels.last_mut()?.push(b);
                }
                _ => return None,
            }
            i += 1;
        }
        // Absolute: the text ends with the dot of the root.
        (labels.pop()? == b"").then_some(labels)
    }

    #[test]
    fn every_byte_of_a_label_is_written_as_libzscanner_reads_it() {
        for byte in 0..=255u8 {
            for label in [vec![byte], vec![b'x', byte, b'y'], vec![byte; 63]] {
                let owner = name_of(&[&label, b"sub"]);
                let text = name_text(&owner);
                let labels = read_as_libzscanner_does(&text)
                    .unwrap_or_else(|| panic!("byte {byte}: {text} is not libzscanner's"));
                assert_eq!(
                    labels,
                    [
                        label.clone(),
                        b"sub".to_vec(),
                        b"feed".to_vec(),
                        b"rpz".to_vec()
                    ],
                    "byte {byte}: {text}"
                );
            }
        }
        assert_eq!(name_text(&Name::root_vec()), ".");
        assert_eq!(name_text(&name_of(&[b"*"])), "*.feed.rpz.");
        assert_eq!(
            name_text(&name_of(&[b"evil!name"])),
            "evil\\033name.feed.rpz."
        );
        assert_eq!(name_text(&name_of(&[b"a.b"])), "a\\046b.feed.rpz.");
        assert_eq!(
            owner_text(&name_of(&[b"Mixed\xc3\x89"])),
            "mixed\\195\\137.feed.rpz."
        );
    }

    /// Write `record`, read the line back: the same record (key and TTL), found by its
    /// owner's text; the line.
    fn round_trip(record: &Record<Name<Vec<u8>>, Data>) -> String {
        let line = record_line(record).unwrap();
        let line = checked(line, record).unwrap_or_else(|e| panic!("{e}"));
        let read = parse_line(&line).unwrap();
        assert_eq!(
            record_key(read.owner(), read.class(), read.data()),
            record_key(record.owner(), record.class(), record.data()),
            "{line}"
        );
        assert_eq!(read.ttl(), record.ttl());
        let token = line
            .split_ascii_whitespace()
            .next()
            .unwrap()
            .to_ascii_lowercase();
        assert_eq!(token, owner_text(record.owner()), "{line}");
        line
    }

    #[test]
    fn every_byte_in_owners_targets_and_texts_reads_back_as_written() {
        for byte in 0..=255u8 {
            for label in [vec![byte], vec![b'x', byte, b'y']] {
                let owner = name_of(&[&label]);
                let cname = ZoneRecordData::Cname(Cname::new(Name::root_vec()));
                round_trip(&record(owner.clone(), cname));
                let target = ZoneRecordData::Cname(Cname::new(name_of(&[&label, b"t"])));
                round_trip(&record(name_of(&[b"t"]), target));
                let mx = ZoneRecordData::Mx(Mx::new(10, owner.clone()));
                round_trip(&record(name_of(&[b"m"]), mx));
                let mut wire = vec![3, byte, byte, b'"'];
                wire.extend_from_slice(&[1, byte]);
                let txt = ZoneRecordData::Txt(Txt::from_octets(wire).unwrap());
                round_trip(&record(owner, txt));
            }
        }
    }

    #[test]
    fn lines_are_the_usual_presentation_where_nothing_needs_escaping() {
        let soa = "blocklist.rpz. 3600 IN SOA primary.blocklist.rpz. hostmaster.blocklist.rpz. 1 300 60 86400 60\n";
        for line in [
            soa,
            "a.example.blocklist.rpz. 3600 IN CNAME .\n",
            "*.b.example.blocklist.rpz. 60 IN CNAME rpz-passthru.\n",
            "c.example.blocklist.rpz. 3600 IN A 192.0.2.1\n",
            "d.example.blocklist.rpz. 3600 IN TXT \"a b\" \"c\"\n",
            "e.example.blocklist.rpz. 3600 IN AAAA 2001:db8::1\n",
            "f.example.blocklist.rpz. 3600 IN NS ns.example.\n",
            "g.example.blocklist.rpz. 3600 IN MX 10 mail.example.\n",
            "h.example.blocklist.rpz. 3600 IN DNAME example.net.\n",
            "i.example.blocklist.rpz. 3600 IN PTR host.example.\n",
        ] {
            let record = parse_line(line).unwrap();
            assert_eq!(record_line(&record).unwrap(), line);
            assert_eq!(checked(line.to_owned(), &record).unwrap(), line);
        }
    }

    #[test]
    fn other_types_are_written_generic_and_keyed_as_their_type() {
        let srv = ZoneRecordData::Srv(Srv::new(1, 2, 443, name("Target.Example.")));
        let line = round_trip(&record(name_of(&[b"s"]), srv.clone()));
        // Priority, weight, port, then the target uncompressed, its case kept.
        let wire = concat!(
            "0001",
            "0002",
            "01bb",
            "06546172676574",
            "074578616d706c65",
            "00"
        );
        assert_eq!(line, format!("s.feed.rpz. 60 IN TYPE33 \\# 22 {wire}\n"));
        // The same record read from its line (generic) and from the wire (typed): one key,
        // whatever the case of the target.
        let lower: Data = ZoneRecordData::Srv(Srv::new(1, 2, 443, name("target.example.")));
        let read = parse_line(&line).unwrap();
        assert!(matches!(read.data(), ZoneRecordData::Unknown(_)), "{line}");
        assert_eq!(
            record_key(read.owner(), read.class(), read.data()),
            record_key(&name_of(&[b"s"]), Class::IN, &lower)
        );
        let private = |bytes: Vec<u8>| {
            let rtype = Rtype::from_int(65280);
            ZoneRecordData::Unknown(UnknownRecordData::from_octets(rtype, bytes).unwrap())
        };
        assert_eq!(
            round_trip(&record(name_of(&[b"p"]), private(vec![1, 2, 255]))),
            "p.feed.rpz. 60 IN TYPE65280 \\# 3 0102ff\n"
        );
        assert_eq!(
            round_trip(&record(name_of(&[b"p"]), private(Vec::new()))),
            "p.feed.rpz. 60 IN TYPE65280 \\# 0\n"
        );
    }

    #[test]
    fn empty_data_kresd_would_refuse_is_not_stored() {
        let spf = Rtype::from_int(99);
        let empty =
            ZoneRecordData::Unknown(UnknownRecordData::from_octets(spf, Vec::new()).unwrap());
        let error = record_line(&record(name_of(&[b"e!"]), empty)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the SPF record of e\\033.feed.rpz. has empty data, which kresd's zone reader refuses"
        );
    }

    #[test]
    fn a_line_that_reads_back_otherwise_is_caught() {
        let data = ZoneRecordData::Cname(Cname::new(Name::root_vec()));
        let cname = record(name_of(&[b"a!"]), data);
        let caught = |line: &str| {
            let error = checked(line.to_owned(), &cname).unwrap_err();
            assert!(
                matches!(error, Unstorable::ReadsBackOtherwise { .. }),
                "{error}"
            );
        };
        caught("b\\033.feed.rpz. 60 IN CNAME .\n");
        caught("a\\033.feed.rpz. 61 IN CNAME .\n");
        caught("a\\033.feed.rpz. 60 IN CNAME x.\n");
        caught("a\\033.feed.rpz. 60 IN TYPE5 \\# 3 017800\n");
        assert!(checked("a\\033.feed.rpz. 60 IN CNAME .\n".to_owned(), &cname).is_ok());
        assert!(checked("a\\033.feed.rpz. 60 IN TYPE5 \\# 1 00\n".to_owned(), &cname).is_ok());
    }

    #[test]
    fn keys_ignore_case_of_names_and_the_ttl() {
        let key_of = |line: &str| {
            let record = parse_line(line).unwrap();
            (
                record_key(record.owner(), record.class(), record.data()),
                owner_text(record.owner()),
            )
        };
        let (a, owner_a) = key_of("A.Example.blocklist.rpz. 3600 IN CNAME Target.Example.");
        let (b, owner_b) = key_of("a.example.BLOCKLIST.rpz. 60 IN CNAME target.example.");
        assert_eq!(a, b);
        assert_eq!(owner_a, owner_b);
        let (c, _) = key_of("a.example.blocklist.rpz. 60 IN CNAME other.example.");
        assert_ne!(a, c);
        let (t1, _) = key_of("t.blocklist.rpz. 60 IN TXT \"Case\"");
        let (t2, _) = key_of("t.blocklist.rpz. 60 IN TXT \"case\"");
        assert_ne!(t1, t2, "text keeps its case");
    }
}
