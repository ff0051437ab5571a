//! DTLS datagrams a forger can send to a live association from its peer's address: record
//! headers right, contents made up (it has no keys). What the dtls tests feed an endpoint and
//! the gateway's tests feed a member, each expecting its own reason for each.

/// What a forged datagram is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Forged {
    /// A fatal alert in the clear (epoch 0).
    PlainAlert,
    /// An alert record in epoch 1, its ciphertext made up.
    ProtectedAlert,
    /// Application data in epoch 1, made up.
    ProtectedData,
    /// A handshake record in epoch 1 (where a Finished goes), made up.
    ProtectedHandshake,
    /// In the DTLS range, but not records (a header cut short).
    NotRecords,
    /// A DTLS 1.3 record (the unified header), to an association that speaks DTLS 1.2.
    Dtls13Header,
}

/// A DTLS 1.2 record: `content_type`, `epoch`, record number `seq`, `fragment`.
pub fn record(content_type: u8, epoch: u16, seq: u64, fragment: &[u8]) -> Vec<u8> {
    let mut r = vec![content_type, 0xfe, 0xfd];
    r.extend_from_slice(&epoch.to_be_bytes());
    r.extend_from_slice(&seq.to_be_bytes()[2..]);
    let len = u16::try_from(fragment.len()).expect("a fragment fits a record");
    r.extend_from_slice(&len.to_be_bytes());
    r.extend_from_slice(fragment);
    r
}

/// One datagram of each kind.
pub fn forgeries() -> Vec<(Forged, Vec<u8>)> {
    vec![
        (Forged::PlainAlert, record(21, 0, 9, &[2, 40])),
        (Forged::ProtectedAlert, record(21, 1, 9, &[0x5a; 26])),
        (Forged::ProtectedData, record(23, 1, 10, &[0x5b; 64])),
        (Forged::ProtectedHandshake, record(22, 1, 11, &[0x5c; 40])),
        (Forged::NotRecords, vec![22, 0xfe, 0xfd, 0, 0]),
        (Forged::Dtls13Header, vec![0x20, 0x99, 0x77, 0x77, 0x77]),
    ]
}
