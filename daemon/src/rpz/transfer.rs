//! The records of one AXFR or IXFR answer, in order, turned into what the stored file
//! becomes: a pure state machine fed record by record, so that the network and the files
//! stay out of it and every shape of answer is table-tested.
//!
//! RFC 1995 answers: one SOA alone (up to date); SOA, SOA(old), deletions, SOA(new),
//! additions, … SOA (incremental); SOA, records, SOA (the whole zone, also to an IXFR).

use domain::base::iana::Class;
use domain::base::name::ToName;
use domain::base::rdata::RecordData;
use domain::base::{Name, Record};
use domain::rdata::ZoneRecordData;

use super::presentation::{self, Unstorable};
use super::zonefile::{self, Diff, OverBudget};
use super::{serial_order, Limits, SerialOrder, SoaTimers, TransferError};

/// What an IXFR holds besides its diff, within [`Limits::max_ixfr_memory`]: the
/// connection's buffer and one message (64 KiB each), the records parsed from it, the
/// reader and writer of the files the diff is applied with (256 KiB each), and the
/// allocator's slack around them.
const IXFR_BUFFERS: u64 = 4 << 20;

/// What was asked of the primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    /// The whole zone.
    Axfr,
    /// The changes since the stored serial.
    Ixfr {
        /// The serial of the stored file.
        stored: u32,
    },
}

/// A version of the zone: its SOA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Version {
    /// The serial.
    pub serial: u32,
    /// The timers.
    pub timers: SoaTimers,
    /// The SOA record as a line of the zone file.
    pub soa_line: String,
}

/// What a finished answer brought.
#[derive(Debug)]
pub(crate) enum Received {
    /// Nothing newer than the stored serial.
    UpToDate {
        /// The primary's serial (the stored one).
        serial: u32,
    },
    /// The whole zone; its lines were handed out by [`Transfer::take_lines`].
    Full(Version),
    /// Changes to apply to the stored file.
    Incremental(Version, Diff),
    /// An IXFR whose changes outgrew the memory they may hold: the rest of the answer was
    /// not taken, and the zone is to be transferred whole.
    OverBudget {
        /// The memory the changes may hold, in bytes.
        budget: u64,
    },
}

/// Where in an answer the transfer is.
#[derive(Debug)]
enum State {
    /// Nothing received yet.
    Start,
    /// The first SOA (the new version) received; the next record tells the kind of answer.
    Opened(Version),
    /// A whole zone: every record up to the closing SOA is a line of the new file.
    Full(Version),
    /// Inside an IXFR change, after its old SOA: records deleted.
    Deleting {
        /// The version the answer ends at.
        new: Version,
        /// The changes so far.
        diff: Diff,
    },
    /// Inside an IXFR change, after its new SOA (serial `current`): records added.
    Adding {
        /// The version the answer ends at.
        new: Version,
        /// The changes so far.
        diff: Diff,
        /// The serial this change leads to.
        current: u32,
    },
    /// The closing SOA was received.
    Done(Received),
    /// An IXFR's changes outgrew their budget: nothing more is taken.
    OverBudget {
        /// The memory the changes may hold, in bytes.
        budget: u64,
    },
    /// A previous record was refused; nothing more is taken.
    Failed,
}

/// One transfer's answer being read.
#[derive(Debug)]
pub(crate) struct Transfer {
    /// The zone asked for.
    zone: Name<Vec<u8>>,
    /// What was asked.
    asked: Asked,
    /// Where in the answer we are.
    state: State,
    /// Records received so far.
    records: u64,
    /// Bytes of the answer's messages received so far.
    received: u64,
    /// Bytes of text the answer made so far: a whole zone's lines, an IXFR's added lines.
    text: u64,
    /// The bounds of records, text and memory.
    limits: Limits,
    /// Lines of a whole zone not yet written out (header and SOA first).
    lines: Vec<u8>,
}

/// The data of a record of an answer, whatever its storage.
type Data<O, N> = ZoneRecordData<O, N>;

