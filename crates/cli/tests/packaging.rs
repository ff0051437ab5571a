//! What `packaging/` ships and the binary says about itself: the systemd unit passes
//! `systemd-analyze verify` and its hardening scores as "OK" or better in `systemd-analyze
//! security`; the container image builds and its binary runs; `scripts/package-deb` makes a
//! Debian package holding the binary, the unit, the configuration and the pages; `secrelay manpage` renders pages
//! `man` reads; `secrelay --version` names the version, the commit and the build profile.
//!
//! systemd-analyze is Debian's (the systemd package); where it is missing the unit's test says
//! SKIPPED (under CI too: it is the machine's init system, not a peer `scripts/setup` installs).
//! The image is built only where a container engine answers (`docker info` or `podman info`);
//! elsewhere the test says SKIPPED and why.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn secrelay() -> Command {
    Command::new(env!("CARGO_BIN_EXE_secrelay"))
}

fn tool(name: &str, arg: &str) -> bool {
    Command::new(name)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The unit with its binary pointed at this build's (verify checks that ExecStart's program
/// exists), in a folder of its own.
fn unit_copy() -> (tempfile::TempDir, PathBuf) {
    let unit = std::fs::read_to_string(repo().join("packaging/secrelay.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/local/bin/secrelay serve"),
        "{unit}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secrelay.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/secrelay", env!("CARGO_BIN_EXE_secrelay")),
    )
    .unwrap();
    (dir, path)
}

/// `systemd-analyze verify` of the unit at `path` (and its drop-ins beside it) passes and says
/// nothing about `files`: an unknown or misspelt key is only a warning for verify, so any word
/// about them fails. `--man=no`: the unit names the man page, which is not installed here.
fn verify(path: &Path, files: &[&str]) {
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(path)
        .output()
        .unwrap();
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    for f in files {
        assert!(!said.contains(f), "systemd-analyze verify: {said}");
    }
}

/// A drop-in's settings: its lines but comments and blank ones.
fn settings(drop_in: &str) -> Vec<&str> {
    drop_in
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect()
}

/// The XDP drop-in (packaging/secrelay-xdp.conf) beside the unit verifies: every key known,
/// the capabilities and the system call the filter needs (which the xdp_filter test runs the
/// gateway with) and nothing more.
#[test]
fn the_xdp_drop_in_verifies_and_adds_only_what_the_filter_needs() {
    if !tool("systemd-analyze", "--version") {
        eprintln!("SKIPPED the_xdp_drop_in_verifies_and_adds_only_what_the_filter_needs: no systemd-analyze");
        return;
    }
    let drop_in = std::fs::read_to_string(repo().join("packaging/secrelay-xdp.conf")).unwrap();
    assert_eq!(
        settings(&drop_in),
        [
            "[Service]",
            "CapabilityBoundingSet=CAP_BPF CAP_NET_ADMIN CAP_PERFMON",
            "AmbientCapabilities=CAP_BPF CAP_NET_ADMIN CAP_PERFMON",
            "SystemCallFilter=bpf",
        ]
    );
    let (dir, path) = unit_copy();
    let d = dir.path().join("secrelay.service.d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("xdp.conf"), &drop_in).unwrap();
    verify(&path, &["xdp.conf", "secrelay.service"]);
}

/// The AF_XDP drop-in (packaging/secrelay-af-xdp.conf) beside the unit and the XDP drop-in
/// verifies, and adds only what the XDP sockets need (what the af_xdp test runs the gateway
/// with, beyond the filter's).
#[test]
fn the_af_xdp_drop_in_verifies_and_adds_only_what_the_xdp_sockets_need() {
    if !tool("systemd-analyze", "--version") {
        eprintln!("SKIPPED the_af_xdp_drop_in_verifies_and_adds_only_what_the_xdp_sockets_need: no systemd-analyze");
        return;
    }
    let read = |f: &str| std::fs::read_to_string(repo().join("packaging").join(f)).unwrap();
    let drop_in = read("secrelay-af-xdp.conf");
    assert_eq!(
        settings(&drop_in),
        [
            "[Service]",
            "CapabilityBoundingSet=CAP_NET_RAW CAP_IPC_LOCK",
            "AmbientCapabilities=CAP_NET_RAW CAP_IPC_LOCK",
            "RestrictAddressFamilies=AF_XDP",
        ]
    );
    let (dir, path) = unit_copy();
    let d = dir.path().join("secrelay.service.d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("xdp.conf"), read("secrelay-xdp.conf")).unwrap();
    std::fs::write(d.join("af-xdp.conf"), &drop_in).unwrap();
    verify(&path, &["af-xdp.conf", "xdp.conf", "secrelay.service"]);
}

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    if !tool("systemd-analyze", "--version") {
        eprintln!("SKIPPED the_systemd_unit_verifies_and_is_hardened: no systemd-analyze");
        return;
    }
    let unit = std::fs::read_to_string(repo().join("packaging/secrelay.service")).unwrap();
    for key in [
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=\n",
        "RestrictAddressFamilies=",
        "SystemCallFilter=@system-service",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.contains(key), "the unit lacks {key:?}");
    }
    let (_dir, path) = unit_copy();
    verify(&path, &["secrelay.service"]);
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&path)
        .output()
        .unwrap();
    let said = text(&out);
    let level = said
        .split("Overall exposure level for secrelay.service:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no exposure level: {said}"));
    // systemd calls ≤ 2.0 "OK" (and 0 "perfect"); a service with no hardening scores 9.6.
    assert!(level <= 2.0, "exposure {level}: {said}");
}

