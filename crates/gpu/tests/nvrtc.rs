//! The kernel source compiles with NVRTC, as it will on the GPU machine when the engine opens
//! a device. Needs NVRTC only, not a GPU: where `libnvrtc` can be loaded (a CUDA toolkit, or
//! the `nvidia-cuda-nvrtc` wheel's `lib/` on `LD_LIBRARY_PATH`) the test compiles for the
//! H100's architecture (compute 9.0, also with a register cap) and an older one (8.0); elsewhere it says it did not run,
//! and fails if `SECRELAY_REQUIRE_NVRTC` is set.

#[cfg(feature = "cuda")]
#[test]
fn the_kernels_compile_with_nvrtc() {
    use secrelay_srtp_gpu::cuda;
    if !cuda::nvrtc_present() {
        assert!(
            std::env::var_os("SECRELAY_REQUIRE_NVRTC").is_none(),
            "SECRELAY_REQUIRE_NVRTC is set but libnvrtc cannot be loaded (LD_LIBRARY_PATH?)"
        );
        eprintln!("NVRTC not found: the kernels' CUDA build was not checked here");
        return;
    }
    for (major, minor, regs) in [(9, 0, None), (8, 0, None), (9, 0, Some(64))] {
        let ptx = cuda::compile_kernels(major, minor, regs)
            .unwrap_or_else(|e| panic!("compute {major}.{minor}: {e}"));
        let text = ptx.to_src();
        for kernel in ["srtp_packets", "srtp_keys_setup", "srtp_tables_init"] {
            assert!(
                text.contains(&format!(".entry {kernel}")),
                "compute {major}.{minor}: no entry point {kernel}"
            );
        }
        assert!(text.contains(&format!(".target sm_{major}{minor}")));
    }
}
