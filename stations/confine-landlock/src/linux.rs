//! Applying a [`Grant`] on Linux: rule paths, Landlock, capabilities, seccomp.

use aegis_record::digest::encode_hex;
use aegis_record::json::{Object, Value};
use aegis_station_api::PluginError;
use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, NetPort,
    PathBeneath, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use std::os::fd::{AsRawFd, OwnedFd};

use crate::seccomp::{self, Filter, FilterPlan};
use crate::{Enforced, Grant, refused};

/// The newest ABI this build knows; rights beyond the kernel's are dropped (best effort)
/// and reported.
const NEWEST: ABI = ABI::V10;

fn names<T: enumflags2::BitFlag + std::fmt::Debug>(set: BitFlags<T>) -> Value {
    Value::Array(set.iter().map(|r| Value::from(format!("{r:?}"))).collect())
}

fn strings(list: &[String]) -> Value {
    Value::Array(list.iter().map(|s| Value::from(s.as_str())).collect())
}

/// Opens one rule path (`O_PATH`) and says what it opened when that is not the path as
/// given. A lexically plain absolute path opened without following any symlink names
/// itself; only a path that needed one is read back from `/proc/self/fd`, which costs a
/// few microseconds a path at every confined start.
fn open_rule_path(path: &str) -> std::io::Result<(OwnedFd, Option<String>)> {
    use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};
    let flags = OFlags::PATH | OFlags::CLOEXEC;
    if is_plain(path)
        && let Ok(fd) = rustix::fs::openat2(
            CWD,
            path,
            flags,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
    {
        return Ok((fd, None));
    }
    // A symlink on the way, an old kernel without openat2, or a path to normalise.
    let fd = rustix::fs::openat(CWD, path, flags, Mode::empty())?;
    let opened = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| p != path);
    Ok((fd, opened))
}

/// A character or block device (what `fd`, opened `O_PATH`, names).
fn is_device(fd: &OwnedFd) -> bool {
    use rustix::fs::FileType;
    rustix::fs::fstat(fd).is_ok_and(|st| {
        matches!(
            FileType::from_raw_mode(st.st_mode),
            FileType::CharacterDevice | FileType::BlockDevice
        )
    })
}

/// Absolute, with no empty, `.` or `..` component: the path a kernel would report back.
fn is_plain(path: &str) -> bool {
    path == "/"
        || path.strip_prefix('/').is_some_and(|rest| {
            rest.split('/')
                .all(|c| !c.is_empty() && c != "." && c != "..")
        })
}

/// The rule paths as opened, and what the report says of them.
struct RulePaths {
    rules: Vec<PathBeneath<OwnedFd>>,
    /// The paths that could not be opened (best effort only).
    unopened: Vec<Value>,
    /// A rule binds what the path named when it was opened: a symlink grants its target.
    /// Where that differs from the path given, the report says what was opened.
    followed: Vec<Value>,
    /// Whether any write rule names a file or directory rather than a device (the
    /// exec-support set grants `/dev/null` write to every program): without one the
    /// program has no file whose times it needs to set (see [`FilterPlan`]). A path
    /// that cannot be stat'ed counts as a file, which keeps the filter's choice on the
    /// side that breaks nothing.
    writes_files: bool,
}

/// What Landlock enforces here once this process is restricted.
struct Landlocked {
    effective: ABI,
    kernel_abi: u32,
    no_new_privs: bool,
    fs_on: BitFlags<AccessFs>,
    net_on: BitFlags<AccessNet>,
    scopes_on: BitFlags<Scope>,
}

pub(crate) fn apply(grant: &Grant) -> Result<Enforced, PluginError> {
    let mut gaps = Vec::new();

    // 1. Every rule path, opened here so that one that cannot be is reported.
    let paths = open_rule_paths(grant, &mut gaps)?;

    // 2. Landlock.
    let landlocked = restrict_with_landlock(grant, paths.rules, &mut gaps)?;

    // 3. No capability survives into the program, even as root.
    let caps = drop_capabilities(grant.required)?;

    // 4. seccomp, last: nothing after it needs what it refuses.
    let plan = FilterPlan {
        net: grant.net,
        landlock_restricts_unix: landlocked.fs_on.contains(AccessFs::ResolveUnix),
        writes_files: paths.writes_files,
    };
    let filter = install_seccomp(grant, plan, &mut gaps)?;

    let details = report_details(
        grant,
        &landlocked,
        paths.unopened,
        paths.followed,
        &filter,
        caps,
    );
    Ok(Enforced {
        gaps,
        details,
        abi: landlocked.kernel_abi,
    })
}

