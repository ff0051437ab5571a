//! What `lab crypto` measures: algorithms, operations, libraries, and the rows they make.

/// An elliptic curve (ECDSA, ECDH) or a Montgomery curve (X25519, X448).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    /// NIST P-192 (secp192r1, prime192v1).
    P192,
    /// NIST P-224 (secp224r1).
    P224,
    /// NIST P-256 (secp256r1, prime256v1).
    P256,
    /// NIST P-384 (secp384r1).
    P384,
    /// NIST P-521 (secp521r1).
    P521,
    /// secp256k1 (the Koblitz curve).
    K256,
    /// brainpoolP256r1.
    Bp256,
    /// brainpoolP384r1.
    Bp384,
    /// brainpoolP512r1.
    Bp512,
    /// X25519 (Curve25519, key exchange only).
    X25519,
    /// X448 (Curve448, key exchange only).
    X448,
}

impl Curve {
    /// Curves with ECDSA.
    pub const ECDSA: [Curve; 9] = [
        Curve::P192,
        Curve::P224,
        Curve::P256,
        Curve::P384,
        Curve::P521,
        Curve::K256,
        Curve::Bp256,
        Curve::Bp384,
        Curve::Bp512,
    ];
    /// Curves with a Diffie-Hellman exchange.
    pub const KEX: [Curve; 11] = [
        Curve::P192,
        Curve::P224,
        Curve::P256,
        Curve::P384,
        Curve::P521,
        Curve::K256,
        Curve::Bp256,
        Curve::Bp384,
        Curve::Bp512,
        Curve::X25519,
        Curve::X448,
    ];

    /// Name people use.
    pub fn name(self) -> &'static str {
        match self {
            Curve::P192 => "P-192",
            Curve::P224 => "P-224",
            Curve::P256 => "P-256",
            Curve::P384 => "P-384",
            Curve::P521 => "P-521",
            Curve::K256 => "secp256k1",
            Curve::Bp256 => "brainpoolP256r1",
            Curve::Bp384 => "brainpoolP384r1",
            Curve::Bp512 => "brainpoolP512r1",
            Curve::X25519 => "X25519",
            Curve::X448 => "X448",
        }
    }

    /// Short id for row ids.
    pub fn id(self) -> &'static str {
        match self {
            Curve::P192 => "p192",
            Curve::P224 => "p224",
            Curve::P256 => "p256",
            Curve::P384 => "p384",
            Curve::P521 => "p521",
            Curve::K256 => "secp256k1",
            Curve::Bp256 => "bp256",
            Curve::Bp384 => "bp384",
            Curve::Bp512 => "bp512",
            Curve::X25519 => "x25519",
            Curve::X448 => "x448",
        }
    }

    /// The hash ECDSA uses with this curve here (the same in every library).
    pub fn hash_bits(self) -> u32 {
        match self {
            Curve::P384 | Curve::Bp384 => 384,
            Curve::P521 | Curve::Bp512 => 512,
            _ => 256,
        }
    }
}

/// An algorithm (a row group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    /// RSA with this modulus size in bits.
    Rsa(u32),
    /// ECDSA on a curve.
    Ecdsa(Curve),
    /// Ed25519 (RFC 8032).
    Ed25519,
    /// Ed448 (RFC 8032).
    Ed448,
    /// (EC)DH on a curve.
    Kex(Curve),
}

impl Alg {
    /// Name people use.
    pub fn name(self) -> String {
        match self {
            Alg::Rsa(bits) => format!("RSA-{bits}"),
            Alg::Ecdsa(c) => format!("ECDSA {}", c.name()),
            Alg::Ed25519 => "Ed25519".into(),
            Alg::Ed448 => "Ed448".into(),
            Alg::Kex(c @ (Curve::X25519 | Curve::X448)) => c.name().into(),
            Alg::Kex(c) => format!("ECDH {}", c.name()),
        }
    }
    /// Short id for row ids.
    pub fn id(self) -> String {
        match self {
            Alg::Rsa(bits) => format!("rsa{bits}"),
            Alg::Ecdsa(c) => format!("ecdsa-{}", c.id()),
            Alg::Ed25519 => "ed25519".into(),
            Alg::Ed448 => "ed448".into(),
            Alg::Kex(c) => format!("ecdh-{}", c.id()),
        }
    }
}

/// An operation (a row within an algorithm).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Key pair generation (private key and its public key).
    Keygen,
    /// Sign a 64-byte message (hashing included); RSA: PKCS#1 v1.5 with SHA-256.
    Sign,
    /// Verify that signature (public key parsed beforehand).
    Verify,
    /// RSA-PSS sign, SHA-256, MGF1-SHA-256, salt = hash length.
    SignPss,
    /// RSA-PSS verify.
    VerifyPss,
    /// Ephemeral exchange: generate a key pair, encode the public key, compute the shared secret.
    Ecdhe,
    /// Static exchange: the shared secret only, from a key pair made beforehand.
    Ecdh,
}

