//! Keyset paging: a list is read newest first in pages of at most `limit` rows, each
//! page naming where the next one starts.

/// The cursor of the page after `rows`, read with `limit`: the last row's key when the
/// page is full (more rows may follow), `None` when it is the last page.
pub fn next_cursor<T, K>(rows: &[T], limit: i64, key: impl FnOnce(&T) -> K) -> Option<K> {
    (rows.len() as i64 == limit)
        .then(|| rows.last().map(key))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::next_cursor;

    #[test]
    fn only_a_full_page_names_the_next() {
        let id = |r: &i64| *r;
        assert_eq!(next_cursor(&[9, 8, 7], 3, id), Some(7));
        assert_eq!(next_cursor(&[9, 8], 3, id), None);
        assert_eq!(next_cursor::<i64, i64>(&[], 3, id), None);
    }
}
