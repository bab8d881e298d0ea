use super::planning::{resolve, Target};
use crate::cuda::{Context, MemoryKind, PointerInfo};
use crate::Buffer;

#[test]
fn the_callers_answer_is_used_for_an_address_in_its_allocation() {
    let ctx = Context::for_test(0x5000);
    let info = PointerInfo {
        kind: MemoryKind::Device,
        device: Some(1),
        context: Some(ctx),
        base: 0x10_0000,
        size: 0x1000,
    };
    // No driver is asked (there is none where this runs without a GPU).
    let at = |addr, len| resolve(Buffer::Device { addr, len }, Some(info));
    match at(0x10_0800, 0x800) {
        Ok(Target::Device { device, base }) => {
            assert_eq!(
                (device.addr, device.ctx, device.device),
                (0x10_0800, ctx, 1)
            );
            assert_eq!(base, 0x10_0000);
        }
        _ => panic!("the caller's answer was not used"),
    }
    // Past the allocation: refused, whether the driver is asked or the answer is used.
    assert!(at(0x10_0800, 0x801).is_err());
    assert!(at(0x10_1000, 1).is_err());
}
