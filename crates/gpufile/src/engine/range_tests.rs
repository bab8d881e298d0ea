use super::planning::within_allocation;

#[test]
fn ranges_inside_their_allocation_pass_and_others_are_refused() {
    let (base, size) = (0x10_000u64, 4096usize);
    for (addr, len) in [
        (base, 4096),
        (base + 4095, 1),
        (base + 100, 0),
        (base + 4096, 0),
    ] {
        assert!(
            within_allocation(addr, len, base, size).is_ok(),
            "{addr:#x} {len}"
        );
    }
    for (addr, len) in [(base, 4097), (base + 4095, 2), (base - 1, 1), (u64::MAX, 2)] {
        let e = within_allocation(addr, len, base, size).unwrap_err();
        assert!(e.to_string().contains("run past the end"), "{e}");
    }
}
