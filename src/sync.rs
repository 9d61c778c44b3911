//! The one atomics facade of the crate.
//!
//! Every module takes its atomics from here, so switching the backend (for a
//! loom model check, or a target without native compare-and-swap) is a change
//! in one file. `portable-atomic` compiles to the native instructions where
//! the target has them and to its fallback elsewhere; on targets without any
//! compare-and-swap (`thumbv6m-none-eabi`, `riscv32imc-unknown-none-elf`) the
//! final binary enables `portable-atomic/critical-section` (see the crate
//! docs), never this library.

#[allow(unused_imports)]
pub(crate) use portable_atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicUsize, Ordering};

/// `portable_atomic::AtomicU64` with its operations kept out of line on
/// targets without native 64-bit atomics (32-bit microcontrollers): there
/// each one is a sequence around a lock (portable-atomic's fallback), and
/// inlined at every use they cost kilobytes of flash. With native 64-bit
/// atomics every operation is inlined, as the instruction it is.
#[derive(Debug, Default)]
#[repr(transparent)]
pub(crate) struct AtomicU64(portable_atomic::AtomicU64);

/// An ordering as a type: an out-of-line operation generic over it is one
/// function per ordering used, with that ordering a constant (so that
/// portable-atomic's check of the ordering folds away: it panics on, say,
/// a `Release` load, which a run-time ordering could not rule out).
#[cfg(not(target_has_atomic = "64"))]
trait Order {
    const ORDER: Ordering;
}

/// Defines the ordering types.
#[cfg(not(target_has_atomic = "64"))]
macro_rules! orders {
    ($($name:ident),*) => {
        $(
            struct $name;
            impl Order for $name {
                const ORDER: Ordering = Ordering::$name;
            }
        )*
    };
}

#[cfg(not(target_has_atomic = "64"))]
orders!(Relaxed, Acquire, Release, AcqRel, SeqCst);

/// Calls `$f::<O>` for the ordering type of `$order` among those a load
/// (or a compare-and-swap's failure) may take; any other is `SeqCst`.
#[cfg(not(target_has_atomic = "64"))]
macro_rules! by_load_order {
    ($order:expr, $call:ident) => {
        match $order {
            Ordering::Relaxed => $call!(Relaxed),
            Ordering::Acquire => $call!(Acquire),
            _ => $call!(SeqCst),
        }
    };
}

/// The same among those a store may take.
#[cfg(not(target_has_atomic = "64"))]
macro_rules! by_store_order {
    ($order:expr, $call:ident) => {
        match $order {
            Ordering::Relaxed => $call!(Relaxed),
            Ordering::Release => $call!(Release),
            _ => $call!(SeqCst),
        }
    };
}

/// The same among every ordering (a read-modify-write).
#[cfg(not(target_has_atomic = "64"))]
macro_rules! by_rmw_order {
    ($order:expr, $call:ident) => {
        match $order {
            Ordering::Relaxed => $call!(Relaxed),
            Ordering::Acquire => $call!(Acquire),
            Ordering::Release => $call!(Release),
            Ordering::AcqRel => $call!(AcqRel),
            _ => $call!(SeqCst),
        }
    };
}

/// Defines a read-modify-write `AtomicU64` method taking one value.
macro_rules! rmw {
    ($($name:ident, $outlined:ident;)*) => {
        $(
            #[inline(always)]
            pub(crate) fn $name(&self, value: u64, order: Ordering) -> u64 {
                #[cfg(target_has_atomic = "64")]
                {
                    self.0.$name(value, order)
                }
                #[cfg(not(target_has_atomic = "64"))]
                {
                    macro_rules! call {
                        ($o:ident) => {
                            self.$outlined::<$o>(value)
                        };
                    }
                    by_rmw_order!(order, call)
                }
            }

            #[cfg(not(target_has_atomic = "64"))]
            #[inline(never)]
            fn $outlined<O: Order>(&self, value: u64) -> u64 {
                self.0.$name(value, O::ORDER)
            }
        )*
    };
}

