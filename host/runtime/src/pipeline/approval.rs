//! A call resumed under an approval: is it what was approved, and is its grant within
//! the approved scope. And the scope a park states, for the approval to grant.

use super::*;
use aegis_record::{FsScope, NetScope};
use std::path::{Component, Path};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The execution's reason, before the difference, for a resumed call that is not what
/// was approved: no station is asked about it.
pub const APPROVAL_MISMATCH: &str =
    "the call is not what its approval approved, so no station was asked";

/// The reason's start when a resumed call's grant holds authority the approval did not.
pub const OUTSIDE_SCOPE: &str = "outside the approved scope";

/// Now plus `after`, in the record's one time form.
pub(super) fn time_after(after: Duration) -> String {
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_add(after);
    aegis_record::time::format_micros(u64::try_from(at.as_micros()).unwrap_or(u64::MAX))
}

/// Why the call stated by `tool_id` and `digest` at `now` is not what `approval`
/// approved; `Ok` when it is.
pub(super) fn matches(
    approval: &Approval,
    tool_id: &str,
    digest: ArgumentsDigest,
    now: &str,
) -> Result<(), String> {
    let scope = &approval.scope;
    let id = &approval.approval_id;
    if scope.tool_id != tool_id {
        return Err(format!(
            "approval {id} is for tool {:?}, not {tool_id:?}",
            scope.tool_id
        ));
    }
    // A scope without a digest would approve any arguments: it resumes nothing.
    let Some(approved) = scope.arguments_digest else {
        return Err(format!(
            "approval {id} states no arguments digest, so it approves no arguments"
        ));
    };
    if approved != digest {
        return Err(format!(
            "the arguments differ from those approval {id} approved (arguments digest {digest}, approved {approved})"
        ));
    }
    if let Some(expires_at) = &scope.expires_at {
        // One fixed-width form: times compare as their text does. A malformed expiry
        // fails closed.
        if !aegis_record::time::is_valid(expires_at) || now > expires_at.as_str() {
            return Err(format!("approval {id} expired at {expires_at}"));
        }
    }
    Ok(())
}

/// Checks a minted grant's authority against an approved scope: every root within an
/// approved root of its kind (read within `read_paths`, write within `write_paths`),
/// every destination within an approved one. Returns the axis and why, for the first
/// that is not.
pub(super) fn within_scope(
    grant: &aegis_record::CapabilityGrant,
    scope: &ApprovalScope,
) -> Result<(), (&'static str, String)> {
    authority_within(grant.fs.as_ref(), grant.net.as_ref(), scope)
}

/// Whether an approver's `approved` scope grants no more than the `parked` one stated:
/// the same tool and arguments digest, an expiry no later, and every root and
/// destination within the parked scope's. An approver may narrow what a park asked
/// for, never widen it.
///
/// # Errors
/// Why it is wider, in words for the record and the client.
pub fn scope_within(approved: &ApprovalScope, parked: &ApprovalScope) -> Result<(), String> {
    if approved.tool_id != parked.tool_id {
        return Err(format!(
            "it approves tool {:?}, but the park was of {:?}",
            approved.tool_id, parked.tool_id
        ));
    }
    if approved.arguments_digest.is_none() || approved.arguments_digest != parked.arguments_digest {
        return Err("it approves other arguments than the parked call's".to_owned());
    }
    match (&approved.expires_at, &parked.expires_at) {
        (_, None) => {}
        (Some(a), Some(p)) if aegis_record::time::is_valid(a) && a <= p => {}
        (a, Some(p)) => {
            return Err(format!(
                "it expires at {}, after the park's {p}",
                a.as_deref().unwrap_or("(never)")
            ));
        }
    }
    authority_within(approved.fs.as_ref(), approved.net.as_ref(), parked).map_err(|(_, why)| why)
}

