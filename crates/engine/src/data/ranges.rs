//! Byte ranges `[start, end)` of files or of disk space, as the data
//! paths gather them (data of a file for SEEK_DATA, extents whose
//! checksums to log, ranges a send compares).

/// `ranges` in order with overlapping and touching ones joined and empty
/// ones left out.
pub fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (s, e) in ranges {
        if s >= e {
            continue;
        }
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::merged;

    #[test]
    fn joins_overlapping_and_touching_ranges() {
        let got = merged(vec![(10, 20), (0, 5), (5, 8), (15, 30), (40, 40), (35, 36)]);
        assert_eq!(got, vec![(0, 8), (10, 30), (35, 36)]);
    }
}
