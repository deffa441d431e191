//! Zone transfers from a primary: the SOA query, IXFR (RFC 1995) and AXFR, over TCP, each
//! message TSIG-verified as a sequence (RFC 8945 §5.3.1: unsigned intermediate messages
//! allowed up to 99 in a row, the last one signed) and every bound of [`Limits`] enforced.
//!
//! The SOA query goes over TCP like the transfers: one kind of socket, no spoofable UDP
//! answer deciding whether to transfer, and no truncation to retry.

use std::hash::BuildHasher;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use domain::base::iana::{Opcode, Rcode, Rtype};
use domain::base::name::{ParsedName, ToName};
use domain::base::{Message, MessageBuilder, Name, Serial, Ttl};
use domain::rdata::tsig::Time48;
use domain::rdata::{Soa, ZoneRecordData};
use domain::tsig;

use super::status::Wanted;
use super::transfer::{Asked, Received, Transfer};
use super::wire::{Budget, Connection};
use super::zonefile::{self, Layout, StoredSoa, TempFile};
use super::{
    serial_order, Limits, Primary, SerialOrder, SoaTimers, TransferError, TransferKind,
    TransferReport, TsigKey,
};

/// What one refresh works on.
struct Refresh<'a> {
    /// The zone.
    zone: Name<Vec<u8>>,
    /// Where it comes from.
    primary: &'a Primary,
    /// The key every message is signed with.
    key: Option<&'a TsigKey>,
    /// The stored file.
    file: &'a Path,
    /// What the stored file holds.
    stored: Option<StoredSoa>,
}

/// What an answer to a transfer query came to.
enum Outcome {
    /// The zone was brought up to date.
    Done(Done),
    /// An IXFR cannot bring it (the primary offers none, or the changes need more memory
    /// than they may hold): the zone is to be transferred whole; why, for the log.
    WholeZoneNeeded(String),
}

/// What a transfer did.
struct Done {
    /// Its kind.
    kind: TransferKind,
    /// The serial now stored.
    serial: u32,
    /// The timers now stored.
    timers: SoaTimers,
    /// Records received.
    records: u64,
}

/// Bring `file` up to date from `primary`: SOA query first (UpToDate when not newer; a
/// serial going back is an error), IXFR from the stored serial (RFC 1995), AXFR when there
/// is no stored file, the primary offers no IXFR, or the IXFR's changes need more memory
/// than `limits` gives them. The result is written atomically (a fresh temporary file in
/// the same directory, fsync, rename). Streaming: memory is bounded by the IXFR diff, never
/// by the zone's size; the text written by what was received. Every bound of `limits` is
/// enforced; on any error the stored file is untouched and the temporary file removed.
pub async fn refresh(
    zone: &str,
    primary: &Primary,
    key: Option<&TsigKey>,
    file: &Path,
    limits: &Limits,
) -> Result<TransferReport, TransferError> {
    refresh_as(Wanted::Changes, zone, primary, key, file, limits).await
}

/// [`refresh`], transferring the whole zone (AXFR) whatever the stored file holds: for a
/// stored file kresd cannot load. The SOA query still comes first.
pub async fn refresh_whole(
    zone: &str,
    primary: &Primary,
    key: Option<&TsigKey>,
    file: &Path,
    limits: &Limits,
) -> Result<TransferReport, TransferError> {
    refresh_as(Wanted::WholeZone, zone, primary, key, file, limits).await
}

async fn refresh_as(
    wanted: Wanted,
    zone: &str,
    primary: &Primary,
    key: Option<&TsigKey>,
    file: &Path,
    limits: &Limits,
) -> Result<TransferReport, TransferError> {
    let started = std::time::Instant::now();
    let zone = super::zone_name(zone)
        .ok()
        .and_then(|z| Name::<Vec<u8>>::from_str(&z).ok())
        .ok_or_else(|| TransferError::Malformed(format!("'{zone}' is not a zone name")))?;
    zonefile::remove_leftovers(file).await;
    let refresh = Refresh {
        zone,
        primary,
        key,
        file,
        stored: match wanted {
            Wanted::Changes => zonefile::stored_soa(file),
            Wanted::WholeZone => None,
        },
    };
    let mut budget = Budget::new(limits);
    let done = refresh.run(&mut budget).await?;
    Ok(TransferReport {
        kind: done.kind,
        serial: done.serial,
        bytes: budget.bytes(),
        records: done.records,
        duration: started.elapsed(),
        timers: done.timers,
    })
}