/// Opens the read, exec and write rule paths with their rights. One that cannot be
/// opened refuses a required grant and is a gap in a best-effort one.
fn open_rule_paths(grant: &Grant, gaps: &mut Vec<String>) -> Result<RulePaths, PluginError> {
    let read_only = AccessFs::ReadFile | AccessFs::ReadDir;
    let exec = read_only | AccessFs::Execute;
    let write = AccessFs::from_all(NEWEST) & !AccessFs::Execute;
    let mut paths = RulePaths {
        rules: Vec::new(),
        unopened: Vec::new(),
        followed: Vec::new(),
        writes_files: false,
    };
    for (list, access) in [
        (&grant.read, read_only),
        (&grant.exec, exec),
        (&grant.write, write),
    ] {
        for path in list {
            match open_rule_path(path) {
                Ok((fd, opened)) => {
                    if let Some(opened) = opened {
                        let mut o = Object::new();
                        o.insert("asked", path.as_str());
                        o.insert("opened", opened);
                        paths.followed.push(Value::Object(o));
                    }
                    if access == write && !is_device(&fd) {
                        paths.writes_files = true;
                    }
                    paths.rules.push(PathBeneath::new(fd, access));
                }
                Err(why) => {
                    if grant.required {
                        return Err(refused(format!(
                            "confine-landlock: cannot open rule path {path}: {why}"
                        )));
                    }
                    gaps.push(format!("rule path {path} could not be opened ({why})"));
                    paths.unopened.push(Value::from(path.as_str()));
                }
            }
        }
    }
    Ok(paths)
}

fn landlock_refused(e: landlock::RulesetError) -> PluginError {
    refused(format!(
        "confine-landlock: Landlock cannot enforce what is required: {e}"
    ))
}

/// Restricts this process with a ruleset handling every right this build knows; what
/// the kernel does not enforce refuses a required grant or becomes a gap.
fn restrict_with_landlock(
    grant: &Grant,
    rules: Vec<PathBeneath<OwnedFd>>,
    gaps: &mut Vec<String>,
) -> Result<Landlocked, PluginError> {
    let handled_fs = AccessFs::from_all(NEWEST);
    let handled_net = AccessNet::BindTcp | AccessNet::ConnectTcp;
    let scopes = Scope::AbstractUnixSocket | Scope::Signal;
    let created = create_ruleset(grant, handled_fs, handled_net, scopes)?;
    let created = add_rules(created, rules, &grant.connect_ports)?;
    let status = created.restrict_self().map_err(landlock_refused)?;
    let (effective, kernel_abi) = abi_levels(&status.landlock);
    if grant.required && (status.ruleset == RulesetStatus::NotEnforced || !status.no_new_privs) {
        return Err(refused(format!(
            "confine-landlock: Landlock is not enforced here (kernel ABI {kernel_abi}, no_new_privs {})",
            status.no_new_privs
        )));
    }
    if !status.no_new_privs {
        gaps.push("no_new_privs could not be set".into());
    }
    let landlocked = Landlocked {
        effective,
        kernel_abi,
        no_new_privs: status.no_new_privs,
        fs_on: handled_fs & AccessFs::from_all(effective),
        net_on: handled_net & AccessNet::from_all(effective),
        scopes_on: scopes & Scope::from_all(effective),
    };
    landlocked.report_gaps(grant, handled_fs & !landlocked.fs_on, gaps);
    Ok(landlocked)
}

/// The ruleset, before its rules. ABI-3 filesystem rights are the floor at the required
/// level; TCP rights are required only when a required grant asks for network.
fn create_ruleset(
    grant: &Grant,
    handled_fs: BitFlags<AccessFs>,
    handled_net: BitFlags<AccessNet>,
    scopes: BitFlags<Scope>,
) -> Result<RulesetCreated, PluginError> {
    let floor = if grant.required {
        CompatLevel::HardRequirement
    } else {
        CompatLevel::BestEffort
    };
    let net_level = if grant.required && grant.net {
        CompatLevel::HardRequirement
    } else {
        CompatLevel::BestEffort
    };
    Ruleset::default()
        .set_compatibility(floor)
        .handle_access(AccessFs::from_all(ABI::V3))
        .and_then(|r| {
            r.set_compatibility(CompatLevel::BestEffort)
                .handle_access(handled_fs)
        })
        .and_then(|r| r.set_compatibility(net_level).handle_access(handled_net))
        .and_then(|r| r.set_compatibility(CompatLevel::BestEffort).scope(scopes))
        .and_then(Ruleset::create)
        .map_err(landlock_refused)
}

