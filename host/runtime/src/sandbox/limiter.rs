//! The per-call resource limiter: one running total of linear memory and table slots
//! held to the grant's memory ceiling, and bounds on how many instances, tables and
//! memories one call's store may create.
//!
//! # Guarantees
//! - Every byte of linear memory and every table slot a store creates or grows is
//!   asked for here first, at creation (from zero) as at growth, and the sum of both
//!   never exceeds the ceiling: a refused request is a refused growth (`memory.grow`
//!   and `table.grow` return -1) or a failed instantiation, and it marks the ceiling
//!   as hit.
//! - The peak is the true one: the highest total of memories and tables the store held.
//! - A store holds at most [`MAX_INSTANCES`] core instances, [`MAX_TABLES`] tables and
//!   [`MAX_MEMORIES`] memories. wasmtime refuses the instantiation past them. The
//!   instance pool's per-component bounds are the same numbers.
//!
//! # Non-guarantees
//! - A table slot is charged [`TABLE_SLOT_BYTES`], the size of a `funcref` slot,
//!   whatever the table's element type: wasmtime does not say the type to a limiter.
//!   An `externref` slot is half that, so such tables are over-counted, never under.
//!   Continuation tables (16 bytes a slot) need stack switching, which this engine
//!   leaves off.
//! - Host memory that is not a memory or a table is not counted: an instance's own
//!   context (its size follows the module's declarations), compiled code, the WASI
//!   resource table. The instance bound is what keeps the first of these in proportion.
//!
//! # Limits
//! - [`MAX_INSTANCES`] (32) core instances, [`MAX_TABLES`] (32) tables and
//!   [`MAX_MEMORIES`] (4) memories per call. A Rust wasip2 command uses a handful of
//!   instances and one memory.

use wasmtime::ResourceLimiter;

/// Core instances one call may create.
pub const MAX_INSTANCES: usize = 32;
/// Tables one call may create.
pub const MAX_TABLES: usize = 32;
/// Linear memories one call may create.
pub const MAX_MEMORIES: usize = 4;
/// Bytes charged per table slot: a `funcref` slot is one pointer, the largest element
/// this engine's features allow (`wasmtime::vm::table`'s `FuncTableElem`).
pub const TABLE_SLOT_BYTES: usize = size_of::<usize>();

/// The memory ceiling of one call, over linear memories and tables together.
#[derive(Debug)]
pub(super) struct Ceiling {
    limit: usize,
    used: usize,
    peak: usize,
    hit: bool,
}

impl Ceiling {
    /// A ceiling of `limit` bytes, nothing used yet.
    pub(super) fn new(limit: usize) -> Ceiling {
        Ceiling {
            limit,
            used: 0,
            peak: 0,
            hit: false,
        }
    }

    /// The most the call held at once, in bytes.
    pub(super) fn peak(&self) -> usize {
        self.peak
    }

    /// Whether a request was refused for being over the ceiling.
    pub(super) fn hit(&self) -> bool {
        self.hit
    }

    /// One memory or table going from `current` to `desired` bytes: allowed if the
    /// new total fits. `current` is already in the total (every memory and table is
    /// created through here, from zero).
    fn grow(&mut self, current: usize, desired: usize) -> bool {
        let total = self.used.saturating_sub(current).saturating_add(desired);
        if total > self.limit {
            self.hit = true;
            return false;
        }
        self.used = total;
        self.peak = self.peak.max(total);
        true
    }
}

impl ResourceLimiter for Ceiling {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(self.grow(current, desired))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // `desired` is usize::MAX when a declared minimum does not fit the host:
        // saturating, it is simply over the ceiling.
        Ok(self.grow(
            current.saturating_mul(TABLE_SLOT_BYTES),
            desired.saturating_mul(TABLE_SLOT_BYTES),
        ))
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memories_and_tables_share_one_total() {
        let mut c = Ceiling::new(1 << 20);
        assert!(c.memory_growing(0, 512 << 10, None).unwrap());
        // 64 Ki slots are 512 KiB: exactly at the ceiling with the memory.
        assert!(c.table_growing(0, 64 << 10, None).unwrap());
        assert_eq!(c.peak(), 1 << 20);
        assert!(!c.hit());
        // One more slot, or one more byte of memory, is over.
        assert!(!c.table_growing(64 << 10, (64 << 10) + 1, None).unwrap());
        assert!(c.hit());
        assert!(!c.memory_growing(512 << 10, (512 << 10) + 1, None).unwrap());
        assert_eq!(c.peak(), 1 << 20);
    }

    #[test]
    fn growth_replaces_the_current_size_rather_than_adding_to_it() {
        let mut c = Ceiling::new(100 * TABLE_SLOT_BYTES);
        assert!(c.table_growing(0, 40, None).unwrap());
        assert!(c.table_growing(40, 100, None).unwrap());
        assert_eq!(c.peak(), 100 * TABLE_SLOT_BYTES);
        assert!(!c.hit());
    }

    #[test]
    fn a_minimum_too_large_for_the_host_is_refused_not_wrapped() {
        let mut c = Ceiling::new(usize::MAX - 1);
        assert!(!c.table_growing(0, usize::MAX, None).unwrap());
        assert!(!c.memory_growing(0, usize::MAX, None).unwrap());
        assert!(c.hit());
        assert_eq!(c.peak(), 0);
    }
}