impl Transfer {
    pub(crate) fn new(zone: Name<Vec<u8>>, asked: Asked, limits: &Limits) -> Transfer {
        Transfer {
            zone,
            asked,
            state: State::Start,
            records: 0,
            received: 0,
            text: 0,
            limits: limits.clone(),
            lines: Vec::new(),
        }
    }

    /// A message of `bytes` bytes arrived (its records follow): the text may grow with it.
    pub(crate) fn received(&mut self, bytes: usize) {
        self.received = self.received.saturating_add(bytes as u64);
    }

    /// Records received so far.
    pub(crate) fn records(&self) -> u64 {
        self.records
    }

    /// Whether nothing more of the answer is wanted: the closing SOA was received, or an
    /// IXFR's changes outgrew their budget.
    pub(crate) fn is_done(&self) -> bool {
        matches!(self.state, State::Done(_) | State::OverBudget { .. })
    }

    /// Whether an IXFR's answer is the new SOA alone so far: at the end of the first
    /// message, the condensed answer of a primary that offers no IXFR (RFC 1995 §4).
    pub(crate) fn is_condensed(&self) -> bool {
        matches!(self.asked, Asked::Ixfr { .. })
            && matches!(self.state, State::Opened(_))
            && self.records == 1
    }

    /// The lines of a whole zone received since the last call (empty for an IXFR).
    pub(crate) fn take_lines(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.lines)
    }

    /// What the answer brought, once done.
    pub(crate) fn finish(self) -> Result<Received, TransferError> {
        match self.state {
            State::Done(received) => Ok(received),
            State::OverBudget { budget } => Ok(Received::OverBudget { budget }),
            _ => Err(TransferError::Malformed(
                "the transfer ended before its closing SOA".to_owned(),
            )),
        }
    }

    /// Take the next record of the answer.
    pub(crate) fn on_record<N, O, M>(
        &mut self,
        record: &Record<N, Data<O, M>>,
    ) -> Result<(), TransferError>
    where
        N: ToName,
        O: AsRef<[u8]>,
        M: ToName,
    {
        if let State::OverBudget { .. } = self.state {
            return Ok(());
        }
        self.records += 1;
        if self.records > self.limits.max_records {
            return Err(TransferError::TooLarge(format!(
                "more than {} records",
                self.limits.max_records
            )));
        }
        let taken = self.take(record)?;
        let state = std::mem::replace(&mut self.state, State::Failed);
        self.state = self.next(state, taken)?;
        Ok(())
    }

    /// What the current state needs of `record`: its version when it is the zone's SOA,
    /// else its line (for a whole zone or an addition) and its key (for a diff). An error
    /// when it is outside the zone (the first record: of another zone) or of another class.
    fn take<N, O, M>(&self, record: &Record<N, Data<O, M>>) -> Result<Taken, TransferError>
    where
        N: ToName,
        O: AsRef<[u8]>,
        M: ToName,
    {
        let owner = record.owner();
        let first = matches!(self.state, State::Start);
        if !owner.ends_with(&self.zone) {
            return Err(if first {
                TransferError::WrongZone {
                    expected: self.zone.fmt_with_dot().to_string(),
                    got: owner.fmt_with_dot().to_string(),
                }
            } else {
                TransferError::Malformed(format!(
                    "the record of {} is outside the zone",
                    owner.fmt_with_dot()
                ))
            });
        }
        if record.class() != Class::IN {
            return Err(TransferError::Malformed(format!(
                "a record of class {} in the zone",
                record.class()
            )));
        }
        if let ZoneRecordData::Soa(soa) = record.data() {
            if !owner.name_eq(&self.zone) {
                return Err(TransferError::Malformed(format!(
                    "a SOA record at {}, below the zone's apex",
                    owner.fmt_with_dot()
                )));
            }
            return Ok(Taken::Soa(Version {
                serial: soa.serial().into_int(),
                timers: zonefile::timers(soa),
                soa_line: line_of(record)?,
            }));
        }
        if first {
            return Err(TransferError::Malformed(format!(
                "the answer starts with {} {}, not the zone's SOA",
                owner.fmt_with_dot(),
                record.data().rtype()
            )));
        }
        let in_diff = matches!(self.state, State::Deleting { .. } | State::Adding { .. });
        let deleting = matches!(self.state, State::Deleting { .. });
        let line = if deleting {
            None
        } else {
            Some(line_of(record)?)
        };
        Ok(Taken::Other {
            line,
            key: in_diff.then(|| {
                let key = presentation::record_key(owner, record.class(), record.data());
                (key, presentation::owner_text(owner))
            }),
        })
    }

    /// The state after `taken` in `state`.
    fn next(&mut self, state: State, taken: Taken) -> Result<State, TransferError> {
        let (line, key) = match taken {
            Taken::Soa(soa) => return self.next_soa(state, soa),
            Taken::Other { line, key } => (line, key),
        };
        Ok(match (state, line, key) {
            (State::Opened(new), Some(line), _) => {
                self.open_file(&new)?;
                self.count_text(line.len())?;
                self.lines.extend_from_slice(line.as_bytes());
                State::Full(new)
            }
            (State::Full(new), Some(line), _) => {
                self.count_text(line.len())?;
                self.lines.extend_from_slice(line.as_bytes());
                State::Full(new)
            }
            (State::Deleting { new, mut diff }, _, Some((key, owner))) => {
                match diff.delete(&key, &owner) {
                    Ok(()) => State::Deleting { new, diff },
                    Err(OverBudget) => self.over_budget(),
                }
            }
            (
                State::Adding {
                    new,
                    mut diff,
                    current,
                },
                Some(line),
                Some((key, owner)),
            ) => {
                self.count_text(line.len())?;
                match diff.add(&key, &owner, &line) {
                    Ok(()) => State::Adding { new, diff, current },
                    Err(OverBudget) => self.over_budget(),
                }
            }
            _ => {
                return Err(TransferError::Malformed(
                    "records follow the transfer's closing SOA".to_owned(),
                ))
            }
        })
    }

    /// The state after the zone's SOA at version `soa` in `state`.
    fn next_soa(&mut self, state: State, soa: Version) -> Result<State, TransferError> {
        Ok(match state {
            State::Start => self.opened(soa)?,
            State::Opened(new) => match self.asked {
                Asked::Ixfr { stored } if soa.serial == stored && soa.serial != new.serial => {
                    State::Deleting {
                        new,
                        diff: Diff::new(self.diff_budget()),
                    }
                }
                _ => {
                    self.open_file(&new)?;
                    close_full(new, soa)?
                }
            },
            State::Full(new) => close_full(new, soa)?,
            State::Deleting { new, diff } => State::Adding {
                new,
                diff,
                current: soa.serial,
            },
            State::Adding { new, diff, current } => {
                if current == new.serial && soa.serial == new.serial {
                    State::Done(Received::Incremental(new, diff))
                } else if soa.serial == current {
                    State::Deleting { new, diff }
                } else {
                    return Err(TransferError::Malformed(format!(
                        "a change from serial {} follows the change to serial {current}",
                        soa.serial
                    )));
                }
            }
            State::Done(_) | State::OverBudget { .. } | State::Failed => {
                return Err(TransferError::Malformed(
                    "records follow the transfer's closing SOA".to_owned(),
                ))
            }
        })
    }

    /// The heap an IXFR's diff may hold: the budget less the transfer's buffers.
    fn diff_budget(&self) -> u64 {
        self.limits.max_ixfr_memory.saturating_sub(IXFR_BUFFERS)
    }

    /// The state once the diff outgrew its budget (the diff is freed).
    fn over_budget(&self) -> State {
        State::OverBudget {
            budget: self.limits.max_ixfr_memory,
        }
    }

    /// Count `bytes` more of text made from the answer: a zone's text is a few times its
    /// compressed wire form, so text that outgrows the bytes received by far is refused
    /// before it is written or held.
    fn count_text(&mut self, bytes: usize) -> Result<(), TransferError> {
        self.text = self.text.saturating_add(bytes as u64);
        let Limits {
            max_text_ratio: ratio,
            text_margin: margin,
            ..
        } = self.limits;
        let allowed = ratio.saturating_mul(self.received).saturating_add(margin);
        if self.text > allowed {
            return Err(TransferError::TooLarge(format!(
                "its text would reach {} bytes from {} bytes received (at most {ratio} times \
                 as much, plus {margin} bytes)",
                self.text, self.received
            )));
        }
        Ok(())
    }

    /// The state after the answer's first SOA, `new`.
    fn opened(&mut self, new: Version) -> Result<State, TransferError> {
        let Asked::Ixfr { stored } = self.asked else {
            return Ok(State::Opened(new));
        };
        Ok(match serial_order(new.serial, stored) {
            SerialOrder::Newer => State::Opened(new),
            SerialOrder::Same => State::Done(Received::UpToDate { serial: stored }),
            SerialOrder::Older => {
                return Err(TransferError::SerialBackwards {
                    stored,
                    primary: new.serial,
                })
            }
        })
    }

    /// Start the lines of a whole zone at `new`: the header, then the SOA.
    fn open_file(&mut self, new: &Version) -> Result<(), TransferError> {
        let header = zonefile::header(&new.soa_line);
        self.count_text(header.len() + new.soa_line.len())?;
        self.lines.extend_from_slice(header.as_bytes());
        self.lines.extend_from_slice(new.soa_line.as_bytes());
        Ok(())
    }
}

