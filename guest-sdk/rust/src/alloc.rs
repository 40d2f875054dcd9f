//! The allocator the SDK installs in wasm32 modules: small blocks come
//! from free lists by size class, as glibc's tcache serves them natively;
//! everything else goes to the system allocator (wasi-libc's dlmalloc).
//!
//! A reconcile call is mostly small allocations (the request's strings and
//! vectors, the response's), and under wasm every load and store of
//! dlmalloc's bookkeeping is bounds-checked, so with it the Rust widget ran
//! at about 2× its native time; with size classes an allocation is a few
//! loads and stores (docs/benchmarks.md, "Rust guests"). Blocks are really
//! freed: a module may keep what it likes across calls.
//!
//! A freed small block is reused only for its class; its memory never goes
//! back to the system allocator (wasm memory never shrinks anyway). A call
//! that frees many blocks of one size and then asks for many of another
//! holds both: the host's `--recycle-memory-pages` replaces an instance
//! whose memory grew past its mark.
//!
//! To use another allocator, build the SDK with the `system-allocator`
//! feature (`--cfg 'feature="system-allocator"'` without cargo) and
//! declare your own `#[global_allocator]`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr;

/// Alignment of every small block; a layout that asks for more goes to
/// the system allocator.
const ALIGN: usize = 16;
/// Classes 16, 32, …, 256 bytes, then 512, 1,024 and 2,048.
const STEP: usize = 16;
const STEPPED: usize = 256;
/// The largest small block; larger ones go to the system allocator.
pub const MAX_SMALL: usize = 2048;
const CLASSES: usize = STEPPED / STEP + 3;
/// Small blocks are carved from chunks of this size.
const CHUNK: usize = 64 << 10;

/// The class of a small allocation of size bytes, if it is small.
fn class_of(size: usize) -> Option<usize> {
    if size <= STEPPED {
        Some((size.max(1) + STEP - 1) / STEP - 1)
    } else if size <= MAX_SMALL {
        // 257..=512 → 16, 513..=1024 → 17, 1025..=2048 → 18.
        Some(STEPPED / STEP + (usize::BITS - (size - 1).leading_zeros()) as usize - 9)
    } else {
        None
    }
}

/// The size of the blocks of class c.
fn class_size(c: usize) -> usize {
    if c < STEPPED / STEP {
        (c + 1) * STEP
    } else {
        (STEPPED * 2) << (c - STEPPED / STEP)
    }
}

/// A size-class allocator over the system allocator. It is not
/// thread-safe: wasm32-wasi modules run on one thread, and the host never
/// enters an instance twice at once.
pub struct SizeClasses {
    state: UnsafeCell<State>,
}

struct State {
    /// Heads of the free lists; a free block holds the next one's address.
    free: [*mut u8; CLASSES],
    /// What is left of the current chunk.
    next: *mut u8,
    end: *mut u8,
}

// Only the wasm32 global is shared, and wasm32-wasi has one thread.
#[cfg(target_arch = "wasm32")]
unsafe impl Sync for SizeClasses {}

impl SizeClasses {
    pub const fn new() -> SizeClasses {
        SizeClasses { state: UnsafeCell::new(State { free: [ptr::null_mut(); CLASSES], next: ptr::null_mut(), end: ptr::null_mut() }) }
    }

    fn small(layout: &Layout) -> Option<usize> {
        if layout.align() > ALIGN {
            return None;
        }
        class_of(layout.size())
    }

    unsafe fn alloc_class(&self, c: usize) -> *mut u8 {
        let s = &mut *self.state.get();
        let head = s.free[c];
        if !head.is_null() {
            s.free[c] = *(head as *mut *mut u8);
            return head;
        }
        let size = class_size(c);
        if (s.end as usize) - (s.next as usize) < size {
            let chunk = System.alloc(Layout::from_size_align_unchecked(CHUNK, ALIGN));
            if chunk.is_null() {
                return chunk;
            }
            s.next = chunk;
            s.end = chunk.add(CHUNK);
        }
        let p = s.next;
        s.next = p.add(size);
        p
    }

    unsafe fn free_class(&self, p: *mut u8, c: usize) {
        let s = &mut *self.state.get();
        *(p as *mut *mut u8) = s.free[c];
        s.free[c] = p;
    }
}

