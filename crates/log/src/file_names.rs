//! The names of the files in a partition directory: a segment's files are
//! `<base offset, 20 digits>.<suffix>`, as Kafka names them, one suffix per kind.
//! Plain functions over strings, shared by the segments, recovery, the aborted-
//! transaction index and the cleaner's swaps.

pub(crate) const LOG_SUFFIX: &str = "log";
pub(crate) const INDEX_SUFFIX: &str = "index";
pub(crate) const TIME_INDEX_SUFFIX: &str = "timeindex";
/// An empty file next to a segment: the segment holds a damaged batch and the next
/// open must scan it in full (and truncate it there) before adopting it.
pub(crate) const REPAIR_SUFFIX: &str = "repair";

/// `<base offset, 20 digits>.<suffix>`, as Kafka names segment files.
pub(crate) fn file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}.{suffix}")
}

/// The aborted-transaction index of a segment (`crate::txn_index`).
pub(crate) const TXN_INDEX_SUFFIX: &str = "txnindex";

/// `<20 digits>.<suffix>` into the base offset and suffix.
pub(crate) fn parse_file_name(name: &str) -> Option<(i64, &str)> {
    let (stem, suffix) = name.split_once('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let base = stem.parse::<i64>().ok()?;
    (file_name(base, suffix) == name).then_some((base, suffix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_parse_only_in_kafka_form() {
        assert_eq!(
            parse_file_name("00000000000000000042.log"),
            Some((42, "log"))
        );
        assert_eq!(
            parse_file_name("00000000000000000042.timeindex"),
            Some((42, "timeindex"))
        );
        assert_eq!(parse_file_name("42.log"), None);
        assert_eq!(parse_file_name("0000000000000000004x.log"), None);
        assert_eq!(parse_file_name("99999999999999999999.log"), None);
        assert_eq!(parse_file_name(".clean_shutdown"), None);
    }
}