/// The line `record` is stored as (read back as the record where it has escapes); a record
/// that cannot be stored fails the transfer (nothing is committed).
fn line_of<N, O, M>(record: &Record<N, Data<O, M>>) -> Result<String, TransferError>
where
    N: ToName,
    O: AsRef<[u8]>,
    M: ToName,
{
    let unstorable = |e: Unstorable| TransferError::Unstorable(e.to_string());
    let line = presentation::record_line(record).map_err(unstorable)?;
    presentation::checked(line, record).map_err(unstorable)
}

/// The end of a whole zone at `new`: its closing SOA `soa` must be of the same version.
fn close_full(new: Version, soa: Version) -> Result<State, TransferError> {
    if soa.serial != new.serial {
        return Err(TransferError::Malformed(format!(
            "the transfer of serial {} closes with serial {}",
            new.serial, soa.serial
        )));
    }
    Ok(State::Done(Received::Full(new)))
}

/// A record as the transfer takes it.
enum Taken {
    /// The zone's SOA: a version.
    Soa(Version),
    /// Any other record.
    Other {
        /// Its line, when a whole zone or an addition needs it.
        line: Option<String>,
        /// Its key and owner, when a diff needs them.
        key: Option<(Vec<u8>, String)>,
    },
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    fn soa(serial: u32) -> String {
        format!("feed.rpz. 3600 IN SOA ns.feed.rpz. host.feed.rpz. {serial} 300 60 86400 60")
    }

