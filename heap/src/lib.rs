//! The heap of a process made ready ahead of a burst of allocations on its main thread
//! (reading, validating and rendering a configuration of many megabytes), and given back to
//! the kernel once the burst's garbage is gone. Both tune glibc's allocator; with another C
//! library they do nothing. Beside the heap, the program's own text and read-only data: the
//! pages start-up mapped in (by the kernel's fault-around, 64 KiB at a time) are given back
//! too ([`release_unused_text`]), so a long-lived process keeps what it runs and reads.
//!
//! A crate of its own so that the configuration crate, which times its loads with it, and
//! the daemon share it without either depending on the process supervisor. The allocator's
//! calls are raw (`mallopt`, `malloc_trim`, `sbrk`, `madvise`): this crate allows `unsafe`,
//! each block with its reason.
#![allow(unsafe_code)]

/// Give the heap's free pages back to the kernel (glibc's `malloc_trim(0)`: the free top of
/// the heap, and the whole free pages inside it). A long-lived process calls it once its
/// start-up's temporary allocations are gone, so they stop counting as its memory; the pages
/// come back on demand. Nothing to do with another C library.
pub fn release_free_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks and trims the allocator's own free lists, under the
    // allocator's locks; it takes no pointer and has no precondition.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Unmap the pages of this program's text and read-only data (`r-xp` and `r--p` mappings of
/// `/proc/self/exe` holding no page of their own, `Anonymous: 0 kB` in `/proc/self/smaps`)
/// that start-up faulted in, and stop the kernel's readahead on them (`MADV_RANDOM`): from
/// then on only the pages the process runs or reads are mapped again, from the page cache.
/// The kernel's fault-around still maps the cached pages of the 64 KiB around each page
/// faulted in (Linux 6.18 does so despite `MADV_RANDOM`), so code run for the first time
/// after this costs up to 64 KiB a function. The file stays cached; nothing is read from
/// disk again unless the kernel dropped it. The read-only data the loader relocated (`RELRO`: written
/// once, then made read-only) holds pages of its own and is left alone. A no-op where
/// `/proc` cannot be read.
pub fn release_unused_text() {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return;
    };
    for (start, end) in text_ranges(&smaps, &exe) {
        // SAFETY: the range is a whole mapping of our executable: private, read-only, and
        // with no page of its own (no page of it was ever written, by the loader's
        // relocations or anyone: its pages are the file's, and the kernel refuses writes to
        // a running executable, ETXTBSY), so a page dropped here is faulted back from the
        // file with the same bytes when it is next run or read. Neither call touches any
        // other mapping.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_RANDOM);
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

/// The `(start, end)` of every `r-xp` and `r--p` mapping of `exe` with no anonymous page
/// (`Anonymous: 0 kB`) in a `/proc/PID/smaps` text; a mapping whose count is missing is left
/// out.
fn text_ranges(smaps: &str, exe: &std::path::Path) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    // The mapping being read, while it is one of ours.
    let mut current: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        if let Some(kib) = line.strip_prefix("Anonymous:") {
            let clean = kib.trim().trim_end_matches("kB").trim() == "0";
            if let (Some(range), true) = (current.take(), clean) {
                ranges.push(range);
            }
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        // A mapping's first line: `start-end perms offset dev inode [path]`.
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        let ours = fields
            .nth(3)
            .is_some_and(|p| std::path::Path::new(p) == exe);
        current =
            (ours && (perms == "r-xp" || perms == "r--p") && start < end).then_some((start, end));
    }
    ranges
}

/// Heap made ready ahead of a large burst of allocations on the main thread (see
/// [`prefault_heap`]); dropping it ends the burst.
#[must_use = "the burst ends when this is dropped"]
pub struct HeapPrefault {
    /// The thread faulting the heap's new pages in, when one runs.
    thread: Option<std::thread::JoinHandle<()>>,
    /// Whether glibc's thresholds were changed and are to be restored.
    tuned: bool,
}

/// The largest allocation glibc's heap serves at all (`DEFAULT_MMAP_THRESHOLD_MAX` on 64
/// bits); larger ones are always mappings of their own.
const HEAP_LARGEST_ALLOCATION: usize = 32 << 20;

/// The most heap [`prefault_heap`] makes ready, whatever it is asked: a guess must not take
/// a container's memory on its own.
const MAX_PREFAULT: usize = 256 << 20;

/// glibc's initial thresholds (`M_MMAP_THRESHOLD`, `M_TRIM_THRESHOLD`), restored after a burst.
const GLIBC_DEFAULT_THRESHOLD: i32 = 128 << 10;