impl Refresh<'_> {
    /// The SOA query, then the transfer it calls for.
    async fn run(&self, budget: &mut Budget) -> Result<Done, TransferError> {
        let serial = self.query_soa(budget).await?;
        let Some(stored) = self.stored else {
            return self.axfr(budget).await;
        };
        match serial_order(serial, stored.serial) {
            SerialOrder::Same => {
                return Ok(Done {
                    kind: TransferKind::UpToDate,
                    serial,
                    timers: stored.timers,
                    records: 0,
                })
            }
            SerialOrder::Older => {
                return Err(TransferError::SerialBackwards {
                    stored: stored.serial,
                    primary: serial,
                })
            }
            SerialOrder::Newer => {}
        }
        if stored.layout == Layout::OneRecordPerLine {
            let asked = Asked::Ixfr {
                stored: stored.serial,
            };
            match self.transfer(asked, budget).await {
                Ok(Outcome::Done(done)) => return Ok(done),
                Ok(Outcome::WholeZoneNeeded(why)) => {
                    tracing::info!("rpz: IXFR of {} {why}, AXFR instead", self.zone_text())
                }
                Err(e @ (TransferError::Refused { .. } | TransferError::Diverged(_))) => {
                    tracing::info!(
                        "rpz: IXFR of {} not taken ({e}), AXFR instead",
                        self.zone_text()
                    );
                }
                Err(e) => return Err(e),
            }
        }
        self.axfr(budget).await
    }

    /// The whole zone (an AXFR's answer is never taken for a condensed one).
    async fn axfr(&self, budget: &mut Budget) -> Result<Done, TransferError> {
        match self.transfer(Asked::Axfr, budget).await? {
            Outcome::Done(done) => Ok(done),
            Outcome::WholeZoneNeeded(why) => {
                Err(TransferError::Malformed(format!("an AXFR {why}")))
            }
        }
    }

    fn zone_text(&self) -> String {
        self.zone.fmt_with_dot().to_string()
    }

    /// The primary's serial of the zone.
    async fn query_soa(&self, budget: &mut Budget) -> Result<u32, TransferError> {
        let mut exchange = Exchange::start(self, Rtype::SOA, None, budget).await?;
        let message = exchange.next(budget).await?;
        exchange.signing.done()?;
        let malformed = |e: domain::base::wire::ParseError| TransferError::Malformed(e.to_string());
        for record in message.answer().map_err(malformed)? {
            let record = record.map_err(malformed)?;
            let Some(soa) = record
                .to_record::<Soa<ParsedName<_>>>()
                .map_err(malformed)?
            else {
                continue;
            };
            if !soa.owner().name_eq(&self.zone) {
                return Err(TransferError::WrongZone {
                    expected: self.zone_text(),
                    got: soa.owner().fmt_with_dot().to_string(),
                });
            }
            return Ok(soa.data().serial().into_int());
        }
        Err(TransferError::Malformed(
            "the answer to the SOA query has no SOA record".to_owned(),
        ))
    }

    /// Ask `asked`, read the answer to its end and write the file it makes; the whole zone
    /// is needed when an IXFR is answered with the new SOA alone (RFC 1995 §4) or its
    /// changes outgrow their memory.
    async fn transfer(&self, asked: Asked, budget: &mut Budget) -> Result<Outcome, TransferError> {
        let ixfr_from = match asked {
            Asked::Axfr => None,
            Asked::Ixfr { stored } => Some(stored),
        };
        let qtype = ixfr_from.map_or(Rtype::AXFR, |_| Rtype::IXFR);
        let mut exchange = Exchange::start(self, qtype, ixfr_from, budget).await?;
        let mut transfer = Transfer::new(self.zone.clone(), asked, budget.limits());
        let mut out: Option<TempFile> = None;
        let mut first = true;
        while !transfer.is_done() {
            let message = exchange.next(budget).await?;
            feed(&mut transfer, &message)?;
            if std::mem::take(&mut first) && transfer.is_condensed() {
                return Ok(Outcome::WholeZoneNeeded(
                    "answered with its SOA alone".to_owned(),
                ));
            }
            let lines = transfer.take_lines();
            if !lines.is_empty() {
                let file = match out.as_mut() {
                    Some(file) => file,
                    None => out.insert(TempFile::create(self.file).await?),
                };
                file.write(&lines).await?;
            }
        }
        let records = transfer.records();
        let received = transfer.finish()?;
        if !matches!(received, Received::OverBudget { .. }) {
            // An answer left over budget is not read to its end (its connection is dropped),
            // and nothing of it is kept; any other ends with a signed message.
            exchange.signing.done()?;
        }
        let done = |kind, serial, timers| {
            Outcome::Done(Done {
                kind,
                serial,
                timers,
                records,
            })
        };
        match received {
            Received::UpToDate { serial } => {
                let timers = self.stored.map(|s| s.timers).unwrap_or(ZERO_TIMERS);
                Ok(done(TransferKind::UpToDate, serial, timers))
            }
            Received::Full(version) => {
                if let Some(stored) = self.stored {
                    if serial_order(version.serial, stored.serial) == SerialOrder::Older {
                        return Err(TransferError::SerialBackwards {
                            stored: stored.serial,
                            primary: version.serial,
                        });
                    }
                }
                let out = match out {
                    Some(out) => out,
                    None => return Err(TransferError::Malformed("an empty transfer".to_owned())),
                };
                out.commit().await?;
                Ok(done(TransferKind::Axfr, version.serial, version.timers))
            }
            Received::Incremental(version, mut diff) => {
                let mut out = TempFile::create(self.file).await?;
                zonefile::apply(self.file, &mut diff, &version.soa_line, &mut out).await?;
                out.commit().await?;
                Ok(done(TransferKind::Ixfr, version.serial, version.timers))
            }
            Received::OverBudget { budget } => Ok(Outcome::WholeZoneNeeded(format!(
                "needs more than {budget} bytes of memory for its changes"
            ))),
        }
    }
}

