//! The result layer: the only place where cuFile's status codes and I/O returns become
//! [`Result`]s. Pure functions, tested without cuFile.

use gpufile_sys::cufile::{self as sys, CUfileError_t};

use crate::error::{Error, Result};

/// Name of a `CUfileOpError` code (cufile.h).
pub fn op_error_name(code: i32) -> &'static str {
    const NAMES: [(i32, &str); 38] = [
        (0, "CU_FILE_SUCCESS"),
        (5001, "CU_FILE_DRIVER_NOT_INITIALIZED"),
        (5002, "CU_FILE_DRIVER_INVALID_PROPS"),
        (5003, "CU_FILE_DRIVER_UNSUPPORTED_LIMIT"),
        (5004, "CU_FILE_DRIVER_VERSION_MISMATCH"),
        (5005, "CU_FILE_DRIVER_VERSION_READ_ERROR"),
        (5006, "CU_FILE_DRIVER_CLOSING"),
        (5007, "CU_FILE_PLATFORM_NOT_SUPPORTED"),
        (5008, "CU_FILE_IO_NOT_SUPPORTED"),
        (5009, "CU_FILE_DEVICE_NOT_SUPPORTED"),
        (5010, "CU_FILE_NVFS_DRIVER_ERROR"),
        (5011, "CU_FILE_CUDA_DRIVER_ERROR"),
        (5012, "CU_FILE_CUDA_POINTER_INVALID"),
        (5013, "CU_FILE_CUDA_MEMORY_TYPE_INVALID"),
        (5014, "CU_FILE_CUDA_POINTER_RANGE_ERROR"),
        (5015, "CU_FILE_CUDA_CONTEXT_MISMATCH"),
        (5016, "CU_FILE_INVALID_MAPPING_SIZE"),
        (5017, "CU_FILE_INVALID_MAPPING_RANGE"),
        (5018, "CU_FILE_INVALID_FILE_TYPE"),
        (5019, "CU_FILE_INVALID_FILE_OPEN_FLAG"),
        (5020, "CU_FILE_DIO_NOT_SET"),
        (5022, "CU_FILE_INVALID_VALUE"),
        (5023, "CU_FILE_MEMORY_ALREADY_REGISTERED"),
        (5024, "CU_FILE_MEMORY_NOT_REGISTERED"),
        (5025, "CU_FILE_PERMISSION_DENIED"),
        (5026, "CU_FILE_DRIVER_ALREADY_OPEN"),
        (5027, "CU_FILE_HANDLE_NOT_REGISTERED"),
        (5028, "CU_FILE_HANDLE_ALREADY_REGISTERED"),
        (5029, "CU_FILE_DEVICE_NOT_FOUND"),
        (5030, "CU_FILE_INTERNAL_ERROR"),
        (5031, "CU_FILE_GETNEWFD_FAILED"),
        (5033, "CU_FILE_NVFS_SETUP_ERROR"),
        (5034, "CU_FILE_IO_DISABLED"),
        (5035, "CU_FILE_BATCH_SUBMIT_FAILED"),
        (5036, "CU_FILE_GPU_MEMORY_PINNING_FAILED"),
        (5037, "CU_FILE_BATCH_FULL"),
        (5038, "CU_FILE_ASYNC_NOT_SUPPORTED"),
        (5039, "CU_FILE_IO_MAX_ERROR"),
    ];
    NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or("CU_FILE_UNKNOWN_ERROR", |(_, n)| n)
}

/// Turns a cuFile status into a `Result`.
pub(crate) fn check(call: &'static str, status: CUfileError_t) -> Result<()> {
    if status.err == sys::CU_FILE_SUCCESS {
        return Ok(());
    }
    Err(Error::Cufile {
        call,
        code: status.err,
        name: op_error_name(status.err).to_owned(),
        cuda_code: status.cu_err,
    })
}