/// Make `bytes` of heap (at most 256 MiB) ready for a burst of allocations the main thread is
/// about to make (reading, validating and rendering a configuration of many megabytes), on a
/// second thread while the burst runs: its first writes then find their pages present
/// instead of faulting each one in, page by page (zeroing them is most of that cost, and it
/// moves to the second core). Until the guard is dropped, allocations up to 32 MiB come from
/// the heap rather than from mappings of their own (those would fault page by page), and
/// free memory stays in it; dropping the guard waits for the thread and puts glibc's
/// thresholds back to their initial values; the caller gives the free pages back when its
/// burst's garbage is gone ([`release_free_heap`]).
///
/// Nothing is done off the main thread (other threads allocate from arenas of their own),
/// with another C library, or on kernels before 5.14 (no `MADV_POPULATE_WRITE`: the burst
/// only runs as it would have).
pub fn prefault_heap(bytes: usize) -> HeapPrefault {
    #[cfg_attr(not(target_env = "gnu"), allow(unused_mut))]
    let mut guard = HeapPrefault {
        thread: None,
        tuned: false,
    };
    let bytes = bytes.min(MAX_PREFAULT);
    #[cfg(target_env = "gnu")]
    if bytes > 0 && nix::unistd::gettid() == nix::unistd::getpid() {
        guard.tuned = true;
        // SAFETY: mallopt only sets the allocator's parameters, under its lock; sbrk(0) reads
        // the break without moving it; the chunks are the allocator's own, freed once each
        // (in reverse order they join the free top of the heap, which the raised trim
        // threshold keeps).
        let (before, after) = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, HEAP_LARGEST_ALLOCATION as i32);
            libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
            let before = libc::sbrk(0) as usize;
            let chunk = HEAP_LARGEST_ALLOCATION / 2;
            let chunks: Vec<*mut libc::c_void> = (0..bytes.div_ceil(chunk))
                .map(|_| libc::malloc(chunk))
                .collect();
            for c in chunks.into_iter().rev() {
                libc::free(c);
            }
            (before, libc::sbrk(0) as usize)
        };
        // When the heap could not grow in place, there is nothing to fault in.
        if after > before {
            guard.thread = std::thread::Builder::new()
                .name("heap-prefault".into())
                .spawn(move || {
                    // SAFETY: MADV_POPULATE_WRITE only makes page tables present, as a write
                    // fault would, without writing: what the main thread writes meanwhile
                    // keeps its contents. The range is the heap's growth, mapped read-write.
                    unsafe {
                        libc::madvise(
                            before as *mut libc::c_void,
                            after - before,
                            libc::MADV_POPULATE_WRITE,
                        );
                    }
                })
                .ok();
        }
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = bytes;
    guard
}

impl Drop for HeapPrefault {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if !self.tuned {
            return;
        }
        #[cfg(target_env = "gnu")]
        // SAFETY: as in `prefault_heap`: only the allocator's parameters are set.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, GLIBC_DEFAULT_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, GLIBC_DEFAULT_THRESHOLD);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heap_is_made_ready_only_on_the_main_thread() {
        // Tests run on threads of their own: a thread's allocations come from its own
        // arena, so nothing is tuned and no thread started.
        let guard = prefault_heap(64 << 20);
        assert!(guard.thread.is_none());
        assert!(!guard.tuned);
    }

    #[test]
    fn text_ranges_are_the_executables_own_unwritten_pages_only() {
        let mapping = |range: &str, perms: &str, path: &str, anonymous: &str| {
            format!("{range} {perms} 00000000 fd:01 42 {path}\nRss: 64 kB\nAnonymous: {anonymous} kB\nVmFlags: rd mr\n")
        };
        let exe = "/usr/sbin/knot-resolver";
        let smaps = [
            mapping("55d0a0000000-55d0a0100000", "r--p", exe, "0"),
            mapping("55d0a0100000-55d0a0900000", "r-xp", exe, "0"),
            // Relocated read-only data (RELRO) and the writable data.
            mapping("55d0a0900000-55d0a0980000", "r--p", exe, "512"),
            mapping("55d0a0980000-55d0a0a00000", "rw-p", exe, "0"),
            mapping(
                "7f0000000000-7f0000100000",
                "r-xp",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "0",
            ),
            mapping("7f0000200000-7f0000300000", "r-xp", "", "0"),
            // No count: left alone.
            "7f0000400000-7f0000500000 r--p 00000000 fd:01 42 /usr/sbin/knot-resolver\n".to_owned(),
        ]
        .concat();
        assert_eq!(
            text_ranges(&smaps, std::path::Path::new(exe)),
            [
                (0x55d0_a000_0000, 0x55d0_a010_0000),
                (0x55d0_a010_0000, 0x55d0_a090_0000)
            ]
        );
    }

    #[test]
    fn released_text_is_faulted_back_as_it_runs() {
        fn text_rss_kib() -> u64 {
            let exe = std::fs::read_link("/proc/self/exe").expect("exe");
            let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
            let mut ours = false;
            let mut kib = 0;
            for line in smaps.lines() {
                if line.contains('-') && line.split_whitespace().count() >= 5 {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    ours = fields.get(1) == Some(&"r-xp")
                        && fields.get(5).map(std::path::Path::new) == Some(exe.as_path());
                } else if let (true, Some(v)) = (ours, line.strip_prefix("Rss:")) {
                    kib += v
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .unwrap_or(0);
                }
            }
            kib
        }
        let before = text_rss_kib();
        release_unused_text();
        let after = text_rss_kib();
        assert!(
            after < before,
            "{after} KiB of text mapped after, {before} before"
        );
        // The program goes on running: its pages come back from the file.
        assert_eq!(format!("{}", 6 * 7), "42");
        assert!(text_rss_kib() > 0);
    }
}