    /// Feed `lines` to a transfer of `asked` (at most 5 records); its result.
    fn run(asked: Asked, lines: &[String]) -> (Result<Received, TransferError>, Vec<u8>) {
        let zone = Name::<Vec<u8>>::from_str("feed.rpz.").unwrap();
        let limits = Limits {
            max_records: 12,
            ..Limits::default()
        };
        let mut transfer = Transfer::new(zone, asked, &limits);
        for line in lines {
            let record = presentation::parse_line(line).unwrap();
            if let Err(e) = transfer.on_record(&record) {
                return (Err(e), transfer.take_lines());
            }
        }
        let lines = transfer.take_lines();
        (transfer.finish(), lines)
    }

    fn entry(name: &str) -> String {
        format!("{name}.feed.rpz. 3600 IN CNAME .")
    }

    fn reason(result: Result<Received, TransferError>) -> &'static str {
        result.unwrap_err().reason()
    }

    #[test]
    fn a_whole_zone_becomes_the_lines_of_the_file() {
        let (result, lines) = run(Asked::Axfr, &[soa(7), entry("a"), entry("b"), soa(7)]);
        let Received::Full(version) = result.unwrap() else {
            panic!("not a whole zone")
        };
        assert_eq!(version.serial, 7);
        let text = String::from_utf8(lines).unwrap();
        assert_eq!(
            text,
            format!(
                "{} feed.rpz.\n{}\n{}\n{}\n",
                zonefile::HEADER,
                soa(7),
                entry("a"),
                entry("b")
            )
        );
        let (result, _) = run(Asked::Axfr, &[soa(7), soa(7)]);
        assert!(
            matches!(result.unwrap(), Received::Full(_)),
            "an empty zone"
        );
    }

    #[test]
    fn ixfr_answers_of_every_shape() {
        let ixfr = Asked::Ixfr { stored: 1 };
        let (result, _) = run(ixfr, &[soa(1)]);
        assert!(matches!(result.unwrap(), Received::UpToDate { serial: 1 }));
        // Two changes: c comes in with the first and leaves with the second.
        let changes = [
            soa(3),
            soa(1),
            entry("a"),
            soa(2),
            entry("c"),
            soa(2),
            entry("c"),
            soa(3),
            entry("d"),
            soa(3),
        ];
        let (result, lines) = run(ixfr, &changes);
        let Received::Incremental(version, diff) = result.unwrap() else {
            panic!("not incremental")
        };
        assert_eq!(version.serial, 3);
        assert_eq!(diff.deleted_count(), 1);
        assert_eq!(diff.sorted_added_lines(), [format!("{}\n", entry("d"))]);
        assert!(lines.is_empty(), "no lines of a whole zone");
        // The whole zone in answer to an IXFR (RFC 1995 §4).
        let (result, lines) = run(ixfr, &[soa(2), entry("a"), soa(2)]);
        assert!(matches!(result.unwrap(), Received::Full(_)));
        assert!(String::from_utf8(lines).unwrap().contains(&entry("a")));
    }

    #[test]
    fn broken_answers_are_refused_with_their_reason() {
        let ixfr = Asked::Ixfr { stored: 5 };
        assert_eq!(reason(run(ixfr, &[soa(4)]).0), "serial-backwards");
        let other = "other.rpz. 3600 IN SOA ns. host. 9 1 1 1 1".to_owned();
        assert_eq!(reason(run(Asked::Axfr, &[other]).0), "wrong-zone");
        assert_eq!(reason(run(Asked::Axfr, &[entry("a")]).0), "malformed");
        let outside = "x.other.rpz. 60 IN CNAME .".to_owned();
        assert_eq!(reason(run(Asked::Axfr, &[soa(7), outside]).0), "malformed");
        assert_eq!(
            reason(run(Asked::Axfr, &[soa(7), entry("a"), soa(8)]).0),
            "malformed"
        );
        assert_eq!(
            reason(run(Asked::Axfr, &[soa(7), entry("a")]).0),
            "malformed"
        );
        let after = [soa(7), soa(7), entry("a")];
        assert_eq!(reason(run(Asked::Axfr, &after).0), "malformed");
        let gap = [soa(9), soa(5), soa(6), soa(7), soa(8), soa(9), soa(9)];
        assert_eq!(reason(run(ixfr, &gap).0), "malformed");
        let chaos = "a.feed.rpz. 60 CH TXT \"x\"".to_owned();
        assert_eq!(reason(run(Asked::Axfr, &[soa(7), chaos]).0), "malformed");
        let endless: Vec<String> = std::iter::once(soa(7))
            .chain((0..20).map(|i| entry(&format!("n{i}"))))
            .collect();
        assert_eq!(reason(run(Asked::Axfr, &endless).0), "too-large");
    }

    #[test]
    fn a_record_kresd_would_refuse_fails_the_transfer() {
        // SPF with empty data: no line kresd's zone reader takes.
        let empty_spf = "e.feed.rpz. 60 IN TYPE99 \\# 0".to_owned();
        let (result, _) = run(
            Asked::Axfr,
            &[soa(7), entry("a"), empty_spf.clone(), soa(7)],
        );
        let error = result.unwrap_err();
        assert_eq!(error.reason(), "unstorable", "{error}");
        assert_eq!(
            error.to_string(),
            "a record cannot be stored: the SPF record of e.feed.rpz. has empty data, which \
             kresd's zone reader refuses"
        );
        // Added by an IXFR: the same.
        let ixfr = [soa(8), soa(7), soa(8), empty_spf, soa(8)];
        let (result, _) = run(Asked::Ixfr { stored: 7 }, &ixfr);
        assert_eq!(reason(result), "unstorable");
    }

    /// A transfer of `asked` within `limits`, told that `received` bytes came with the
    /// answer, fed `lines`: the first error, or the transfer.
    fn feed(
        asked: Asked,
        limits: &Limits,
        received: usize,
        lines: &[String],
    ) -> Result<Transfer, TransferError> {
        let zone = Name::<Vec<u8>>::from_str("feed.rpz.").unwrap();
        let mut transfer = Transfer::new(zone, asked, limits);
        transfer.received(received);
        for line in lines {
            let record = presentation::parse_line(line).unwrap();
            transfer.on_record(&record)?;
        }
        Ok(transfer)
    }

    #[test]
    fn text_grows_with_what_is_received_and_no_further() {
        let limits = Limits {
            max_text_ratio: 2,
            text_margin: 300,
            ..Limits::default()
        };
        // The header, the SOA, then entries: at most 2 * 100 + 300 bytes of text.
        let zone: Vec<String> = std::iter::once(soa(7))
            .chain((0..20).map(|i| entry(&format!("n{i:02}"))))
            .collect();
        let text = |lines: &[String]| {
            zonefile::header(&soa(7)).len() + lines.iter().map(|l| l.len() + 1).sum::<usize>()
        };
        let fits = (0..zone.len()).rfind(|n| text(&zone[..*n]) <= 500).unwrap();
        assert!(feed(Asked::Axfr, &limits, 100, &zone[..fits]).is_ok());
        let error = match feed(Asked::Axfr, &limits, 100, &zone[..fits + 1]) {
            Ok(_) => panic!("the text outgrew what was received"),
            Err(error) => error,
        };
        assert_eq!(
            error.to_string(),
            format!(
                "the transfer is too large: its text would reach {} bytes from 100 bytes \
                 received (at most 2 times as much, plus 300 bytes)",
                text(&zone[..fits + 1])
            )
        );
        // More received, more text: the whole zone fits.
        assert!(feed(Asked::Axfr, &limits, 1000, &zone).is_ok());
        // An IXFR's additions are text too; its deletions are not.
        let deletions: Vec<String> = [soa(8), soa(7)]
            .into_iter()
            .chain((0..20).map(|i| entry(&format!("n{i:02}"))))
            .chain([soa(8)])
            .collect();
        let ixfr = Asked::Ixfr { stored: 7 };
        assert!(feed(ixfr, &limits, 0, &deletions).is_ok());
        let additions: Vec<String> = deletions
            .iter()
            .cloned()
            .chain(zone[1..].iter().cloned())
            .collect();
        let error = feed(ixfr, &limits, 0, &additions).err().unwrap();
        assert_eq!(error.reason(), "too-large", "{error}");
    }

    #[test]
    fn changes_past_their_memory_are_left_for_the_whole_zone() {
        // Room for the first chunk of the diff's records, not for a second one.
        let limits = Limits {
            max_ixfr_memory: IXFR_BUFFERS + 300 * 1024,
            max_records: 100_000,
            ..Limits::default()
        };
        let long = vec!["x".repeat(60); 3].join(".");
        let changes: Vec<String> = [soa(8), soa(7)]
            .into_iter()
            .chain((0..2000).map(|i| entry(&format!("n{i}.{long}"))))
            .chain([soa(8), soa(8)])
            .collect();
        let ixfr = Asked::Ixfr { stored: 7 };
        let transfer = feed(ixfr, &limits, 0, &changes).unwrap();
        assert!(transfer.is_done(), "nothing more is taken");
        let records = transfer.records();
        assert!(records > 100 && records < 2000, "{records} records taken");
        assert!(matches!(
            transfer.finish().unwrap(),
            Received::OverBudget { budget } if budget == limits.max_ixfr_memory
        ));
        // Within the budget, the same changes are a diff.
        let roomy = Limits {
            max_ixfr_memory: IXFR_BUFFERS + (4 << 20),
            ..limits
        };
        let transfer = feed(ixfr, &roomy, 0, &changes).unwrap();
        let Received::Incremental(_, diff) = transfer.finish().unwrap() else {
            panic!("not incremental")
        };
        assert_eq!(diff.deleted_count(), 2000);
    }
}
