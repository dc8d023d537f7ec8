//! The Landlock + seccomp confinement backend: confines the calling process (a
//! single-threaded helper about to exec a native program) to the paths and ports it is
//! granted, and reports exactly what the kernel enforces.
//!
//! Four layers, applied in this order, each before the next:
//! 1. **Rule paths opened here.** Each granted path is opened (`O_PATH`) by this
//!    backend; a path that cannot be opened is an error at the required level and a
//!    gap at best effort, never a rule silently dropped.
//! 2. **Landlock.** The filesystem rights of ABI 3 are required (or best effort at that
//!    level); rights of newer ABIs (device ioctl, pathname unix sockets), TCP port rules
//!    (ABI 4) and scopes (abstract unix sockets and signals, ABI 6) are taken where the
//!    kernel has them. TCP rules name ports, not hosts.
//! 3. **Capabilities dropped.** A program confined as root keeps no capability (bounding
//!    set, ambient, inheritable, permitted, effective), so it cannot load a module or
//!    mount its way out.
//! 4. **seccomp.** See [`mod@seccomp`]: sockets beyond the grant, io_uring, ptrace,
//!    mode, owner, xattr and inode-flag changes, and the other calls Landlock does not
//!    cover are refused with `EPERM` (timestamps too when no file is granted write); a
//!    foreign architecture and the x32 syscall range kill the process.
//!
//! `no_new_privs` is set before the first of them.
//!
//! # Guarantees
//! - At [`ConfinementLevel::REQUIRED`] the backend returns an error, and the host starts
//!   nothing, unless the ABI-3 filesystem rights, every rule path, the TCP port rules
//!   (when the network is granted), `no_new_privs`, the capability drop and the seccomp
//!   filter are all in force.
//! - The report's `details` name the kernel and effective Landlock ABIs, each handled
//!   right, the rule set, the seccomp program's SHA-256 and what it denies.
//!
//! # Non-guarantees
//! - Landlock port rules cannot tell hosts apart: `--allow-net example.com:443` lets the
//!   program reach port 443 on any host.
//! - Descriptors already open when the confinement is applied keep their access; the
//!   host closes every inherited descriptor but stdio before applying it.
//! - `/proc` of other processes is as visible as Landlock leaves it (readable where a
//!   rule grants `/proc`).
//! - Timestamps: once any file or directory is granted write, `utimensat` and its
//!   older forms are allowed on every path, so the program can set the times of a
//!   file it may only read, or of one outside the grant that its user owns. Landlock
//!   has no right for them and the filter cannot tell one path from another.
//! - The `ioctl` commands that change a file through a read-only descriptor are
//!   refused by number, from a list (see [`mod@seccomp`]): a filesystem's own command
//!   not on it is not refused. `FIDEDUPERANGE` is left allowed: its target may be a
//!   file opened read-only that the caller owns, but the kernel only shares ranges
//!   whose bytes are already equal, so no content changes.
//! - Advisory locks and leases (`flock`, `fcntl`) on a file the program can open are
//!   not restricted: it can make other processes wait on that file.

use aegis_record::json::{Object, Value};
use aegis_station_api::abi_stable::std_types::{RString, RVec};
use aegis_station_api::{
    Confinement, ConfinementLevel, ConfinementReport, ConfinementRequest, Enforcement, ErrorKind,
    PluginError,
};

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub mod seccomp;

/// The backend's configuration (its profile section). It has no settings yet; any key
/// is refused, so a misspelt one is not silently ignored.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {}

/// The Landlock + seccomp backend.
#[derive(Debug)]
pub struct LandlockBackend;

impl LandlockBackend {
    /// Builds the backend from its config section (TOML text; empty is fine).
    ///
    /// # Errors
    /// A config that is not TOML, or that has any key.
    pub fn from_config(config: &str) -> Result<LandlockBackend, PluginError> {
        toml::from_str::<Config>(config).map_err(|e| {
            PluginError::new(
                ErrorKind::CONFIG,
                format!("confine-landlock: {}", e.message()),
            )
        })?;
        Ok(LandlockBackend)
    }
}

aegis_station_api::plugin_module! {
    pub fn plugin_module {
        name: "confine-landlock",
        version: env!("CARGO_PKG_VERSION"),
        confinement: LandlockBackend::from_config,
    }
}

/// A request in owned, checked form.
#[derive(Debug)]
pub struct Grant {
    /// Read beneath.
    pub read: Vec<String>,
    /// Read and execute beneath.
    pub exec: Vec<String>,
    /// Read, write, create, remove beneath.
    pub write: Vec<String>,
    /// TCP ports the program may connect to (from `host:port`).
    pub connect_ports: Vec<u16>,
    /// Whether any network is granted.
    pub net: bool,
    /// Refuse instead of reporting a gap.
    pub required: bool,
}

