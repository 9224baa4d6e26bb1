//! [`GenerationId`]: the number of a group's rebalance. Its integer is private: the
//! handlers convert at the wire, where -1 means "no generation" (a member not yet in
//! one, or a commit from outside the group), which the coordinator holds as `None`.

headway_base::id_type!(
    /// A group's generation: it starts at 0 and each completed rebalance (or a group
    /// emptied) moves it to the next.
    GenerationId(i32),
    none = -1
);

impl GenerationId {
    /// A new group's generation, before its first rebalance.
    pub const INITIAL: GenerationId = GenerationId(0);

    /// The generation after this one.
    pub const fn next(self) -> GenerationId {
        GenerationId(self.0 + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::GenerationId;

    #[test]
    fn minus_one_is_no_generation_only_on_the_wire() {
        assert_eq!(GenerationId::from_wire(-1), None);
        assert_eq!(GenerationId::from_wire(0), Some(GenerationId::INITIAL));
        assert_eq!(GenerationId::to_wire(None), -1);
        assert_eq!(GenerationId::to_wire(Some(GenerationId::new(3).next())), 4);
    }
}