/// Timers of a zone nothing is known of (never reached: an IXFR needs a stored file).
const ZERO_TIMERS: SoaTimers = SoaTimers {
    refresh: std::time::Duration::ZERO,
    retry: std::time::Duration::ZERO,
    expire: std::time::Duration::ZERO,
};

/// Give the records of `message`'s answer section to `transfer`.
fn feed(transfer: &mut Transfer, message: &Message<Vec<u8>>) -> Result<(), TransferError> {
    // With its length prefix, as the size bound counts it.
    transfer.received(message.as_slice().len() + 2);
    let malformed = |e: domain::base::wire::ParseError| TransferError::Malformed(e.to_string());
    for record in message.answer().map_err(malformed)? {
        let record = record.map_err(malformed)?;
        let parsed = record
            .to_record::<ZoneRecordData<_, ParsedName<_>>>()
            .map_err(malformed)?;
        match parsed {
            Some(record) => transfer.on_record(&record)?,
            None => {
                return Err(TransferError::Malformed(format!(
                    "a {} record in the transfer",
                    record.rtype()
                )))
            }
        }
    }
    Ok(())
}

/// One query to the primary and the messages answering it.
struct Exchange {
    /// The connection.
    connection: Connection,
    /// The query's id, which every answer carries.
    id: u16,
    /// The query's type.
    qtype: Rtype,
    /// The zone asked for.
    zone: Name<Vec<u8>>,
    /// Whether the next answer is the first one.
    first: bool,
    /// The TSIG state of the answers.
    signing: Signing,
}

impl Exchange {
    /// Connect and send the query for `qtype` (an IXFR from `ixfr_from`).
    async fn start(
        refresh: &Refresh<'_>,
        qtype: Rtype,
        ixfr_from: Option<u32>,
        budget: &Budget,
    ) -> Result<Exchange, TransferError> {
        let id = random_id();
        let (query, signing) = query(&refresh.zone, id, qtype, ixfr_from, refresh.key)?;
        let mut connection = Connection::open(refresh.primary.addr, budget).await?;
        connection.send(&query, budget).await?;
        Ok(Exchange {
            connection,
            id,
            qtype,
            zone: refresh.zone.clone(),
            first: true,
            signing,
        })
    }

