//! What both binaries share: a panic handler and the entry point's tail.

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {
        core::hint::spin_loop();
    }
}

/// Never returns: the end of `_start`.
pub fn park() -> ! {
    loop {
        core::hint::spin_loop();
    }
}
