//! The process table on a link: sent in parts that fit what the link carries, and put
//! together again on the receiving side.

use std::io;
use std::sync::Arc;

use super::{Link, ToChild, MAX_TABLE_PROCESSES, TABLE_ENVELOPE, TABLE_PART};
use crate::snapshot::{ProcessSnapshot, Snapshot};

/// Send `table`: in one message when it fits in a part, else in parts of [`TABLE_PART`]
/// bytes, or of what the link carries where that is less (`net.core.wmem_max` set low).
pub(super) async fn send_table(link: &Link, table: &Arc<Snapshot>) -> io::Result<()> {
    let part = TABLE_PART.min(link.capacity().saturating_sub(TABLE_ENVELOPE));
    for msg in table_messages(table, part) {
        link.send(&msg, &[]).await?;
    }
    Ok(())
}

/// The messages that carry `table`: [`ToChild::SnapshotPart`]s of at most `part_bytes` bytes
/// of processes while the rest does not fit in one, then a [`ToChild::Snapshot`] of the rest
/// with the table's flags. A small table is one `Snapshot`, shared, not copied. A process
/// larger than `part_bytes` (none is: its free text is bounded) goes alone.
pub fn table_messages(table: &Arc<Snapshot>, part_bytes: usize) -> Vec<ToChild> {
    // The size of each process as JSON, and one byte for the comma that separates it.
    let sizes: Vec<usize> = table
        .processes
        .iter()
        .map(|p| serde_json::to_vec(p).map_or(part_bytes, |json| json.len() + 1))
        .collect();
    if sizes.iter().sum::<usize>() <= part_bytes {
        return vec![ToChild::Snapshot(table.clone())];
    }
    let mut messages = Vec::new();
    let mut part = Vec::new();
    let mut bytes = 0;
    for (process, size) in table.processes.iter().zip(sizes) {
        if bytes + size > part_bytes && !part.is_empty() {
            messages.push(ToChild::SnapshotPart(std::mem::take(&mut part)));
            bytes = 0;
        }
        part.push(process.clone());
        bytes += size;
    }
    messages.push(ToChild::Snapshot(Arc::new(Snapshot {
        processes: part,
        shutting_down: table.shutting_down,
        draining: table.draining,
    })));
    messages
}

/// A process table arriving in parts ([`ToChild::SnapshotPart`], then
/// [`ToChild::Snapshot`]), on the receiving side.
#[derive(Default)]
pub struct TableAssembly {
    /// The processes of the parts received so far.
    first: Vec<ProcessSnapshot>,
}

impl TableAssembly {
    /// Take a part; a table of more than [`MAX_TABLE_PROCESSES`] is refused.
    pub fn part(&mut self, processes: Vec<ProcessSnapshot>) -> io::Result<()> {
        if self.first.len() + processes.len() > MAX_TABLE_PROCESSES {
            return Err(io::Error::other(format!(
                "a process table of more than {MAX_TABLE_PROCESSES} processes"
            )));
        }
        self.first.extend(processes);
        Ok(())
    }

    /// The whole table, given its last message.
    pub fn complete(&mut self, last: Arc<Snapshot>) -> Arc<Snapshot> {
        if self.first.is_empty() {
            return last;
        }
        let mut processes = std::mem::take(&mut self.first);
        processes.extend(last.processes.iter().cloned());
        Arc::new(Snapshot {
            processes,
            shutting_down: last.shutting_down,
            draining: last.draining,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::remote::MAX_NAME;
    use crate::snapshot::ProcessState;
    use crate::spec::ExitStatus;
    use crate::text::{one_line, MAX_STATUS};

    /// A process whose every free-text field is as long as the supervisor keeps it, of the
    /// characters that cost the most JSON.
    fn widest_process(i: usize) -> ProcessSnapshot {
        let worst: String = "\"\\".repeat(MAX_STATUS);
        ProcessSnapshot {
            name: format!("{i:0>width$}", width = MAX_NAME),
            kind: "k".repeat(MAX_NAME),
            pid: Some(i32::MAX),
            state: ProcessState::Failed,
            since: Some(std::time::SystemTime::now()),
            ready_at: Some(std::time::SystemTime::now()),
            restarts: u32::MAX,
            last_exit: Some(ExitStatus::Code(255)),
            failure: Some("spawn failed: ".repeat(20)),
            status_text: Some(one_line(&worst, MAX_STATUS)),
            kill_reason: Some(one_line(&worst, MAX_STATUS)),
            takes_queries: Some(true),
            killed_pid: Some(i32::MAX),
        }
    }

    fn table(processes: usize) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            processes: (0..processes).map(widest_process).collect(),
            shutting_down: false,
            draining: true,
        })
    }

    /// Every message of `table` is within a part's bytes (plus its envelope), and the parts
    /// assemble into the table.
    fn check(table: &Arc<Snapshot>, expected_messages: usize) {
        let messages = table_messages(table, TABLE_PART);
        assert_eq!(messages.len(), expected_messages);
        let mut assembly = TableAssembly::default();
        let mut assembled = None;
        for (i, msg) in messages.into_iter().enumerate() {
            let json = serde_json::to_vec(&msg).expect("serialises");
            assert!(
                json.len() <= TABLE_PART + TABLE_ENVELOPE,
                "{} bytes",
                json.len()
            );
            // As the link carries it.
            match serde_json::from_slice::<ToChild>(&json).expect("parses") {
                ToChild::SnapshotPart(part) => {
                    assert!(i + 1 < expected_messages, "a part last");
                    assembly.part(part).expect("a part");
                }
                ToChild::Snapshot(last) => {
                    assert_eq!(i + 1, expected_messages, "the table's end first");
                    assembled = Some(assembly.complete(last));
                }
                other => panic!("not a table: {other:?}"),
            }
        }
        let assembled = assembled.expect("a whole table");
        assert_eq!(assembled.processes.len(), table.processes.len());
        assert_eq!(assembled.draining, table.draining);
        // Times travel as float seconds; everything else exactly.
        for (got, sent) in assembled.processes.iter().zip(&table.processes) {
            assert_eq!(got.name, sent.name);
            assert_eq!(got.status_text, sent.status_text);
            assert_eq!(got.kill_reason, sent.kill_reason);
        }
    }

    #[test]
    fn tables_of_any_size_go_in_parts_that_fit_the_link() {
        let widest = serde_json::to_vec(&widest_process(0)).expect("json").len();
        let per_part = TABLE_PART / (widest + 1);
        eprintln!("the widest process takes {widest} bytes: {per_part} to a part");
        assert!(per_part >= 16, "{widest} bytes");
        check(&table(0), 1);
        check(&table(1), 1);
        check(&table(per_part), 1);
        check(&table(per_part + 1), 2);
        check(&table(256), 256usize.div_ceil(per_part));
        check(&table(4096), 4096usize.div_ceil(per_part));
    }

    #[test]
    fn an_assembly_refuses_a_table_without_end() {
        let mut assembly = TableAssembly::default();
        let part: Vec<ProcessSnapshot> = (0..1000).map(widest_process).collect();
        for _ in 0..MAX_TABLE_PROCESSES / 1000 {
            assembly.part(part.clone()).expect("within bounds");
        }
        assert!(assembly.part(part).is_err());
    }
}
