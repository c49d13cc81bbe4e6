//! How often each value occurs, the most frequent first: what `dmem words` shows.

/// (values, their counts, number of values, distinct values): the `limit` most frequent
/// values (all for 0), most frequent first, ties by value.
pub fn histogram(mut values: Vec<u64>, limit: usize) -> (Vec<(u64, u64)>, u64, usize) {
    let total = values.len() as u64;
    values.sort_unstable();
    let mut counts: Vec<(u64, u64)> = Vec::new();
    for v in values {
        match counts.last_mut() {
            Some((last, n)) if *last == v => *n += 1,
            _ => counts.push((v, 1)),
        }
    }
    let distinct = counts.len();
    counts.sort_by(|a, b| (b.1, a.0).cmp(&(a.1, b.0)));
    if limit > 0 {
        counts.truncate(limit);
    }
    (counts, total, distinct)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_keeps_the_most_frequent_and_breaks_ties_by_value() {
        let (top, total, distinct) = histogram(vec![5, 3, 5, 7, 3, 9, 5], 2);
        assert_eq!((top, total, distinct), (vec![(5, 3), (3, 2)], 7, 4));
        let (all, _, _) = histogram(vec![2, 1], 0);
        assert_eq!(all, vec![(1, 1), (2, 1)]);
    }
}