    /// The next answer, its signature verified and its header checked.
    async fn next(&mut self, budget: &mut Budget) -> Result<Message<Vec<u8>>, TransferError> {
        let mut message = self.connection.receive(budget).await?;
        let header = message.header();
        if header.id() != self.id || !header.qr() || header.opcode() != Opcode::QUERY {
            return Err(TransferError::Malformed(
                "a message that answers no query of ours".to_owned(),
            ));
        }
        let rcode = header.rcode();
        self.signing.verify(&mut message, rcode)?;
        if rcode != Rcode::NOERROR {
            return Err(TransferError::Refused {
                query: query_name(self.qtype),
                rcode: rcode.to_string(),
            });
        }
        let questions = message.header_counts().qdcount();
        if self.first || questions > 0 {
            let question = message.sole_question().map_err(|_| {
                TransferError::Malformed("the answer does not repeat the question".to_owned())
            })?;
            if question.qtype() != self.qtype || !question.qname().name_eq(&self.zone) {
                return Err(TransferError::Malformed(format!(
                    "the answer is to the question {} {}",
                    question.qname(),
                    question.qtype()
                )));
            }
        }
        self.first = false;
        Ok(message)
    }
}

fn query_name(qtype: Rtype) -> &'static str {
    match qtype {
        Rtype::AXFR => "AXFR",
        Rtype::IXFR => "IXFR",
        _ => "SOA",
    }
}

/// A query id nobody can guess in advance (the hasher's keys are random per process).
fn random_id() -> u16 {
    let state = std::collections::hash_map::RandomState::new();
    state.hash_one(std::time::SystemTime::now()) as u16
}

/// The query for `qtype` of `zone` (an IXFR carries the stored SOA), signed with `key`.
fn query(
    zone: &Name<Vec<u8>>,
    id: u16,
    qtype: Rtype,
    ixfr_from: Option<u32>,
    key: Option<&TsigKey>,
) -> Result<(Vec<u8>, Signing), TransferError> {
    let too_large = |_| TransferError::Malformed("the query does not fit a message".to_owned());
    let mut builder = MessageBuilder::new_vec();
    builder.header_mut().set_id(id);
    let mut question = builder.question();
    question.push((zone, qtype)).map_err(too_large)?;
    let mut authority = question.authority();
    if let Some(serial) = ixfr_from {
        // RFC 1995 §3: the secondary's SOA; primaries read its serial only.
        let root = Name::root_vec();
        let soa = Soa::new(
            root.clone(),
            root,
            Serial(serial),
            Ttl::ZERO,
            Ttl::ZERO,
            Ttl::ZERO,
            Ttl::ZERO,
        );
        authority.push((zone, Ttl::ZERO, soa)).map_err(too_large)?;
    }
    let mut additional = authority.additional();
    let signing = match key {
        Some(key) => Signing::Signed(Box::new(
            tsig::ClientSequence::request(key.inner(), &mut additional, Time48::now())
                .map_err(too_large)?,
        )),
        None => Signing::Unsigned,
    };
    Ok((additional.finish(), signing))
}

/// The TSIG state of a query's answers.
enum Signing {
    /// No key: answers are taken as they come.
    Unsigned,
    /// Every answer is verified as part of the sequence.
    Signed(Box<tsig::ClientSequence<Arc<tsig::Key>>>),
}

impl Signing {
    /// Verify `message` (and take its TSIG record out); `rcode` says what it answers.
    fn verify(
        &mut self,
        message: &mut Message<Vec<u8>>,
        rcode: Rcode,
    ) -> Result<(), TransferError> {
        let Signing::Signed(sequence) = self else {
            return Ok(());
        };
        sequence
            .answer(message, Time48::now())
            .map_err(|e| TransferError::Tsig(format!("{e} (the primary answered {rcode})")))
    }

    /// Check that the last answer was signed.
    fn done(&mut self) -> Result<(), TransferError> {
        match std::mem::replace(self, Signing::Unsigned) {
            Signing::Unsigned => Ok(()),
            Signing::Signed(sequence) => sequence
                .done()
                .map_err(|_| TransferError::Tsig("the last message is not signed".to_owned())),
        }
    }
}