fn refused(message: impl Into<String>) -> PluginError {
    PluginError::new(ErrorKind::REFUSED, message)
}

impl Grant {
    /// Checks a request: absolute paths, `host:port` destinations, a known level.
    ///
    /// # Errors
    /// The first thing wrong with it, in one line.
    pub fn from_request(request: &ConfinementRequest<'_>) -> Result<Grant, PluginError> {
        let required = match request.level {
            ConfinementLevel::REQUIRED => true,
            ConfinementLevel::BEST_EFFORT => false,
            other => {
                return Err(refused(format!(
                    "confine-landlock: unknown confinement level {}",
                    other.0
                )));
            }
        };
        let paths = |list: &[aegis_station_api::abi_stable::std_types::RStr<'_>],
                     what: &str|
         -> Result<Vec<String>, PluginError> {
            list.iter()
                .map(|p| {
                    if p.as_str().starts_with('/') {
                        Ok(p.as_str().to_owned())
                    } else {
                        Err(refused(format!(
                            "confine-landlock: {what} path {:?} is not absolute",
                            p.as_str()
                        )))
                    }
                })
                .collect()
        };
        let mut connect_ports = Vec::new();
        for d in request.net_connect.iter() {
            connect_ports.push(port_of(d.as_str())?);
        }
        connect_ports.sort_unstable();
        connect_ports.dedup();
        Ok(Grant {
            read: paths(request.read_paths.as_slice(), "read")?,
            exec: paths(request.exec_paths.as_slice(), "exec")?,
            write: paths(request.write_paths.as_slice(), "write")?,
            net: !connect_ports.is_empty(),
            connect_ports,
            required,
        })
    }
}

/// The port of a `host:port` destination (`[v6]:port` too).
fn port_of(destination: &str) -> Result<u16, PluginError> {
    let bad = || {
        refused(format!(
            "confine-landlock: network destination {destination:?} is not HOST:PORT with a port from 1 to 65535"
        ))
    };
    let (host, port) = destination.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() {
        return Err(bad());
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => Ok(p),
        _ => Err(bad()),
    }
}

/// What was enforced, gathered while applying.
#[derive(Debug, Default)]
pub struct Enforced {
    /// One line per requested restriction not enforced.
    pub gaps: Vec<String>,
    /// The report's `details` object.
    pub details: Object,
    /// The kernel's Landlock ABI (0 without Landlock).
    pub abi: u32,
}

impl Confinement for LandlockBackend {
    fn apply(&self, request: &ConfinementRequest<'_>) -> Result<ConfinementReport, PluginError> {
        let grant = Grant::from_request(request)?;
        let enforced = apply_grant(&grant)?;
        let enforcement = if enforced.gaps.is_empty() {
            Enforcement::FULL
        } else {
            Enforcement::PARTIAL
        };
        Ok(ConfinementReport {
            enforcement,
            abi: enforced.abi,
            gaps: RVec::from(
                enforced
                    .gaps
                    .into_iter()
                    .map(RString::from)
                    .collect::<Vec<_>>(),
            ),
            details: RString::from(
                String::from_utf8(Value::Object(enforced.details).to_canonical())
                    .unwrap_or_default(),
            ),
        })
    }
}

#[cfg(target_os = "linux")]
fn apply_grant(grant: &Grant) -> Result<Enforced, PluginError> {
    linux::apply(grant)
}

#[cfg(not(target_os = "linux"))]
fn apply_grant(grant: &Grant) -> Result<Enforced, PluginError> {
    if grant.required {
        return Err(refused(
            "confine-landlock: Landlock and seccomp exist only on Linux",
        ));
    }
    Ok(Enforced {
        gaps: vec!["nothing is enforced: Landlock and seccomp exist only on Linux".into()],
        ..Enforced::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_need_a_host_and_a_port() {
        assert_eq!(port_of("example.com:443").unwrap(), 443);
        assert_eq!(port_of("[::1]:8080").unwrap(), 8080);
        for bad in ["example.com", ":443", "h:0", "h:65536", "h:+1", "h:"] {
            assert!(port_of(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn any_config_key_is_refused() {
        assert!(LandlockBackend::from_config("").is_ok());
        let e = LandlockBackend::from_config("seccomp = false").unwrap_err();
        assert_eq!(e.kind, ErrorKind::CONFIG);
        assert!(e.message.contains("seccomp"), "{}", e.message);
    }
}
