//! Copies into and out of memory that other threads, and peers, may access at the same time: a
//! registered [`HostBuffer`](crate::HostBuffer) is shared through `&self` (an `Arc` held by its
//! registration), so two threads may call `write_at` on it at once, or `read_at` during a
//! `write_at`. Plain `memcpy`s racing on the same bytes would be a data race, undefined behaviour
//! in Rust's memory model even where the bytes themselves do not matter. Here every access is an
//! atomic operation on the aligned 8-byte word holding the bytes, never a smaller one (atomic
//! accesses of different sizes racing on the same memory are not allowed either): whole words
//! are relaxed loads and stores, and a word only partly written is updated with a
//! compare-exchange, so bytes of the word that another thread writes at the same time are kept.
//! A peer's writes (cross-memory attach, a mapping, a received batch) come from outside this
//! process's Rust code; reads racing with them may see old or new bytes, as documented on the
//! buffer.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const WORD: usize = 8;

/// The word at `p` (8-aligned).
///
/// # Safety
/// `p` is 8-aligned and valid for 8 bytes of atomic access for the returned lifetime.
unsafe fn word<'a>(p: *mut u8) -> &'a AtomicU64 {
    // SAFETY: the caller's contract.
    unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }
}

/// The mask of bytes [from, to) of a word in memory order (native endianness).
fn mask(from: usize, to: usize) -> u64 {
    let mut b = [0u8; WORD];
    b[from..to].fill(0xff);
    u64::from_ne_bytes(b)
}

/// Copies `src` to `base + offset`.
///
/// # Safety
/// `base` is 8-aligned; every 8-byte word overlapping `[base + offset, + src.len())` lies in
/// memory valid for atomic access for the call, which Rust code only accesses through these
/// functions.
pub(crate) unsafe fn store(base: *mut u8, offset: usize, src: &[u8]) {
    let end = offset + src.len();
    let mut at = offset;
    while at < end {
        let w = at - at % WORD; // the word's offset
        let from = at - w;
        let to = (end - w).min(WORD);
        let n = to - from;
        // SAFETY: the word overlaps the range (caller's contract); w is a multiple of 8.
        let cell = unsafe { word(base.add(w)) };
        let s = &src[at - offset..at - offset + n];
        if n == WORD {
            cell.store(u64::from_ne_bytes(s.try_into().expect("8 bytes")), Relaxed);
        } else {
            let mut b = [0u8; WORD];
            b[from..to].copy_from_slice(s);
            let (m, v) = (mask(from, to), u64::from_ne_bytes(b));
            // Never fails: the closure always returns Some.
            let _ = cell.fetch_update(Relaxed, Relaxed, |old| Some((old & !m) | v));
        }
        at += n;
    }
}

/// Copies `dst.len()` bytes from `base + offset` into `dst`.
///
/// # Safety
/// As [`store`], for `[base + offset, + dst.len())`.
pub(crate) unsafe fn load(base: *const u8, offset: usize, dst: &mut [u8]) {
    let end = offset + dst.len();
    let mut at = offset;
    while at < end {
        let w = at - at % WORD;
        let from = at - w;
        let to = (end - w).min(WORD);
        // SAFETY: as in store; only loaded.
        let v = unsafe { word(base.cast_mut().add(w)) }
            .load(Relaxed)
            .to_ne_bytes();
        dst[at - offset..at - offset + (to - from)].copy_from_slice(&v[from..to]);
        at += to - from;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(align(8))]
    struct Words([u8; 64]);

    // Every offset and length in a 64-byte buffer against a plain copy.
    #[test]
    fn stores_and_loads_every_range_exactly() {
        for offset in 0..=40 {
            for len in 0..=(64 - offset) {
                let mut mem = Words([0xa5; 64]);
                let mut want = [0xa5u8; 64];
                let src: Vec<u8> = (0..len).map(|i| (i * 7 + offset) as u8).collect();
                want[offset..offset + len].copy_from_slice(&src);
                // SAFETY: mem is 8-aligned and 64 bytes, only accessed here.
                unsafe { store(mem.0.as_mut_ptr(), offset, &src) };
                assert_eq!(mem.0, want, "store at {offset} of {len}");
                let mut back = vec![0u8; len];
                // SAFETY: as above.
                unsafe { load(mem.0.as_ptr(), offset, &mut back) };
                assert_eq!(back, src, "load at {offset} of {len}");
            }
        }
    }
}