/// A container engine that answers: `docker info` or `podman info`.
fn engine() -> Option<&'static str> {
    ["docker", "podman"].into_iter().find(|e| tool(e, "info"))
}

#[test]
fn the_container_image_builds_and_runs() {
    let containerfile = std::fs::read_to_string(repo().join("packaging/Containerfile")).unwrap();
    for key in [
        "AS build",
        "--no-default-features",
        "USER secrelay",
        "VOLUME [\"/etc/secrelay\"]",
        "EXPOSE 8443/tcp 40000/udp 2223/udp",
    ] {
        assert!(
            containerfile.contains(key),
            "the Containerfile lacks {key:?}"
        );
    }
    let Some(engine) = engine() else {
        eprintln!(
            "SKIPPED the_container_image_builds_and_runs: no container engine answers here \
             (`docker info` and `podman info` fail or are missing); the Containerfile was only \
             read"
        );
        return;
    };
    let tag = "secrelay-packaging-test";
    let out = Command::new(engine)
        .args(["build", "-f", "packaging/Containerfile", "-t", tag, "."])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(out.status.success(), "{engine} build: {}", text(&out));
    let out = Command::new(engine)
        .args(["run", "--rm", tag, "--version"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("release build"), "{}", text(&out));
    let out = Command::new(engine)
        .args(["run", "--rm", "--entrypoint", "id", tag, "-u"])
        .output()
        .unwrap();
    assert_ne!(text(&out).trim(), "0", "the image runs as root");
}

#[test]
fn the_man_pages_render() {
    let out = secrelay().arg("manpage").output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(
        page.starts_with(".ie") || page.contains(".TH secrelay 1"),
        "{page}"
    );
    for s in ["serve", "demo", "ca", "srtp", "manpage"] {
        assert!(page.contains(s), "{s} missing from secrelay.1");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = secrelay()
        .args(["manpage", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let serve = std::fs::read_to_string(dir.path().join("secrelay-serve.1"))
        .expect("secrelay-serve.1 written");
    for flag in ["udp", "https", "log\\-format", "announce"] {
        assert!(serve.contains(flag), "{flag} missing from secrelay-serve.1");
    }
    // Rendered by man itself, where it is installed.
    if tool("man", "--version") {
        let out = Command::new("man")
            .arg("-l")
            .arg(dir.path().join("secrelay-serve.1"))
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "100")
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "man -l: {}", text(&out));
        assert!(shown.contains("--udp"), "{shown}");
        assert!(!shown.contains(".TH"), "unrendered roff: {shown}");
    }
}

#[test]
fn version_names_the_commit_and_the_profile() {
    let out = secrelay().arg("--version").output().unwrap();
    assert!(out.status.success());
    let v = String::from_utf8(out.stdout).unwrap();
    let v = v.trim();
    let want = format!("secrelay {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(v.starts_with(&want), "{v}");
    let commit = v[want.len()..].split(',').next().unwrap();
    assert!(
        v.ends_with("debug build)") || v.ends_with("release build)"),
        "{v}"
    );
    // Built from a git checkout: its HEAD (the build script reruns when HEAD moves).
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo())
        .output();
    match head {
        Ok(h) if h.status.success() && std::env::var_os("SECRELAY_COMMIT").is_none() => {
            assert_eq!(commit, String::from_utf8_lossy(&h.stdout).trim(), "{v}");
        }
        _ => assert!(!commit.is_empty(), "{v}"),
    }
}

/// `dpkg-deb -f DEB FIELD`.
fn deb_field(deb: &Path, field: &str) -> String {
    let out = Command::new("dpkg-deb")
        .arg("-f")
        .arg(deb)
        .arg(field)
        .output()
        .unwrap();
    assert!(out.status.success(), "dpkg-deb -f {field}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn the_debian_package_installs_the_binary_unit_configuration_and_pages() {
    if !tool("dpkg-deb", "--version") || !tool("dpkg-shlibdeps", "--version") {
        assert!(
            std::env::var_os("CI").is_none(),
            "dpkg-deb and dpkg-shlibdeps are missing (scripts/setup installs dpkg-dev)"
        );
        eprintln!("SKIPPED the_debian_package_…: no dpkg-deb or dpkg-shlibdeps");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(repo().join("scripts/package-deb"))
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_secrelay"))
        .arg("--out")
        .arg(dir.path())
        .arg("--fast")
        .output()
        .unwrap();
    assert!(out.status.success(), "package-deb: {}", text(&out));
    let deb = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(deb.is_file(), "package-deb named {deb:?}");
    assert_eq!(deb_field(&deb, "Package"), "secrelay");
    assert_eq!(deb_field(&deb, "Version"), env!("CARGO_PKG_VERSION"));
    // The libraries the binary links, as the packages that hold them.
    let depends = deb_field(&deb, "Depends");
    for lib in ["libc6", "libssl3"] {
        assert!(depends.contains(lib), "Depends: {depends}");
    }
    let control = dir.path().join("DEBIAN");
    let out = Command::new("dpkg-deb")
        .arg("-e")
        .arg(&deb)
        .arg(&control)
        .output()
        .unwrap();
    assert!(out.status.success(), "dpkg-deb -e: {}", text(&out));
    // An upgrade keeps the operator's configuration.
    assert_eq!(
        std::fs::read_to_string(control.join("conffiles")).unwrap(),
        "/etc/secrelay/secrelay.toml\n"
    );
    let root = dir.path().join("root");
    let out = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&root)
        .output()
        .unwrap();
    assert!(out.status.success(), "dpkg-deb -x: {}", text(&out));
    // The binary runs from where the package puts it.
    let out = Command::new(root.join("usr/bin/secrelay"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).starts_with(concat!("secrelay ", env!("CARGO_PKG_VERSION"))));
    assert_eq!(
        std::fs::read(root.join("etc/secrelay/secrelay.toml")).unwrap(),
        std::fs::read(repo().join("packaging/secrelay.toml")).unwrap()
    );
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/secrelay.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/bin/secrelay serve --config /etc/secrelay/secrelay.toml"),
        "{unit}"
    );
    assert!(!unit.contains("/usr/local"), "{unit}");
    for drop_in in [
        "secrelay-xdp.conf",
        "secrelay-af-xdp.conf",
        "60-secrelay-buffers.conf",
    ] {
        assert_eq!(
            std::fs::read(root.join("usr/share/doc/secrelay/examples").join(drop_in)).unwrap(),
            std::fs::read(repo().join("packaging").join(drop_in)).unwrap()
        );
    }
    for page in [
        "secrelay.1.gz",
        "secrelay-serve.1.gz",
        "secrelay-token-create.1.gz",
    ] {
        let path = root.join("usr/share/man/man1").join(page);
        assert!(path.is_file(), "no {page} in the package");
    }
}
