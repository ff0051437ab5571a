//! The only module of this crate with `unsafe`: the C functions of libopencore-amrnb,
//! libopencore-amrwb and libvo-amrwbenc, found with `dlopen` once per process, and the
//! library states they work on.
//!
//! Every function here is safe to call with any argument: the buffers handed to C are
//! fixed-size arrays of the largest frame the library reads or writes, modes are clamped to
//! the library's range, and a frame header naming a frame type the library has no size for
//! is rewritten to "no data" before C sees it (so C never reads past the array).

#![allow(unsafe_code)]

use std::ffi::{c_int, c_short, c_uchar, c_void};
use std::ptr::NonNull;
use std::sync::OnceLock;

use libloading::Library;

use crate::{LoadError, NB_MAX_FRAME, NB_SAMPLES, WB_MAX_FRAME, WB_SAMPLES};

type InitFn = unsafe extern "C" fn() -> *mut c_void;
type InitDtxFn = unsafe extern "C" fn(c_int) -> *mut c_void;
type ExitFn = unsafe extern "C" fn(*mut c_void);
type DecodeFn = unsafe extern "C" fn(*mut c_void, *const c_uchar, *mut c_short, c_int);
// The speech input is `const short*` in the headers, but opencore's AMR-NB encoder writes it.
type EncodeFn =
    unsafe extern "C" fn(*mut c_void, c_int, *mut c_short, *mut c_uchar, c_int) -> c_int;

/// Headroom in the encoders' output buffers past the largest frame they write.
const ENC_SCRATCH: usize = 128;

/// libopencore-amrnb: AMR-NB encoder and decoder.
struct NbLib {
    dec_init: InitFn,
    dec_exit: ExitFn,
    decode: DecodeFn,
    enc_init: InitDtxFn,
    enc_exit: ExitFn,
    encode: EncodeFn,
    /// Keeps the code the pointers above point into mapped (for the whole process).
    _lib: Library,
}

/// libopencore-amrwb: the AMR-WB decoder.
struct WbDecLib {
    init: InitFn,
    exit: ExitFn,
    decode: DecodeFn,
    _lib: Library,
}

/// libvo-amrwbenc: the AMR-WB encoder.
struct WbEncLib {
    init: InitFn,
    exit: ExitFn,
    encode: EncodeFn,
    _lib: Library,
}

pub(crate) const NB_SONAME: &str = "libopencore-amrnb.so.0";
pub(crate) const WB_DEC_SONAME: &str = "libopencore-amrwb.so.0";
pub(crate) const WB_ENC_SONAME: &str = "libvo-amrwbenc.so.0";

fn open(soname: &'static str, package: &'static str) -> Result<Library, LoadError> {
    // SAFETY: loading runs the library's initialisers; these three are plain C codec
    // libraries with no constructors that touch our process state.
    unsafe { Library::new(soname) }.map_err(|e| LoadError::new(soname, package, e.to_string()))
}

/// Looks `name` up in `lib` as a function pointer of type `T`, copied out of the symbol.
///
/// # Safety
/// `T` must be the function's real C signature, and the pointer must not be called after
/// `lib` is unloaded (ours live in statics, never unloaded).
unsafe fn sym<T: Copy>(
    lib: &Library,
    soname: &'static str,
    package: &'static str,
    name: &str,
) -> Result<T, LoadError> {
    // SAFETY: the caller vouches for `T` (see above).
    unsafe { lib.get::<T>(name) }
        .map(|s| *s)
        .map_err(|e| LoadError::new(soname, package, e.to_string()))
}