/// Every root of `fs` within an approved root of its kind, every destination of `net`
/// within an approved one.
fn authority_within(
    fs: Option<&FsScope>,
    net: Option<&NetScope>,
    scope: &ApprovalScope,
) -> Result<(), (&'static str, String)> {
    let none = FsScope::default();
    let approved_fs = scope.fs.as_ref().unwrap_or(&none);
    if let Some(fs) = fs {
        for (axis, roots, approved) in [
            ("fs.read", &fs.read_paths, &approved_fs.read_paths),
            ("fs.write", &fs.write_paths, &approved_fs.write_paths),
        ] {
            for root in roots {
                if !approved.iter().any(|a| path_within(root, a)) {
                    return Err((
                        axis,
                        format!(
                            "{OUTSIDE_SCOPE}: {axis} root {root:?} is not within a root the approval grants"
                        ),
                    ));
                }
            }
        }
    }
    let no_net = NetScope::default();
    let approved_net = scope.net.as_ref().unwrap_or(&no_net);
    if let Some(net) = net {
        for rule in &net.http {
            let covered = approved_net.http.iter().any(|a| {
                a.host.eq_ignore_ascii_case(&rule.host)
                    && rule.ports.iter().all(|p| a.ports.contains(p))
                    && rule.methods.iter().all(|m| a.methods.contains(m))
            });
            if !covered {
                return Err((
                    "net.http",
                    format!(
                        "{OUTSIDE_SCOPE}: net.http destination {:?} (ports {:?}, methods {:?}) is not within one the approval grants",
                        rule.host, rule.ports, rule.methods
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `path` is `root` or beneath it, component by component. Both are compared as
/// written, not resolved: a grant's roots are canonical, and the scope's are the
/// canonical roots its park stated. An approved root that is not absolute and plain
/// (a `.` or `..` component) contains nothing.
fn path_within(path: &str, root: &str) -> bool {
    let (path, root) = (Path::new(path), Path::new(root));
    let plain = |p: &Path| {
        p.is_absolute()
            && p.components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
    };
    plain(path) && plain(root) && path.starts_with(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_is_within_by_components_only() {
        assert!(path_within("/data/a", "/data"));
        assert!(path_within("/data", "/data"));
        assert!(!path_within("/database", "/data"));
        assert!(!path_within("/data/../etc", "/data"));
        assert!(!path_within("/data/a", "data"));
        assert!(!path_within("/etc", "/data/.."));
    }

    fn grant(net: Vec<aegis_record::HttpRule>) -> aegis_record::CapabilityGrant {
        aegis_record::CapabilityGrant {
            grant_id: "g".into(),
            tool_id: "t".into(),
            fs: None,
            net: Some(NetScope { http: net }),
            max_memory_bytes: Default::default(),
            max_wall_ms: Default::default(),
            max_output_bytes: Default::default(),
            component_digest: None,
        }
    }

    fn rule(host: &str, ports: &[u16], methods: &[&str]) -> aegis_record::HttpRule {
        aegis_record::HttpRule {
            host: host.into(),
            ports: ports.to_vec(),
            methods: methods.iter().map(|m| (*m).to_owned()).collect(),
        }
    }

    /// A destination is within the scope only when an approved one has its host and
    /// every port and method it carries; a scope with no net admits none.
    #[test]
    fn a_destination_is_within_only_an_approved_one_covering_it() {
        let scope = |net: Option<Vec<aegis_record::HttpRule>>| ApprovalScope {
            tool_id: "t".into(),
            arguments_digest: None,
            fs: None,
            net: net.map(|http| NetScope { http }),
            expires_at: None,
        };
        let approved = scope(Some(vec![rule(
            "api.example.org",
            &[443],
            &["GET", "POST"],
        )]));
        let ok = grant(vec![rule("api.example.org", &[443], &["GET"])]);
        assert_eq!(within_scope(&ok, &approved), Ok(()));
        for wider in [
            rule("api.example.org", &[443, 80], &["GET"]),
            rule("api.example.org", &[443], &["DELETE"]),
            rule("example.org", &[443], &["GET"]),
        ] {
            let Err((axis, why)) = within_scope(&grant(vec![wider.clone()]), &approved) else {
                panic!("{wider:?} admitted")
            };
            assert_eq!(axis, "net.http");
            assert!(why.starts_with(OUTSIDE_SCOPE), "{why}");
        }
        assert!(within_scope(&ok, &scope(None)).is_err());
    }
}
