//! Transparent huge pages for the large shards' memory: a graph walk reads a few hundred
//! bytes at random from gigabytes (the graph's nodes and vectors, the mirror's vectors),
//! so on 4 KiB pages nearly every read misses the TLB and, past a few million rows, the
//! page tables themselves miss the caches. 2 MiB pages cut both.
//!
//! Debian and most distributions ship transparent huge pages in `madvise` mode, so a
//! process gets them only where it asks. usearch maps its graph's arenas itself, out of
//! reach, so this asks for the process's large anonymous private mappings as a whole (read
//! from `/proc/self/maps`): `MADV_HUGEPAGE` makes the pages faulted in from then on huge,
//! and, after a graph is read from its file (every page already touched), `MADV_COLLAPSE`
//! turns what is there into huge pages at once. Only mappings of at least
//! [`MIN_REGION`] are asked for (the graph's, the mirror's; not thread stacks), and only
//! the kernel's 2 MiB ranges already touched are ever filled, so a mapping's unused tail
//! takes no memory. Measured at 1M rows (docs/scaling.md, "Huge pages"): vector search
//! p50 10.6 → 7.7 ms.
//!
//! Every call is advice: on a kernel without huge pages, with them turned off, or on
//! another system, nothing happens and nothing fails.

/// The smallest mapping asked for huge pages: larger than a thread's stack and than
/// usearch's first arenas, smaller than a graph of 100,000 rows.
#[cfg(target_os = "linux")]
const MIN_REGION: usize = 32 << 20;

/// Asks for huge pages for the process's large anonymous mappings, and, with `collapse`,
/// for what they hold already to be made into huge pages now (seconds for gigabytes:
/// after a graph's load, not on a search's path). Returns how many mappings were asked
/// for.
pub(crate) fn advise(collapse: bool) -> usize {
    #[cfg(target_os = "linux")]
    {
        let maps = match std::fs::read_to_string("/proc/self/maps") {
            Ok(maps) => maps,
            Err(e) => {
                tracing::debug!("huge pages: reading /proc/self/maps: {e}");
                return 0;
            }
        };
        let regions = anonymous_regions(&maps, MIN_REGION);
        for &(start, end) in &regions {
            madvise(start, end - start, libc::MADV_HUGEPAGE);
            if collapse {
                madvise(start, end - start, libc::MADV_COLLAPSE);
            }
        }
        regions.len()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = collapse;
        0
    }
}

/// The `[start, end)` of each private, read-write, anonymous mapping in `maps` (the text
/// of `/proc/<pid>/maps`) of at least `min` bytes. Named mappings (`[heap]`, `[stack]`,
/// files) are left out.
#[cfg(target_os = "linux")]
fn anonymous_regions(maps: &str, min: usize) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_ascii_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            let _offset = fields.next()?;
            let _device = fields.next()?;
            let inode = fields.next()?;
            if perms != "rw-p" || inode != "0" || fields.next().is_some() {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (end.checked_sub(start)? >= min).then_some((start, end))
        })
        .collect()
}

/// `madvise(2)` on `len` bytes at `start`; a refusal (no huge pages here, no memory to
/// collapse into, a mapping gone since it was read) is logged and otherwise ignored.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn madvise(start: usize, len: usize, advice: libc::c_int) {
    // SAFETY: MADV_HUGEPAGE and MADV_COLLAPSE change how pages are backed, never what
    // they hold: the kernel copies a range's contents into the huge page it makes, under
    // its own locks, while other threads read and write it. A range unmapped since
    // /proc/self/maps was read (or mapped anew by someone else) only makes the call fail
    // or advise that mapping instead, which is harmless for the same reason.
    let done = unsafe { libc::madvise(start as *mut libc::c_void, len, advice) };
    if done != 0 {
        tracing::debug!(
            "huge pages: madvise({advice}) on {len} bytes: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_large_private_anonymous_mappings_are_picked() {
        let maps = "\
55d0c0000000-55d0c4000000 rw-p 00000000 00:00 0 
7f0000000000-7f0008000000 rw-p 00000000 00:00 0
7f0008000000-7f0008100000 rw-p 00000000 00:00 0
7f0010000000-7f0018000000 r--p 00000000 fd:01 1234 /usr/lib/x.so
7f0020000000-7f0028000000 rw-s 00000000 00:01 99 /dev/zero (deleted)
7f0030000000-7f0038000000 ---p 00000000 00:00 0
7ffc00000000-7ffc08000000 rw-p 00000000 00:00 0 [stack]
55d0d0000000-55d0e0000000 rw-p 00000000 00:00 0 [heap]
garbage line
";
        assert_eq!(
            anonymous_regions(maps, 32 << 20),
            vec![
                (0x55d0c0000000, 0x55d0c4000000),
                (0x7f0000000000, 0x7f0008000000)
            ]
        );
    }

    /// The kiloBytes of huge pages backing the mapping that holds `at`, from
    /// `/proc/self/smaps`.
    fn huge_kb_at(at: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((s, e)) = range.split_once('-')
                && let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16))
            {
                inside = s <= at && at < e;
            } else if inside && let Some(kb) = line.strip_prefix("AnonHugePages:") {
                return kb.trim().trim_end_matches(" kB").trim().parse().unwrap();
            }
        }
        0
    }

    #[test]
    fn a_large_allocation_already_touched_is_collapsed_into_huge_pages() {
        let enabled = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok();
        // 64 MiB, every page touched, as a graph read from its file is.
        let mut block = vec![1u8; 64 << 20];
        block[12345] = 7;
        let at = block.as_ptr() as usize + (32 << 20);
        let before = huge_kb_at(at);
        assert!(advise(true) >= 1, "the 64 MiB block was not picked");
        assert_eq!(block[12345], 7, "advice changed what memory holds");
        assert!(
            block
                .iter()
                .enumerate()
                .all(|(i, &b)| b == if i == 12345 { 7 } else { 1 })
        );
        match enabled.as_deref() {
            // Kernels with huge pages collapse on request whatever the mode, unless off.
            Some(mode) if !mode.contains("[never]") => {
                // A collapse is refused for now (EAGAIN) while the kernel finds no free
                // 2 MiB page (memory fragmented by a busy page cache): asked again, as
                // the kernel's own collapsing thread would, after it compacts.
                let mut after = huge_kb_at(at);
                for _ in 0..10 {
                    if after >= 32 << 10 {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    advise(true);
                    after = huge_kb_at(at);
                }
                assert!(
                    after > before && after >= 32 << 10,
                    "{after} kB of huge pages after the collapse ({before} before; mode {mode})"
                );
            }
            // Without them the advice is refused and nothing fails.
            _ => eprintln!("transparent huge pages are off here: only checked that nothing fails"),
        }
    }
}
