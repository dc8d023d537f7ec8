//! `aegis plugins list`, `aegis profiles list` and `aegis profiles show`.

use aegis_runtime::{Origin, Plugin, Profile, Registry};
use std::fmt::Write as _;
use std::path::PathBuf;

fn origin(p: &Plugin) -> String {
    match p.origin() {
        Origin::Builtin => "builtin".to_owned(),
        Origin::Library { path, sha256 } => {
            let hex = aegis_record::digest::encode_hex(&sha256[..8]);
            format!("{} (sha256 {hex}…)", path.display())
        }
    }
}

fn row(p: &Plugin) -> String {
    let m = p.metadata();
    format!(
        "{:<16} {:<9} {:<4} {:<26} {}\n",
        m.name,
        m.version,
        m.api_major,
        m.kind_names().join(","),
        origin(p)
    )
}

pub fn list(paths: &[PathBuf]) -> u8 {
    let registry = Registry::new();
    let mut out = format!(
        "{:<16} {:<9} {:<4} {:<26} {}\n",
        "NAME", "VERSION", "API", "KINDS", "SOURCE"
    );
    for p in registry.builtins() {
        out.push_str(&row(p));
    }
    let dirs = (!paths.is_empty()).then_some(paths);
    for (path, loaded) in registry.discover(dirs) {
        match loaded {
            Ok(p) => out.push_str(&row(&p)),
            Err(e) => {
                let _ = (
                    path,
                    writeln!(
                        out,
                        "{:<16} {:<9} {:<4} {:<26} refused: {e}",
                        "-", "-", "-", "-"
                    ),
                );
            }
        }
    }
    let _ = crate::print(shown(&out).as_bytes());
    crate::exit::OK
}

pub fn list_profiles() -> u8 {
    let mut out = format!("{:<16} {:<40} {}\n", "NAME", "SOURCE", "DESCRIPTION");
    for p in Profile::list() {
        match p {
            Ok(p) => {
                let _ = writeln!(
                    out,
                    "{:<16} {:<40} {}",
                    p.name,
                    p.source.to_string(),
                    p.description
                );
            }
            Err(e) => {
                let _ = writeln!(out, "{:<16} {:<40} refused: {e}", "-", "-");
            }
        }
    }
    let _ = crate::print(shown(&out).as_bytes());
    crate::exit::OK
}

pub fn show_profile(name: &str) -> u8 {
    let profile = match crate::use_profile(name) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let registry = Registry::new();
    let sha = aegis_record::digest::encode_hex(&profile.sha256);
    let mut out = String::new();
    let _ = writeln!(out, "name         {}", profile.name);
    let _ = writeln!(out, "description  {}", profile.description);
    let _ = writeln!(out, "source       {}", profile.source);
    let _ = writeln!(out, "sha256       {sha}");
    let mut refused = false;
    let mut station =
        |out: &mut String, label: &str, key: &'static str, choice: &aegis_runtime::PluginChoice| {
            match profile.resolve(&registry, key, choice) {
                Ok(p) => {
                    let m = p.metadata();
                    let _ = writeln!(
                        out,
                        "{label:<12} {} {} from {}",
                        m.name,
                        m.version,
                        origin(&p)
                    );
                    for line in choice.config.lines() {
                        let _ = writeln!(out, "{:<12}   {line}", "");
                    }
                }
                Err(e) => {
                    refused = true;
                    let _ = writeln!(out, "{label:<12} refused: {e}");
                }
            }
        };
    station(&mut out, "policy", "policy", &profile.policy);
    let _ = writeln!(
        out,
        "capability   host (default-deny grants; never a plugin)"
    );
    match &profile.confinement {
        None => {
            let _ = writeln!(
                out,
                "sandbox      host wasmtime sandbox; native programs run unconfined"
            );
        }
        Some(c) => {
            let _ = writeln!(
                out,
                "sandbox      host wasmtime sandbox; native programs confined ({}):",
                if c.best_effort {
                    "best-effort"
                } else {
                    "required"
                }
            );
            station(&mut out, "  confinement", "sandbox.confinement", &c.plugin);
        }
    }
    station(&mut out, "audit", "audit", &profile.audit);
    let _ = crate::print(shown(&out).as_bytes());
    if refused {
        crate::exit::REFUSED
    } else {
        crate::exit::OK
    }
}

pub fn export(profile: &str, out: &std::path::Path, force: bool) -> u8 {
    let profile = match crate::use_profile(profile) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let registry = Registry::new();
    let plugin = match profile.resolve(&registry, "audit", &profile.audit) {
        Ok(p) => p,
        Err(e) => {
            crate::error(e);
            return crate::exit::REFUSED;
        }
    };
    let sink = match plugin.audit_sink(&profile.audit.config) {
        Ok(s) => s,
        Err(e) => {
            let busy = e.kind == aegis_station_api::ErrorKind::BUSY;
            crate::error(profile.plugin_error("audit", &profile.audit, e.to_string()));
            return if busy {
                crate::exit::BUSY
            } else {
                crate::exit::REFUSED
            };
        }
    };
    // --force replaces an earlier export and nothing else: a device, a FIFO or a link
    // (whose target would be truncated) at `out` is refused. The file is then made
    // afresh with O_EXCL, which never follows a link planted after the check.
    match std::fs::symlink_metadata(out) {
        Ok(meta) if !meta.file_type().is_file() => {
            crate::error(format_args!(
                "{}: is not a regular file; export writes only a file of its own",
                out.display()
            ));
            return crate::exit::TAMPERED_OR_USAGE;
        }
        Ok(_) if force => {
            if let Err(e) = std::fs::remove_file(out) {
                crate::error(format_args!("{}: {e}", out.display()));
                return crate::exit::UNREADABLE;
            }
        }
        _ => {}
    }
    let file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(out)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            crate::error(format_args!(
                "{}: already exists (pass --force to replace it)",
                out.display()
            ));
            return crate::exit::TAMPERED_OR_USAGE;
        }
        Err(e) => {
            crate::error(format_args!("{}: {e}", out.display()));
            return crate::exit::UNREADABLE;
        }
    };
    let mut writer = std::io::BufWriter::new(file);
    match aegis_runtime::export(&sink, &mut writer) {
        Ok(n) => {
            crate::say(format_args!(
                "exported {n} lines from {} to {}",
                sink.location(),
                out.display()
            ));
            crate::exit::OK
        }
        Err(e) => {
            crate::error(format_args!("{}: {e}", out.display()));
            crate::exit::UNREADABLE
        }
    }
}

/// A listing as it may reach a terminal: plugin metadata, profile descriptions and
/// error text come from files and libraries, so their control characters are escaped.
fn shown(listing: &str) -> std::borrow::Cow<'_, str> {
    aegis_record::text::escape_keeping_lines(listing)
}
