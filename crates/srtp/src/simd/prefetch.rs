//! Cache hints for the batch engines: a batch names its packets' contexts before their crypto
//! runs, so an engine can start loading the next packets' streams and keys while it works on
//! the current ones (a serial caller, one packet at a time, cannot).

/// Asks the CPU to start loading the cache lines that `len` bytes from `p` touch (at most
/// `max_lines` lines, from the first). A hint: it never faults and changes nothing.
#[inline(always)]
pub fn prefetch_bytes(p: *const u8, len: usize, max_lines: usize) {
    if len == 0 {
        return;
    }
    let skew = p as usize % 64;
    let lines = (skew + len).div_ceil(64).min(max_lines);
    let first = p.wrapping_sub(skew);
    for i in 0..lines {
        line(first.wrapping_add(i * 64));
    }
}

/// One cache line.
#[inline(always)]
pub fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: a prefetch is a hint: it reads nothing into the program and never faults,
        // whatever the address.
        #[allow(unsafe_code)]
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The lines of a value.
#[inline(always)]
pub fn value<T>(v: &T, max_lines: usize) {
    prefetch_bytes((v as *const T).cast(), core::mem::size_of::<T>(), max_lines);
}