#[allow(dead_code)]
impl AtomicU64 {
    pub(crate) const fn new(value: u64) -> Self {
        Self(portable_atomic::AtomicU64::new(value))
    }

    #[inline(always)]
    pub(crate) fn load(&self, order: Ordering) -> u64 {
        #[cfg(target_has_atomic = "64")]
        {
            self.0.load(order)
        }
        #[cfg(not(target_has_atomic = "64"))]
        {
            macro_rules! call {
                ($o:ident) => {
                    self.load_as::<$o>()
                };
            }
            by_load_order!(order, call)
        }
    }

    #[cfg(not(target_has_atomic = "64"))]
    #[inline(never)]
    fn load_as<O: Order>(&self) -> u64 {
        self.0.load(O::ORDER)
    }

    #[inline(always)]
    pub(crate) fn store(&self, value: u64, order: Ordering) {
        #[cfg(target_has_atomic = "64")]
        {
            self.0.store(value, order);
        }
        #[cfg(not(target_has_atomic = "64"))]
        {
            macro_rules! call {
                ($o:ident) => {
                    self.store_as::<$o>(value)
                };
            }
            by_store_order!(order, call);
        }
    }

    #[cfg(not(target_has_atomic = "64"))]
    #[inline(never)]
    fn store_as<O: Order>(&self, value: u64) {
        self.0.store(value, O::ORDER);
    }

    rmw! {
        swap, swap_as;
        fetch_add, fetch_add_as;
        fetch_sub, fetch_sub_as;
        fetch_min, fetch_min_as;
        fetch_max, fetch_max_as;
    }

    #[inline(always)]
    pub(crate) fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        self.cas(current, new, success, failure, false)
    }

    #[inline(always)]
    pub(crate) fn compare_exchange_weak(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        self.cas(current, new, success, failure, true)
    }

    #[inline(always)]
    fn cas(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
        weak: bool,
    ) -> Result<u64, u64> {
        #[cfg(target_has_atomic = "64")]
        {
            if weak {
                self.0.compare_exchange_weak(current, new, success, failure)
            } else {
                self.0.compare_exchange(current, new, success, failure)
            }
        }
        #[cfg(not(target_has_atomic = "64"))]
        {
            macro_rules! with_failure {
                ($s:ident) => {{
                    macro_rules! call {
                        ($f:ident) => {
                            self.cas_as::<$s, $f>(current, new, weak)
                        };
                    }
                    by_load_order!(failure, call)
                }};
            }
            by_rmw_order!(success, with_failure)
        }
    }

    #[cfg(not(target_has_atomic = "64"))]
    #[inline(never)]
    fn cas_as<S: Order, F: Order>(&self, current: u64, new: u64, weak: bool) -> Result<u64, u64> {
        if weak {
            self.0
                .compare_exchange_weak(current, new, S::ORDER, F::ORDER)
        } else {
            self.0.compare_exchange(current, new, S::ORDER, F::ORDER)
        }
    }

    /// As portable-atomic's: a compare-and-swap loop over `f`.
    #[inline]
    pub(crate) fn fetch_update(
        &self,
        set: Ordering,
        fetch: Ordering,
        mut f: impl FnMut(u64) -> Option<u64>,
    ) -> Result<u64, u64> {
        let mut current = self.load(fetch);
        while let Some(next) = f(current) {
            match self.compare_exchange_weak(current, next, set, fetch) {
                Ok(previous) => return Ok(previous),
                Err(actual) => current = actual,
            }
        }
        Err(current)
    }

    /// The value, from an exclusive reference (no synchronisation).
    pub(crate) fn get_mut(&mut self) -> &mut u64 {
        self.0.get_mut()
    }

    /// The value, consuming the atomic.
    pub(crate) fn into_inner(self) -> u64 {
        self.0.into_inner()
    }
}
