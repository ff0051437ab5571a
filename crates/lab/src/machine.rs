//! The machine a study ran on: CPU model, cores, the CPU features that matter to the
//! figures (AES-NI, VAES, SHA-NI, AVX2, AVX-512), memory and kernel.

use serde::{Deserialize, Serialize};

/// Description of the machine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model name, as the kernel reports it.
    pub cpu_model: String,
    /// Logical CPUs this process may use.
    pub cores: usize,
    /// Crypto-relevant CPU features present.
    pub cpu_features: Vec<String>,
    /// Total memory in GiB.
    pub memory_gib: f64,
    /// Operating system and kernel.
    pub os: String,
}

/// Flags from /proc/cpuinfo worth naming in a crypto report, with the name we print.
const FEATURES: &[(&str, &str)] = &[
    ("aes", "AES-NI"),
    ("vaes", "VAES"),
    ("pclmulqdq", "PCLMULQDQ"),
    ("vpclmulqdq", "VPCLMULQDQ"),
    ("sha_ni", "SHA-NI"),
    ("avx2", "AVX2"),
    ("avx512f", "AVX-512F"),
    ("avx512bw", "AVX-512BW"),
    ("avx512vl", "AVX-512VL"),
    ("bmi2", "BMI2"),
    ("adx", "ADX"),
];

impl Machine {
    /// Reads the description of this machine (Linux; elsewhere the fields say "unknown").
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find(|l| l.split(':').next().map(str::trim) == Some(name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        let flags: Vec<String> = field("flags")
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let cpu_features = FEATURES
            .iter()
            .filter(|(flag, _)| flags.iter().any(|f| f == flag))
            .map(|(_, name)| (*name).to_string())
            .collect();
        let memory_gib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|kb| kb.parse::<f64>().ok())
            })
            .map(|kb| (kb / 1024.0 / 1024.0 * 10.0).round() / 10.0)
            .unwrap_or(0.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        Machine {
            cpu_model: field("model name").unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cpu_features,
            memory_gib,
            os: format!("{} {}", std::env::consts::OS, kernel.trim()),
        }
    }
}