/// Adds the path rules and a connect rule for each granted TCP port.
fn add_rules(
    created: RulesetCreated,
    rules: Vec<PathBeneath<OwnedFd>>,
    connect_ports: &[u16],
) -> Result<RulesetCreated, PluginError> {
    // A rule narrower than asked (a file given directory rights) is narrowed, not refused.
    let mut created = created.set_compatibility(CompatLevel::BestEffort);
    for rule in rules {
        created = created.add_rule(rule).map_err(landlock_refused)?;
    }
    for port in connect_ports {
        created = created
            .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
            .map_err(landlock_refused)?;
    }
    Ok(created)
}

/// The ABI the ruleset was enforced at and the kernel's own (both unsupported, 0, without
/// Landlock).
fn abi_levels(landlock: &LandlockStatus) -> (ABI, u32) {
    match *landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => (
            effective_abi,
            kernel_abi.map_or(effective_abi as u32, |v| u32::try_from(v).unwrap_or(0)),
        ),
        _ => (ABI::Unsupported, 0),
    }
}

impl Landlocked {
    /// A gap for each right the kernel's ABI leaves unenforced.
    fn report_gaps(&self, grant: &Grant, fs_off: BitFlags<AccessFs>, gaps: &mut Vec<String>) {
        let kernel_abi = self.kernel_abi;
        for right in fs_off.iter() {
            // Pathname unix sockets are refused by seccomp instead (see below).
            if right != AccessFs::ResolveUnix {
                gaps.push(format!(
                    "landlock: filesystem right {right:?} needs a newer kernel (ABI {})",
                    self.effective as u32
                ));
            }
        }
        if self.net_on.is_empty() && grant.net {
            gaps.push(format!(
                "landlock: TCP port rules need ABI 4 (kernel ABI {kernel_abi}); any TCP port is reachable"
            ));
        }
        if !self.scopes_on.contains(Scope::Signal) {
            gaps.push(format!(
                "landlock: signals to processes outside the sandbox need ABI 6 (kernel ABI {kernel_abi})"
            ));
        }
    }
}

/// Builds the seccomp filter and installs its programs. A program the kernel refuses
/// refuses a required grant and is a gap in a best-effort one.
fn install_seccomp(
    grant: &Grant,
    plan: FilterPlan,
    gaps: &mut Vec<String>,
) -> Result<Filter, PluginError> {
    let filter = seccomp::build(plan).map_err(|e| refused(format!("confine-landlock: {e}")))?;
    for program in &filter.programs {
        if let Err(e) = seccompiler::apply_filter(program) {
            if grant.required {
                return Err(refused(format!(
                    "confine-landlock: the seccomp filter was refused: {e}"
                )));
            }
            gaps.push(format!("seccomp: a filter was refused ({e})"));
        }
    }
    Ok(filter)
}

/// The report's `details` object.
fn report_details(
    grant: &Grant,
    landlocked: &Landlocked,
    unopened: Vec<Value>,
    followed: Vec<Value>,
    filter: &Filter,
    caps: Value,
) -> Object {
    let mut details = Object::new();
    details.insert("backend", "confine-landlock");
    details.insert(
        "level",
        if grant.required {
            "required"
        } else {
            "best_effort"
        },
    );
    details.insert("landlock", landlock_details(landlocked));
    details.insert("rules", rules_details(grant, unopened, followed));
    details.insert("seccomp", seccomp_details(filter));
    details.insert("no_new_privs", landlocked.no_new_privs);
    details.insert("capabilities", caps);
    details
}

fn landlock_details(landlocked: &Landlocked) -> Object {
    let mut landlock = Object::new();
    landlock.insert("kernel_abi", landlocked.kernel_abi);
    landlock.insert("effective_abi", landlocked.effective as u32);
    landlock.insert("handled_fs", names(landlocked.fs_on));
    landlock.insert("handled_net", names(landlocked.net_on));
    landlock.insert("scopes", names(landlocked.scopes_on));
    landlock.insert(
        "ports_not_hosts",
        "TCP rules name ports: a granted port is reachable on every host",
    );
    landlock
}