/// Decodes what `cuFileRead`/`cuFileWrite` returned: the bytes moved (fewer than asked is a
/// partial transfer, 0 the end of the file), else an error: -1 means `errno` says why (read
/// through `errno`, called only then), below that a negated `CUfileOpError` (or, under 5000, a
/// negated errno).
pub(crate) fn io_result(
    call: &'static str,
    ret: isize,
    errno: impl FnOnce() -> i32,
) -> Result<usize> {
    if ret >= 0 {
        return Ok(ret as usize);
    }
    let code = ret.unsigned_abs().min(i32::MAX as usize) as i32;
    if ret == -1 || code < 5000 {
        let errno = if ret == -1 { errno() } else { code };
        return Err(Error::Cufile {
            call,
            code: -errno,
            name: crate::error::os_message(errno),
            cuda_code: 0,
        });
    }
    Err(Error::Cufile {
        call,
        code,
        name: op_error_name(code).to_owned(),
        cuda_code: 0,
    })
}

/// This thread's `errno` now (5, `EIO`, where the OS gives none).
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_errno() -> i32 {
        panic!("errno is read only for a return of -1")
    }

    #[test]
    fn error_names() {
        assert_eq!(op_error_name(5027), "CU_FILE_HANDLE_NOT_REGISTERED");
        assert_eq!(op_error_name(4), "CU_FILE_UNKNOWN_ERROR");
    }

    #[test]
    fn byte_counts_pass_through_whole_or_partial() {
        assert_eq!(io_result("cuFileRead", 0, no_errno).unwrap(), 0);
        assert_eq!(io_result("cuFileRead", 4096, no_errno).unwrap(), 4096);
        // A partial count is a count: the caller asks again for the rest.
        assert_eq!(io_result("cuFileWrite", 1, no_errno).unwrap(), 1);
        assert_eq!(
            io_result("cuFileRead", isize::MAX, no_errno).unwrap(),
            isize::MAX as usize
        );
    }

    #[test]
    fn minus_one_reads_errno() {
        let e = io_result("cuFileRead", -1, || libc::EBADF).unwrap_err();
        match &e {
            Error::Cufile {
                call, code, name, ..
            } => {
                assert_eq!((*call, *code), ("cuFileRead", -libc::EBADF));
                assert_eq!(name, &crate::error::os_message(libc::EBADF));
            }
            e => panic!("{e:?}"),
        }
        assert!(e.to_string().starts_with("cuFileRead failed: "), "{e}");
    }

    #[test]
    fn cufile_op_errors_are_named() {
        let e = io_result("cuFileRead", -5030, no_errno).unwrap_err();
        let named = |e: &Error, want: &str| matches!(e, Error::Cufile { name, .. } if name == want);
        assert!(
            matches!(
                &e,
                Error::Cufile {
                    code: 5030,
                    cuda_code: 0,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(named(&e, "CU_FILE_INTERNAL_ERROR"), "{e:?}");
        assert!(e.to_string().contains("CU_FILE_INTERNAL_ERROR"), "{e}");
        let e = io_result("cuFileWrite", -5999, no_errno).unwrap_err();
        assert!(e.to_string().contains("CU_FILE_UNKNOWN_ERROR"), "{e}");
    }

    #[test]
    fn small_negative_values_are_negated_errnos() {
        let e = io_result("cuFileWrite", -(libc::ENOSPC as isize), no_errno).unwrap_err();
        assert!(
            matches!(&e, Error::Cufile { call: "cuFileWrite", code, .. } if *code == -libc::ENOSPC),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains(&crate::error::os_message(libc::ENOSPC)),
            "{e}"
        );
        // Far out of range: still an error, never a panic.
        assert!(io_result("cuFileRead", isize::MIN, no_errno).is_err());
    }

    #[test]
    fn statuses() {
        assert!(check("cuFileDriverOpen", CUfileError_t::default()).is_ok());
        let e = check(
            "cuFileDriverOpen",
            CUfileError_t {
                err: 5011,
                cu_err: 999,
            },
        )
        .unwrap_err();
        assert!(
            matches!(
                &e,
                Error::Cufile {
                    code: 5011,
                    cuda_code: 999,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("CU_FILE_CUDA_DRIVER_ERROR"), "{e}");
    }
}