impl Op {
    /// Short id for row ids.
    pub fn id(self) -> &'static str {
        match self {
            Op::Keygen => "keygen",
            Op::Sign => "sign",
            Op::Verify => "verify",
            Op::SignPss => "sign-pss",
            Op::VerifyPss => "verify-pss",
            Op::Ecdhe => "ecdhe",
            Op::Ecdh => "ecdh",
        }
    }
    /// Label for the table.
    pub fn label(self, alg: Alg) -> String {
        let hash = match alg {
            Alg::Ecdsa(c) => format!("SHA-{}", c.hash_bits()),
            Alg::Ed25519 => "SHA-512 inside".into(),
            Alg::Ed448 => "SHAKE256 inside".into(),
            _ => "SHA-256".into(),
        };
        match (self, alg) {
            (Op::Keygen, _) => "key generation".into(),
            (Op::Sign, Alg::Rsa(_)) => "sign PKCS#1 v1.5, SHA-256".into(),
            (Op::Verify, Alg::Rsa(_)) => "verify PKCS#1 v1.5, SHA-256".into(),
            (Op::Sign, _) => format!("sign ({hash})"),
            (Op::Verify, _) => format!("verify ({hash})"),
            (Op::SignPss, _) => "sign PSS, SHA-256".into(),
            (Op::VerifyPss, _) => "verify PSS, SHA-256".into(),
            (Op::Ecdhe, _) => "ECDHE: ephemeral key + shared secret".into(),
            (Op::Ecdh, _) => "ECDH: shared secret only".into(),
        }
    }
}

/// A library under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lib {
    /// aws-lc-rs (AWS-LC, BoringSSL descendant).
    AwsLc,
    /// OpenSSL through the `openssl` crate (the system's OpenSSL 3).
    OpenSsl,
    /// The RustCrypto crates (and dalek for Curve25519).
    RustCrypto,
}

impl Lib {
    /// Every library, in column order.
    pub const ALL: [Lib; 3] = [Lib::AwsLc, Lib::OpenSsl, Lib::RustCrypto];
    /// Name people use.
    pub fn name(self) -> &'static str {
        match self {
            Lib::AwsLc => "aws-lc-rs",
            Lib::OpenSsl => "OpenSSL",
            Lib::RustCrypto => "RustCrypto",
        }
    }
    /// Key prefix for table columns and counted-op ids.
    pub fn key(self) -> &'static str {
        match self {
            Lib::AwsLc => "awslc",
            Lib::OpenSsl => "openssl",
            Lib::RustCrypto => "rustcrypto",
        }
    }
}

/// RSA modulus sizes measured.
pub const RSA_BITS: [u32; 4] = [1024, 2048, 3072, 4096];

/// Every (algorithm, operation) row, in display order.
pub fn rows() -> Vec<(Alg, Op)> {
    let mut v = Vec::new();
    for bits in RSA_BITS {
        for op in [Op::Keygen, Op::Sign, Op::Verify, Op::SignPss, Op::VerifyPss] {
            v.push((Alg::Rsa(bits), op));
        }
    }
    for c in Curve::ECDSA {
        for op in [Op::Keygen, Op::Sign, Op::Verify] {
            v.push((Alg::Ecdsa(c), op));
        }
    }
    for a in [Alg::Ed25519, Alg::Ed448] {
        for op in [Op::Keygen, Op::Sign, Op::Verify] {
            v.push((a, op));
        }
    }
    for c in Curve::KEX {
        for op in [Op::Ecdhe, Op::Ecdh] {
            v.push((Alg::Kex(c), op));
        }
    }
    v
}

/// The row id: `ALG/OP`, e.g. `rsa2048/keygen`, `ecdh-x25519/ecdhe`.
pub fn row_id(alg: Alg, op: Op) -> String {
    format!("{}/{}", alg.id(), op.id())
}

/// A 64-byte message, the same for every library.
pub const MSG: &[u8; 64] = b"secrelay lab crypto: the 64-byte message every library signs....";

/// An operation made ready to run: keys and inputs prepared, one dry run checked.
pub struct Prepared {
    /// One operation; it `black_box`es what it produces.
    pub run: Box<dyn FnMut()>,
    /// For signing: whether two signatures of the same message under the same key came out
    /// equal in the dry run (deterministic) or not (randomized).
    pub deterministic: Option<bool>,
}

impl Prepared {
    /// A prepared operation with nothing more to say.
    pub fn new(run: impl FnMut() + 'static) -> Prepared {
        Prepared {
            run: Box::new(run),
            deterministic: None,
        }
    }
    /// A prepared signing operation, with whether it signed deterministically.
    pub fn signing(run: impl FnMut() + 'static, deterministic: bool) -> Prepared {
        Prepared {
            run: Box::new(run),
            deterministic: Some(deterministic),
        }
    }
}

/// What a preparation returns: the ready operation, or why the library does not offer it.
pub type Prep = Result<Prepared, String>;