fn rules_details(grant: &Grant, unopened: Vec<Value>, followed: Vec<Value>) -> Object {
    let mut rules = Object::new();
    rules.insert("read", strings(&grant.read));
    rules.insert("exec", strings(&grant.exec));
    rules.insert("write", strings(&grant.write));
    rules.insert(
        "connect_tcp_ports",
        Value::Array(
            grant
                .connect_ports
                .iter()
                .map(|p| Value::from(*p))
                .collect(),
        ),
    );
    rules.insert("unopened", Value::Array(unopened));
    rules.insert("followed", Value::Array(followed));
    rules
}

fn seccomp_details(filter: &Filter) -> Object {
    let mut sc = Object::new();
    sc.insert("sha256", encode_hex(&filter.sha256()));
    sc.insert(
        "denied",
        Value::Array(filter.denied.iter().map(|d| Value::from(*d)).collect()),
    );
    sc.insert(
        "kills",
        "a foreign architecture; on x86_64 the x32 syscall range",
    );
    sc.insert(
        "programs",
        u32::try_from(filter.programs.len()).unwrap_or(u32::MAX),
    );
    sc
}

/// Clears every capability set; the bounding set first, while CAP_SETPCAP is still held.
fn drop_capabilities(required: bool) -> Result<Value, PluginError> {
    use caps::{CapSet, Capability};
    let had_setpcap =
        caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).unwrap_or(false);
    let mut steps: Vec<(CapSet, &str)> = Vec::new();
    if had_setpcap {
        steps.push((CapSet::Bounding, "bounding"));
    }
    steps.extend([
        (CapSet::Ambient, "ambient"),
        (CapSet::Inheritable, "inheritable"),
        (CapSet::Effective, "effective"),
        (CapSet::Permitted, "permitted"),
    ]);
    let mut cleared = Vec::new();
    for (set, name) in steps {
        match caps::clear(None, set) {
            Ok(()) => cleared.push(Value::from(name)),
            Err(e) => {
                if required {
                    return Err(refused(format!(
                        "confine-landlock: could not clear the {name} capability set: {e}"
                    )));
                }
            }
        }
    }
    let left = caps::read(None, CapSet::Permitted).map_or(0, |s| s.len());
    if left != 0 {
        return Err(refused(format!(
            "confine-landlock: {left} capabilities are still permitted after dropping them"
        )));
    }
    let mut o = Object::new();
    o.insert("cleared", Value::Array(cleared));
    o.insert("bounding_cleared", had_setpcap);
    Ok(Value::Object(o))
}

#[cfg(test)]
mod tests {
    use super::{is_plain, open_rule_path};

    #[test]
    fn only_absolute_paths_without_dot_or_empty_components_are_plain() {
        for plain in ["/", "/etc", "/etc/ssl/certs", "/a b/c"] {
            assert!(is_plain(plain), "{plain}");
        }
        for not in [
            "",
            "etc",
            "/etc/",
            "//etc",
            "/etc/./ssl",
            "/etc/../root",
            "/.",
            "/..",
        ] {
            assert!(!is_plain(not), "{not}");
        }
    }

    /// The fast path must never hide a symlink: one anywhere on the path, or a `..`,
    /// is reported with what was opened; a plain path is not.
    #[test]
    fn what_a_rule_path_opened_is_reported_unless_it_is_the_path_itself() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let real = root.join("real");
        std::fs::create_dir_all(real.join("sub")).unwrap();
        std::os::unix::fs::symlink(&real, root.join("link")).unwrap();
        let s = |p: &std::path::Path| p.to_str().unwrap().to_owned();
        let opened = |p: &str| open_rule_path(p).unwrap().1;

        assert_eq!(opened(&s(&real.join("sub"))), None);
        assert_eq!(opened(&s(&root.join("link"))), Some(s(&real)));
        assert_eq!(
            opened(&s(&root.join("link/sub"))),
            Some(s(&real.join("sub")))
        );
        assert_eq!(opened(&format!("{}/real/sub/..", s(&root))), Some(s(&real)));
        assert!(open_rule_path(&s(&root.join("missing"))).is_err());
    }
}
