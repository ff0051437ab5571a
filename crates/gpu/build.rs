//! Compiles the kernel source (`kernels/srtp.cu`) for the host through `kernels/host_shim.cpp`:
//! the emulated device the tests run the engine on where there is no GPU. The CUDA build of the
//! same source happens at run time (NVRTC), on the machine with the GPU.

fn main() {
    println!("cargo:rerun-if-changed=kernels/srtp.cu");
    println!("cargo:rerun-if-changed=kernels/host_shim.cpp");
    cc::Build::new()
        .cpp(true)
        .file("kernels/host_shim.cpp")
        .flag_if_supported("-std=c++17")
        .opt_level(2)
        .warnings(true)
        .compile("secrelay_srtp_host_kernels");
}