fn nb_lib() -> Result<&'static NbLib, LoadError> {
    static LIB: OnceLock<Result<NbLib, LoadError>> = OnceLock::new();
    LIB.get_or_init(|| {
        let (so, pkg) = (NB_SONAME, "libopencore-amrnb0");
        let lib = open(so, pkg)?;
        // SAFETY: the signatures are opencore-amr's `interf_dec.h` and `interf_enc.h`
        // (`enum Mode` is an int); the library is stored with the pointers, never unloaded.
        unsafe {
            Ok(NbLib {
                dec_init: sym(&lib, so, pkg, "Decoder_Interface_init")?,
                dec_exit: sym(&lib, so, pkg, "Decoder_Interface_exit")?,
                decode: sym(&lib, so, pkg, "Decoder_Interface_Decode")?,
                enc_init: sym(&lib, so, pkg, "Encoder_Interface_init")?,
                enc_exit: sym(&lib, so, pkg, "Encoder_Interface_exit")?,
                encode: sym(&lib, so, pkg, "Encoder_Interface_Encode")?,
                _lib: lib,
            })
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn wb_dec_lib() -> Result<&'static WbDecLib, LoadError> {
    static LIB: OnceLock<Result<WbDecLib, LoadError>> = OnceLock::new();
    LIB.get_or_init(|| {
        let (so, pkg) = (WB_DEC_SONAME, "libopencore-amrwb0");
        let lib = open(so, pkg)?;
        // SAFETY: the signatures are opencore-amr's `dec_if.h`; the library is stored with
        // the pointers, never unloaded.
        unsafe {
            Ok(WbDecLib {
                init: sym(&lib, so, pkg, "D_IF_init")?,
                exit: sym(&lib, so, pkg, "D_IF_exit")?,
                decode: sym(&lib, so, pkg, "D_IF_decode")?,
                _lib: lib,
            })
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn wb_enc_lib() -> Result<&'static WbEncLib, LoadError> {
    static LIB: OnceLock<Result<WbEncLib, LoadError>> = OnceLock::new();
    LIB.get_or_init(|| {
        let (so, pkg) = (WB_ENC_SONAME, "libvo-amrwbenc0");
        let lib = open(so, pkg)?;
        // SAFETY: the signatures are vo-amrwbenc's `enc_if.h`; the library is stored with
        // the pointers, never unloaded.
        unsafe {
            Ok(WbEncLib {
                init: sym(&lib, so, pkg, "E_IF_init")?,
                exit: sym(&lib, so, pkg, "E_IF_exit")?,
                encode: sym(&lib, so, pkg, "E_IF_encode")?,
                _lib: lib,
            })
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

pub(crate) fn nb_loaded() -> Result<(), LoadError> {
    nb_lib().map(|_| ())
}
pub(crate) fn wb_dec_loaded() -> Result<(), LoadError> {
    wb_dec_lib().map(|_| ())
}
pub(crate) fn wb_enc_loaded() -> Result<(), LoadError> {
    wb_enc_lib().map(|_| ())
}

fn state(
    p: *mut c_void,
    what: &'static str,
    soname: &'static str,
) -> Result<NonNull<c_void>, LoadError> {
    NonNull::new(p).ok_or_else(|| LoadError::new(soname, "", format!("{what} returned no state")))
}

/// Frame type of a storage-format header byte.
fn header_ft(h: u8) -> u8 {
    (h >> 3) & 0x0F
}

/// One AMR-NB decoder state (`Decoder_Interface_init`).
pub(crate) struct NbDec {
    st: NonNull<c_void>,
    lib: &'static NbLib,
}

// SAFETY: the state is plain heap memory owned by this value alone and used only through
// `&mut self`; the library keeps no thread-local or global state per decoder, so moving it
// to another thread is sound. Not Sync: `&self` gives no access to it.
unsafe impl Send for NbDec {}

impl NbDec {
    pub(crate) fn new() -> Result<NbDec, LoadError> {
        let lib = nb_lib()?;
        // SAFETY: no arguments; returns a new state or NULL (checked).
        let p = unsafe { (lib.dec_init)() };
        Ok(NbDec {
            st: state(p, "Decoder_Interface_init", NB_SONAME)?,
            lib,
        })
    }

    /// Decodes a storage-format frame (header byte first, zero-padded to the largest frame);
    /// `bfi` marks it bad (the decoder conceals). A frame type without a defined size
    /// (9–14) is decoded as a bad "no data" frame.
    pub(crate) fn decode(
        &mut self,
        frame: &[u8; NB_MAX_FRAME],
        bfi: bool,
        out: &mut [i16; NB_SAMPLES],
    ) {
        let mut buf = *frame;
        let mut bfi = bfi;
        if (9..=14).contains(&header_ft(buf[0])) {
            buf[0] = 15 << 3;
            bfi = true;
        }
        // SAFETY: `st` is a live decoder state owned by us; `buf` holds NB_MAX_FRAME bytes,
        // the most the decoder reads for the frame types 0–8 and 15 the header can now name;
        // `out` has room for the 160 samples it writes.
        unsafe {
            (self.lib.decode)(
                self.st.as_ptr(),
                buf.as_ptr(),
                out.as_mut_ptr(),
                c_int::from(bfi),
            )
        }
    }
}

impl Drop for NbDec {
    fn drop(&mut self) {
        // SAFETY: `st` came from Decoder_Interface_init and is freed exactly once, here.
        unsafe { (self.lib.dec_exit)(self.st.as_ptr()) }
    }
}

/// One AMR-NB encoder state (`Encoder_Interface_init`).
pub(crate) struct NbEnc {
    st: NonNull<c_void>,
    lib: &'static NbLib,
}

// SAFETY: as for NbDec: the state is owned by this value and used only through `&mut self`.
unsafe impl Send for NbEnc {}

impl NbEnc {
    pub(crate) fn new(dtx: bool) -> Result<NbEnc, LoadError> {
        let lib = nb_lib()?;
        // SAFETY: an int flag; returns a new state or NULL (checked).
        let p = unsafe { (lib.enc_init)(c_int::from(dtx)) };
        Ok(NbEnc {
            st: state(p, "Encoder_Interface_init", NB_SONAME)?,
            lib,
        })
    }

    /// Encodes 160 samples at `mode` (clamped to 0–7); returns the storage-format frame's
    /// length in `out` (0 if the library reported an error).
    pub(crate) fn encode(
        &mut self,
        mode: u8,
        pcm: &[i16; NB_SAMPLES],
        out: &mut [u8; NB_MAX_FRAME],
    ) -> usize {
        let mut buf = [0u8; NB_MAX_FRAME + ENC_SCRATCH];
        // The encoder clears the 3 low bits of its input in place, `const` notwithstanding:
        // it gets a copy (the caller's slice may be read-only memory).
        let mut speech = *pcm;
        // SAFETY: `st` is a live encoder state owned by us; the mode is one of the library's
        // eight; `speech` holds the 160 samples it reads (and writes); `buf` has room past
        // the 32 bytes of the largest frame it writes.
        let n = unsafe {
            (self.lib.encode)(
                self.st.as_ptr(),
                c_int::from(mode.min(7)),
                speech.as_mut_ptr(),
                buf.as_mut_ptr(),
                0,
            )
        };
        copy_out(n, &buf, out)
    }
}

impl Drop for NbEnc {
    fn drop(&mut self) {
        // SAFETY: `st` came from Encoder_Interface_init and is freed exactly once, here.
        unsafe { (self.lib.enc_exit)(self.st.as_ptr()) }
    }
}

/// Copies the `n` bytes an encoder reported into `out` (0 when `n` is negative or does not fit).
fn copy_out<const N: usize>(n: c_int, buf: &[u8], out: &mut [u8; N]) -> usize {
    match usize::try_from(n) {
        Ok(n) if n <= N => {
            out[..n].copy_from_slice(&buf[..n]);
            n
        }
        _ => 0,
    }
}

/// One AMR-WB decoder state (`D_IF_init`).
pub(crate) struct WbDec {
    st: NonNull<c_void>,
    lib: &'static WbDecLib,
}

// SAFETY: as for NbDec: the state is owned by this value and used only through `&mut self`.
unsafe impl Send for WbDec {}

impl WbDec {
    pub(crate) fn new() -> Result<WbDec, LoadError> {
        let lib = wb_dec_lib()?;
        // SAFETY: no arguments; returns a new state or NULL (checked).
        let p = unsafe { (lib.init)() };
        Ok(WbDec {
            st: state(p, "D_IF_init", WB_DEC_SONAME)?,
            lib,
        })
    }

    /// Decodes a storage-format frame (header byte first, zero-padded to the largest frame);
    /// `bfi` marks it bad. A reserved frame type (10–13) is decoded as "speech lost".
    pub(crate) fn decode(
        &mut self,
        frame: &[u8; WB_MAX_FRAME],
        bfi: bool,
        out: &mut [i16; WB_SAMPLES],
    ) {
        let mut buf = *frame;
        if (10..=13).contains(&header_ft(buf[0])) {
            buf[0] = 14 << 3;
        }
        // SAFETY: `st` is a live decoder state owned by us; `buf` holds WB_MAX_FRAME bytes,
        // the most the decoder reads for the frame types 0–9, 14 and 15 the header can now
        // name; `out` has room for the 320 samples it writes.
        unsafe {
            (self.lib.decode)(
                self.st.as_ptr(),
                buf.as_ptr(),
                out.as_mut_ptr(),
                c_int::from(bfi),
            )
        }
    }
}

impl Drop for WbDec {
    fn drop(&mut self) {
        // SAFETY: `st` came from D_IF_init and is freed exactly once, here.
        unsafe { (self.lib.exit)(self.st.as_ptr()) }
    }
}

/// One AMR-WB encoder state (`E_IF_init`).
pub(crate) struct WbEnc {
    st: NonNull<c_void>,
    lib: &'static WbEncLib,
    dtx: bool,
}

// SAFETY: as for NbDec: the state is owned by this value and used only through `&mut self`.
unsafe impl Send for WbEnc {}

impl WbEnc {
    pub(crate) fn new(dtx: bool) -> Result<WbEnc, LoadError> {
        let lib = wb_enc_lib()?;
        // SAFETY: no arguments; returns a new state or NULL (checked).
        let p = unsafe { (lib.init)() };
        Ok(WbEnc {
            st: state(p, "E_IF_init", WB_ENC_SONAME)?,
            lib,
            dtx,
        })
    }

    /// Encodes 320 samples at `mode` (clamped to 0–8); returns the storage-format frame's
    /// length in `out` (0 if the library reported an error).
    pub(crate) fn encode(
        &mut self,
        mode: u8,
        pcm: &[i16; WB_SAMPLES],
        out: &mut [u8; WB_MAX_FRAME],
    ) -> usize {
        let mut buf = [0u8; WB_MAX_FRAME + ENC_SCRATCH];
        // A copy, as for AMR-NB: nothing promises the encoder leaves its input alone.
        let mut speech = *pcm;
        // SAFETY: `st` is a live encoder state owned by us; the mode is one of the library's
        // nine; `speech` holds the 320 samples it reads; `buf` has room past the 61 bytes of
        // the largest frame it writes.
        let n = unsafe {
            (self.lib.encode)(
                self.st.as_ptr(),
                c_int::from(mode.min(8)),
                speech.as_mut_ptr(),
                buf.as_mut_ptr(),
                c_int::from(self.dtx),
            )
        };
        copy_out(n, &buf, out)
    }
}

impl Drop for WbEnc {
    fn drop(&mut self) {
        // SAFETY: `st` came from E_IF_init and is freed exactly once, here.
        unsafe { (self.lib.exit)(self.st.as_ptr()) }
    }
}