impl Default for SizeClasses {
    fn default() -> Self {
        SizeClasses::new()
    }
}

unsafe impl GlobalAlloc for SizeClasses {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match SizeClasses::small(&layout) {
            Some(c) => self.alloc_class(c),
            None => System.alloc(layout),
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        match SizeClasses::small(&layout) {
            Some(c) => self.free_class(p, c),
            None => System.dealloc(p, layout),
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = Layout::from_size_align_unchecked(new_size, layout.align());
        match (SizeClasses::small(&layout), SizeClasses::small(&new)) {
            (Some(a), Some(b)) if a == b => p,
            (None, None) => System.realloc(p, layout, new_size),
            _ => {
                let q = self.alloc(new);
                if !q.is_null() {
                    ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
                    self.dealloc(p, layout);
                }
                q
            }
        }
    }
}

#[cfg(all(target_arch = "wasm32", not(feature = "system-allocator")))]
#[global_allocator]
static ALLOCATOR: SizeClasses = SizeClasses::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_small_size() {
        for size in 0..=MAX_SMALL {
            let c = class_of(size).unwrap();
            assert!(c < CLASSES, "size {} class {}", size, c);
            assert!(class_size(c) >= size.max(1), "size {} class {} of {} bytes", size, c, class_size(c));
            if c > 0 {
                assert!(class_size(c - 1) < size, "size {} fits class {} already", size, c - 1);
            }
            assert_eq!(class_size(c) % ALIGN, 0);
        }
        assert_eq!(class_of(MAX_SMALL + 1), None);
        assert_eq!(class_size(CLASSES - 1), MAX_SMALL);
    }

    /// Blocks are aligned, never overlap while live, keep what is written
    /// to them, and are reused once freed; large and over-aligned layouts
    /// go to the system allocator and work alike.
    #[test]
    fn blocks_are_distinct_aligned_and_reused() {
        let a = SizeClasses::new();
        let mut live: Vec<(*mut u8, Layout, u8)> = Vec::new();
        let mut seed = 7u32;
        for round in 0..20_000u32 {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let size = match seed % 10 {
                0 => (seed >> 8) as usize % 9000,
                _ => (seed >> 8) as usize % 300,
            };
            let align = if seed % 97 == 0 { 64 } else { 1 << (seed >> 4) % 5 };
            if seed % 3 == 0 && !live.is_empty() {
                let (p, l, v) = live.swap_remove((seed as usize >> 3) % live.len());
                unsafe {
                    for i in 0..l.size() {
                        assert_eq!(*p.add(i), v, "round {}: a block of {} bytes was overwritten", round, l.size());
                    }
                    a.dealloc(p, l);
                }
                continue;
            }
            let l = Layout::from_size_align(size, align).unwrap();
            let v = (round % 251) as u8;
            unsafe {
                let mut p = a.alloc(l);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "size {} align {}", size, align);
                ptr::write_bytes(p, v, size);
                let mut l = l;
                if seed % 7 == 0 {
                    let grown = size * 2 + 1;
                    p = a.realloc(p, l, grown);
                    assert!(!p.is_null());
                    for i in 0..size {
                        assert_eq!(*p.add(i), v, "realloc {} -> {} lost byte {}", size, grown, i);
                    }
                    l = Layout::from_size_align(grown, align).unwrap();
                    ptr::write_bytes(p, v, grown);
                }
                live.push((p, l, v));
            }
        }
        for (p, l, v) in live {
            unsafe {
                for i in 0..l.size() {
                    assert_eq!(*p.add(i), v);
                }
                a.dealloc(p, l);
            }
        }
    }

    #[test]
    fn a_freed_block_serves_the_next_allocation_of_its_class() {
        let a = SizeClasses::new();
        unsafe {
            let l = Layout::from_size_align(40, 8).unwrap();
            let p = a.alloc(l);
            a.dealloc(p, l);
            let q = a.alloc(Layout::from_size_align(33, 1).unwrap());
            assert_eq!(p, q, "a 33-byte block (class 48) did not reuse the freed 40-byte one");
            let r = a.realloc(q, Layout::from_size_align(33, 1).unwrap(), 48);
            assert_eq!(q, r, "a realloc within the class moved the block");
        }
    }
}
