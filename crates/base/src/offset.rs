//! [`Offset`]: a position in a partition's sequence of records. Its integer is private:
//! it is built from a raw offset with [`Offset::new`] where one comes from the wire or
//! the disk, read back with [`Offset::value`] where one goes out, and moved with the
//! named steps below in between.

/// A position in a partition's sequence of records.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(i64);

impl Offset {
    /// The first offset of every partition.
    pub const ZERO: Offset = Offset(0);

    /// The offset a raw integer names (from the wire, the disk or a test).
    pub const fn new(value: i64) -> Offset {
        Offset(value)
    }

    /// The raw integer, for the wire, the disk and arithmetic on counts.
    pub const fn value(self) -> i64 {
        self.0
    }

    /// The offset right after this one.
    pub const fn next(self) -> Offset {
        Offset(self.0 + 1)
    }

    /// The offset `count` records after this one (before it, for a negative count).
    pub const fn plus(self, count: i64) -> Offset {
        Offset(self.0 + count)
    }
}

impl std::fmt::Display for Offset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::Offset;

    #[test]
    fn named_steps_move_by_records() {
        let offset = Offset::new(41);
        assert_eq!(offset.next(), Offset::new(42));
        assert_eq!(offset.plus(9).value(), 50);
        assert_eq!(offset.plus(-41), Offset::ZERO);
        assert_eq!(offset.to_string(), "41");
    }
}
