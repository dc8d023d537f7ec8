//! The seccomp filter: what Landlock cannot say.
//!
//! Default allow; the listed calls fail with `EPERM`, and two things kill the process:
//! a syscall made under another architecture's ABI (the program could otherwise reach
//! calls by numbers this filter never compares), and on x86_64 a number in the x32 range
//! (bit 30 set), which reaches the same kernel functions under other numbers.
//!
//! Denied:
//! - `socket` outside the grant: without network only `AF_UNIX`, with network also
//!   `AF_INET`, `AF_INET6` and `AF_NETLINK` (name resolution reads routes). So UDP —
//!   a DNS query is a way out — is refused without network.
//! - `socket(AF_UNIX)` too when Landlock cannot restrict connecting to pathname unix
//!   sockets (ABI < 9): that is how a program reaches D-Bus or a docker socket.
//!   `socketpair` stays, and so do the calls that act on sockets already open (glibc's
//!   name service probe and Node rely on them failing or working normally).
//! - `io_uring_*` (its operations bypass this filter), `ptrace`, `process_vm_readv`
//!   and `process_vm_writev`.
//! - `ioctl` with `TIOCSTI` or `TIOCLINUX`, comparing the low 32 bits only, as the
//!   kernel does (a command with high bits set is the same command).
//! - `ioctl` commands that change a file through a descriptor opened only to read,
//!   which Landlock does not see (its ioctl right covers device files alone): inode
//!   flags (`FS_IOC_SETFLAGS`, what `chattr` uses, and `FS_IOC_FSSETXATTR`, which also
//!   sets a project id), the inode generation (`FS_IOC_SETVERSION` and ext4's own
//!   number for it), an ext4 migration to extents, an encryption policy on an empty
//!   directory, fs-verity (which makes a file read-only for good), fscrypt keys (a
//!   filesystem-wide keyring, as `add_key` is a process one), and btrfs subvolume
//!   and snapshot creation, removal and read-only flag. The 32-bit numbers are refused
//!   too, though a process under this filter cannot reach the compat path that reads
//!   them. These are refused wherever the file is: a filter cannot tell a file granted
//!   write from one granted read, a program started as root owns every root-owned
//!   file it can open (`/usr` among them), and a confined program that needs `chattr`
//!   is rare. `file_setattr` (Linux 6.17), the same change by path, is refused for
//!   the same reason, and because its path is not checked by Landlock at all.
//! - Calls that change the kernel or the mount table, and handle-based opens that skip
//!   path checks: modules, kexec, bpf, perf events, keyrings, mount, namespaces, ….
//!   `clone` with any `CLONE_NEW*` flag is refused, and `clone3` answers `ENOSYS` (a
//!   filter cannot read its flags, which sit in memory; C libraries fall back to
//!   `clone`).
//! - Mode, owner and extended-attribute changes, wherever the file is: Landlock has no
//!   right for `chmod`, `chown` or `setxattr`, and a program started as root owns every
//!   root-owned file (a setuid bit set outside the grant would serve other users), so
//!   these are refused on every path, `*at` and descriptor forms included.
//! - Timestamps (`utimensat`, and on x86_64 `utime`, `utimes`, `futimesat`) when the
//!   grant writes no file: Landlock does not check them either, so a program granted
//!   only read could set the times of any file it owns, in the grant or out of it.
//!   With a file or directory granted write they stay allowed, for every path: `touch`,
//!   `cp -p` and `tar` set times on what they write, and the filter cannot tell that
//!   file from another.
//! - Acting on other processes by pid: `prlimit64`, `setpriority`, `sched_set*`,
//!   `ioprio_set`, `migrate_pages`, `move_pages` with a pid other than 0 (self), and
//!   `setpriority`/`ioprio_set` on a process group or a user (id 0 there means the
//!   caller's group, or root).
//! - System V IPC (`shm*`, `msg*`, `sem*`), which is shared with every process of the
//!   IPC namespace, the host included.
//! - With network granted, only what Landlock's TCP port rules can see: inet sockets
//!   with protocol 0, TCP or UDP (not MPTCP), route netlink only, and no TCP Fast Open
//!   (`MSG_FASTOPEN` on `sendto`/`sendmsg`/`sendmmsg`, `TCP_FASTOPEN_CONNECT`), which
//!   connects without `connect`.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};
use sha2::{Digest, Sha256};

/// What the filter is built from.
#[derive(Clone, Copy, Debug)]
pub struct FilterPlan {
    /// The network is granted (TCP by Landlock port rules).
    pub net: bool,
    /// Landlock restricts connecting to pathname unix sockets (ABI ≥ 9).
    pub landlock_restricts_unix: bool,
    /// Some granted write path is a file or a directory (not only a device such as
    /// `/dev/null`). Without one, timestamps are refused.
    pub writes_files: bool,
}

/// The built filters and what they say.
#[derive(Debug)]
pub struct Filter {
    /// The BPF programs, installed in order (today one: see [`build`]).
    pub programs: Vec<BpfProgram>,
    /// The names of the calls it refuses (some only for some arguments).
    pub denied: Vec<&'static str>,
}

impl Filter {
    /// SHA-256 over every program's instructions in order (code, jt, jf, k;
    /// little-endian), each program preceded by its length (u32, little-endian).
    pub fn sha256(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for program in &self.programs {
            h.update(
                u32::try_from(program.len())
                    .unwrap_or(u32::MAX)
                    .to_le_bytes(),
            );
            for i in program {
                h.update(i.code.to_le_bytes());
                h.update([i.jt, i.jf]);
                h.update(i.k.to_le_bytes());
            }
        }
        h.finalize().into()
    }
}

const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;

/// `ioctl` commands that change a file, or a filesystem's keys, through a descriptor
/// that needs no write access: the caller owning the file (root owns most of `/usr`)
/// or the directory being writable by mode is all the kernel asks. Numbers as
/// `<linux/fs.h>`, `<linux/fsverity.h>` and `<linux/btrfs.h>` define them (`_IOW` and
/// kin: direction, size, type, number). Not here, because something else already
/// refuses them: `FICLONE`/`FICLONERANGE`, the `FS_IOC_RESVSP` family and ext4's
/// extent swap need a destination opened for write, which Landlock checks;
/// `FIFREEZE`/`FITHAW`, `FITRIM`, `FS_IOC_SETFSLABEL` and btrfs's device and quota
/// calls need `CAP_SYS_ADMIN`, which no confined program keeps.
const INODE_IOCTLS: [(&str, u64); 21] = [
    ("ioctl(FS_IOC_SETFLAGS)", 0x4008_6602),
    ("ioctl(FS_IOC32_SETFLAGS)", 0x4004_6602),
    ("ioctl(FS_IOC_FSSETXATTR)", 0x401c_5820),
    ("ioctl(FS_IOC_SETVERSION)", 0x4008_7602),
    ("ioctl(FS_IOC32_SETVERSION)", 0x4004_7602),
    ("ioctl(EXT4_IOC_SETVERSION)", 0x4008_6604),
    ("ioctl(EXT4_IOC32_SETVERSION)", 0x4004_6604),
    ("ioctl(EXT4_IOC_MIGRATE)", 0x6609),
    ("ioctl(FS_IOC_SET_ENCRYPTION_POLICY)", 0x800c_6613),
    ("ioctl(FS_IOC_ADD_ENCRYPTION_KEY)", 0xc050_6617),
    ("ioctl(FS_IOC_REMOVE_ENCRYPTION_KEY)", 0xc040_6618),
    ("ioctl(FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS)", 0xc040_6619),
    ("ioctl(FS_IOC_ENABLE_VERITY)", 0x4080_6685),
    ("ioctl(BTRFS_IOC_SNAP_CREATE)", 0x5000_9401),
    ("ioctl(BTRFS_IOC_SNAP_CREATE_V2)", 0x5000_9417),
    ("ioctl(BTRFS_IOC_SUBVOL_CREATE)", 0x5000_940e),
    ("ioctl(BTRFS_IOC_SUBVOL_CREATE_V2)", 0x5000_9418),
    ("ioctl(BTRFS_IOC_SNAP_DESTROY)", 0x5000_940f),
    ("ioctl(BTRFS_IOC_SNAP_DESTROY_V2)", 0x5000_943f),
    ("ioctl(BTRFS_IOC_SUBVOL_SETFLAGS)", 0x4008_941a),
    ("ioctl(BTRFS_IOC_SET_RECEIVED_SUBVOL)", 0xc0c8_9425),
];

/// `setxattrat` and `removexattrat` (Linux 6.13), `open_tree_attr` (Linux 6.15: an
/// `open_tree` that also changes the cloned mount's attributes), and `file_setattr`
/// (Linux 6.17), numbered alike on every architecture.
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;
const SYS_OPEN_TREE_ATTR: i64 = 467;
const SYS_FILE_SETATTR: i64 = 469;
const MSG_FASTOPEN: u64 = 0x2000_0000;
const TCP_FASTOPEN_CONNECT: u64 = 30;
/// Every `CLONE_NEW*` flag: cgroup, uts, ipc, user, pid, net, mount, time.
const CLONE_NEW_FLAGS: [u64; 8] = [
    0x0200_0000,
    0x0400_0000,
    0x0800_0000,
    0x1000_0000,
    0x2000_0000,
    0x4000_0000,
    0x0002_0000,
    0x0000_0080,
];

/// Errors building the filter (a bug here, never the program's fault).
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// seccompiler refused the rules.
    #[error("seccomp filter: {0}")]
    Backend(#[from] seccompiler::BackendError),
    /// A syscall number outside what a filter compares.
    #[error("seccomp filter: syscall number {0} is out of range")]
    Number(i64),
}

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;
#[cfg(target_arch = "riscv64")]
const ARCH: TargetArch = TargetArch::riscv64;

fn arg(index: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, FilterError> {
    Ok(SeccompCondition::new(
        index,
        SeccompCmpArgLen::Dword,
        op,
        value,
    )?)
}

/// Calls refused whatever their arguments.
fn always_denied() -> Vec<(&'static str, i64)> {
    let mut calls = vec![
        ("io_uring_setup", libc::SYS_io_uring_setup),
        ("io_uring_enter", libc::SYS_io_uring_enter),
        ("io_uring_register", libc::SYS_io_uring_register),
        ("ptrace", libc::SYS_ptrace),
        ("process_vm_readv", libc::SYS_process_vm_readv),
        ("process_vm_writev", libc::SYS_process_vm_writev),
        ("init_module", libc::SYS_init_module),
        ("finit_module", libc::SYS_finit_module),
        ("delete_module", libc::SYS_delete_module),
        ("kexec_load", libc::SYS_kexec_load),
        ("kexec_file_load", libc::SYS_kexec_file_load),
        ("bpf", libc::SYS_bpf),
        ("perf_event_open", libc::SYS_perf_event_open),
        ("userfaultfd", libc::SYS_userfaultfd),
        ("keyctl", libc::SYS_keyctl),
        ("add_key", libc::SYS_add_key),
        ("request_key", libc::SYS_request_key),
        ("mount", libc::SYS_mount),
        ("umount2", libc::SYS_umount2),
        ("pivot_root", libc::SYS_pivot_root),
        ("chroot", libc::SYS_chroot),
        ("open_tree", libc::SYS_open_tree),
        ("open_tree_attr", SYS_OPEN_TREE_ATTR),
        ("move_mount", libc::SYS_move_mount),
        ("fsopen", libc::SYS_fsopen),
        ("fsmount", libc::SYS_fsmount),
        ("fsconfig", libc::SYS_fsconfig),
        ("fspick", libc::SYS_fspick),
        ("mount_setattr", libc::SYS_mount_setattr),
        ("open_by_handle_at", libc::SYS_open_by_handle_at),
        ("name_to_handle_at", libc::SYS_name_to_handle_at),
        ("setns", libc::SYS_setns),
        ("unshare", libc::SYS_unshare),
        ("swapon", libc::SYS_swapon),
        ("swapoff", libc::SYS_swapoff),
        ("reboot", libc::SYS_reboot),
        ("acct", libc::SYS_acct),
        ("quotactl", libc::SYS_quotactl),
        ("fchmod", libc::SYS_fchmod),
        ("fchmodat", libc::SYS_fchmodat),
        ("fchmodat2", libc::SYS_fchmodat2),
        ("fchown", libc::SYS_fchown),
        ("fchownat", libc::SYS_fchownat),
        ("setxattr", libc::SYS_setxattr),
        ("lsetxattr", libc::SYS_lsetxattr),
        ("fsetxattr", libc::SYS_fsetxattr),
        ("setxattrat", SYS_SETXATTRAT),
        ("removexattr", libc::SYS_removexattr),
        ("lremovexattr", libc::SYS_lremovexattr),
        ("fremovexattr", libc::SYS_fremovexattr),
        ("removexattrat", SYS_REMOVEXATTRAT),
        ("file_setattr", SYS_FILE_SETATTR),
        ("shmget", libc::SYS_shmget),
        ("shmat", libc::SYS_shmat),
        ("shmctl", libc::SYS_shmctl),
        ("msgget", libc::SYS_msgget),
        ("msgsnd", libc::SYS_msgsnd),
        ("msgrcv", libc::SYS_msgrcv),
        ("msgctl", libc::SYS_msgctl),
        ("semget", libc::SYS_semget),
        ("semop", libc::SYS_semop),
        ("semtimedop", libc::SYS_semtimedop),
        ("semctl", libc::SYS_semctl),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        ("iopl", libc::SYS_iopl),
        ("ioperm", libc::SYS_ioperm),
        ("modify_ldt", libc::SYS_modify_ldt),
        ("chmod", libc::SYS_chmod),
        ("chown", libc::SYS_chown),
        ("lchown", libc::SYS_lchown),
    ]);
    calls
}

/// Calls that set a file's timestamps: refused when the grant writes no file.
fn timestamps() -> Vec<(&'static str, i64)> {
    let mut calls = vec![("utimensat", libc::SYS_utimensat)];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        ("utime", libc::SYS_utime),
        ("utimes", libc::SYS_utimes),
        ("futimesat", libc::SYS_futimesat),
    ]);
    calls
}

/// Calls that act on a process named by pid, and the argument holding the pid: refused
/// unless it is 0 (the caller itself).
fn by_pid() -> Vec<(&'static str, i64, u8)> {
    vec![
        ("prlimit64", libc::SYS_prlimit64, 0),
        ("setpriority", libc::SYS_setpriority, 1),
        ("sched_setaffinity", libc::SYS_sched_setaffinity, 0),
        ("sched_setscheduler", libc::SYS_sched_setscheduler, 0),
        ("sched_setparam", libc::SYS_sched_setparam, 0),
        ("sched_setattr", libc::SYS_sched_setattr, 0),
        ("ioprio_set", libc::SYS_ioprio_set, 1),
        ("migrate_pages", libc::SYS_migrate_pages, 0),
        ("move_pages", libc::SYS_move_pages, 0),
    ]
}

/// Builds the filter for `plan`.
///
/// # Errors
/// Only if seccompiler refuses a rule written here (a bug).
pub fn build(plan: FilterPlan) -> Result<Filter, FilterError> {
    let (chain, numbers, mut denied) = compile(plan)?;
    let program = assemble(chain, &numbers);
    denied.push("clone3 (ENOSYS)");
    Ok(Filter {
        programs: vec![program],
        denied,
    })
}

/// seccompiler's program for `plan` (its architecture check, then the rule chain), the
/// syscall numbers the chain names, and what it denies.
fn compile(plan: FilterPlan) -> Result<(BpfProgram, Vec<u32>, Vec<&'static str>), FilterError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let mut denied = Vec::new();
    for (name, nr) in always_denied() {
        rules.insert(nr, Vec::new());
        denied.push(name);
    }
    if !plan.writes_files {
        for (name, nr) in timestamps() {
            rules.insert(nr, Vec::new());
            denied.push(name);
        }
    }

    for (name, nr, index) in by_pid() {
        rules.insert(
            nr,
            vec![SeccompRule::new(vec![arg(index, SeccompCmpOp::Ne, 0)?])?],
        );
        denied.push(name);
    }
    // Two of them also take a scope before the id: a process group or a user with id 0
    // means the caller's group or root's processes, the host's among them. Only the
    // process scope stays (PRIO_PROCESS = 0, IOPRIO_WHO_PROCESS = 1).
    for (nr, process_scope) in [(libc::SYS_setpriority, 0), (libc::SYS_ioprio_set, 1)] {
        if let Some(rules) = rules.get_mut(&nr) {
            rules.push(SeccompRule::new(vec![arg(
                0,
                SeccompCmpOp::Ne,
                process_scope,
            )?])?);
        }
    }
    denied.push("setpriority, ioprio_set on a process group or user");
    rules.insert(
        libc::SYS_clone,
        CLONE_NEW_FLAGS
            .iter()
            .map(|&flag| {
                Ok(SeccompRule::new(vec![arg(
                    0,
                    SeccompCmpOp::MaskedEq(flag),
                    flag,
                )?])?)
            })
            .collect::<Result<Vec<_>, FilterError>>()?,
    );
    denied.push("clone(CLONE_NEW*)");

    // `arg` compares the low 32 bits, as the kernel reads the command.
    let ioctl = [TIOCSTI, TIOCLINUX]
        .into_iter()
        .chain(INODE_IOCTLS.iter().map(|&(_, command)| command))
        .map(|command| Ok(SeccompRule::new(vec![arg(1, SeccompCmpOp::Eq, command)?])?))
        .collect::<Result<Vec<_>, FilterError>>()?;
    rules.insert(libc::SYS_ioctl, ioctl);
    denied.push("ioctl(TIOCSTI, TIOCLINUX)");
    denied.extend(INODE_IOCTLS.iter().map(|&(name, _)| name));

    // socket(domain, type, protocol): refused unless the domain is one the grant
    // allows. The conditions of one rule all hold at once: "not this and not that".
    let mut allowed: Vec<u64> = Vec::new();
    if plan.landlock_restricts_unix {
        allowed.push(libc::AF_UNIX as u64);
    }
    if plan.net {
        allowed.extend([
            libc::AF_INET as u64,
            libc::AF_INET6 as u64,
            libc::AF_NETLINK as u64,
        ]);
    }
    denied.push(match (plan.net, plan.landlock_restricts_unix) {
        (false, true) => "socket(all but AF_UNIX)",
        (false, false) => "socket(all domains; socketpair stays)",
        (true, true) => "socket(all but AF_UNIX, AF_INET, AF_INET6, route AF_NETLINK)",
        (true, false) => "socket(all but AF_INET, AF_INET6, route AF_NETLINK)",
    });
    if allowed.is_empty() {
        rules.insert(libc::SYS_socket, Vec::new());
    } else {
        let conditions = allowed
            .into_iter()
            .map(|domain| arg(0, SeccompCmpOp::Ne, domain))
            .collect::<Result<Vec<_>, _>>()?;
        let mut socket = vec![SeccompRule::new(conditions)?];
        if plan.net {
            // Inet sockets Landlock's port rules see (protocol 0, TCP, UDP; not MPTCP
            // or SCTP), and route netlink alone.
            for domain in [libc::AF_INET, libc::AF_INET6] {
                socket.push(SeccompRule::new(vec![
                    arg(0, SeccompCmpOp::Eq, domain as u64)?,
                    arg(2, SeccompCmpOp::Ne, 0)?,
                    arg(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64)?,
                    arg(2, SeccompCmpOp::Ne, libc::IPPROTO_UDP as u64)?,
                ])?);
            }
            socket.push(SeccompRule::new(vec![
                arg(0, SeccompCmpOp::Eq, libc::AF_NETLINK as u64)?,
                arg(2, SeccompCmpOp::Ne, libc::NETLINK_ROUTE as u64)?,
            ])?);
            denied.push("socket(inet protocols but TCP and UDP; netlink but route)");
            // TCP Fast Open connects from sendto/sendmsg, where Landlock's connect rule
            // does not look.
            for (nr, index) in [
                (libc::SYS_sendto, 3),
                (libc::SYS_sendmsg, 2),
                (libc::SYS_sendmmsg, 3),
            ] {
                rules.insert(
                    nr,
                    vec![SeccompRule::new(vec![arg(
                        index,
                        SeccompCmpOp::MaskedEq(MSG_FASTOPEN),
                        MSG_FASTOPEN,
                    )?])?],
                );
            }
            rules.insert(
                libc::SYS_setsockopt,
                vec![SeccompRule::new(vec![
                    arg(1, SeccompCmpOp::Eq, libc::IPPROTO_TCP as u64)?,
                    arg(2, SeccompCmpOp::Eq, TCP_FASTOPEN_CONNECT)?,
                ])?],
            );
            denied.push("MSG_FASTOPEN, TCP_FASTOPEN_CONNECT");
        }
        rules.insert(libc::SYS_socket, socket);
    }

    let filter = SeccompFilter::new(
        rules.clone(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )?;
    let numbers: Vec<u32> = rules
        .keys()
        .map(|&nr| u32::try_from(nr).map_err(|_| FilterError::Number(nr)))
        .collect::<Result<_, _>>()?;
    let chain: BpfProgram = filter.try_into()?;
    Ok((chain, numbers, denied))
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_RET_K: u16 = 0x06;

/// The program attached: seccompiler's `chain` (its architecture check, then one
/// comparison per syscall it names, in turn) with checks put after the architecture
/// check, in this order: the x32 kill, `clone3` → ENOSYS, and a binary search over
/// `numbers` (the syscalls the chain names) that allows every other syscall at once.
///
/// Why the search: attaching a filter makes the kernel run it for every syscall number
/// to cache the ones it always allows, and a chain of ~100 comparisons made that cost
/// ~0.5 ms per confined start (measured: ~2.8 µs per comparison). Searching first,
/// an unnamed syscall is decided in about seven comparisons; a named one then walks
/// the chain as before. One program, not two: each attach is one more seccomp(2).
fn assemble(chain: BpfProgram, numbers: &[u32]) -> BpfProgram {
    let at = 3.min(chain.len());
    let mut sorted = numbers.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut program: BpfProgram = chain[..at].to_vec();
    program.extend(x32_kill());
    program.extend(clone3_enosys());
    program.push(load_nr());
    program.extend(search(&sorted));
    program.extend_from_slice(&chain[at..]);
    program
}

const BPF_JMP_JA: u16 = 0x05;
const BPF_JMP_JGE_K: u16 = 0x35;
/// Marks a jump to the chain while the search is emitted; resolved by [`search`].
const TO_CHAIN: u32 = u32::MAX;

fn load_nr() -> sock_filter {
    // seccomp_data.nr is at offset 0.
    sock_filter {
        code: BPF_LD_W_ABS,
        jt: 0,
        jf: 0,
        k: 0,
    }
}

/// A binary search over sorted `numbers`, with the syscall number in A: a number in
/// the list jumps to what follows the search (the chain), any other returns ALLOW.
/// Conditional jumps only ever skip one instruction; the long jumps are `JA`, whose
/// offset is 32 bits, so no size of list overflows a jump.
fn search(numbers: &[u32]) -> Vec<sock_filter> {
    fn node(numbers: &[u32], out: &mut Vec<sock_filter>) {
        if numbers.len() <= 3 {
            for &nr in numbers {
                out.push(jump(BPF_JMP_JEQ_K, nr, 0, 1));
                out.push(jump(BPF_JMP_JA, TO_CHAIN, 0, 0));
            }
            out.push(sock_filter {
                code: BPF_RET_K,
                jt: 0,
                jf: 0,
                k: libc::SECCOMP_RET_ALLOW,
            });
            return;
        }
        let (low, high) = numbers.split_at(numbers.len() / 2);
        let mut left = Vec::new();
        node(low, &mut left);
        // A >= first of the upper half: over the lower half's code.
        out.push(jump(BPF_JMP_JGE_K, high[0], 0, 1));
        let skip = u32::try_from(left.len()).unwrap_or(u32::MAX);
        out.push(jump(BPF_JMP_JA, skip, 0, 0));
        out.extend(left);
        node(high, out);
    }
    let mut out = Vec::new();
    node(numbers, &mut out);
    let len = out.len();
    for (i, ins) in out.iter_mut().enumerate() {
        if ins.code == BPF_JMP_JA && ins.k == TO_CHAIN {
            ins.k = u32::try_from(len - i - 1).unwrap_or(u32::MAX);
        }
    }
    out
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Load the syscall number (seccomp_data.nr, offset 0); if it is clone3, ENOSYS.
fn clone3_enosys() -> [sock_filter; 3] {
    [
        sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: BPF_JMP_JEQ_K,
            jt: 0,
            jf: 1,
            // Syscall numbers are small and positive.
            k: libc::SYS_clone3 as u32,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        },
    ]
}

/// On x86_64, kill any syscall number with the x32 bit set (loads the number first).
#[cfg(target_arch = "x86_64")]
fn x32_kill() -> Vec<sock_filter> {
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    vec![
        load_nr(),
        jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1),
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_KILL_PROCESS,
        },
    ]
}

#[cfg(not(target_arch = "x86_64"))]
fn x32_kill() -> Vec<sock_filter> {
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_opens_with_the_arch_check_the_x32_kill_then_clone3() {
        let f = build(FilterPlan {
            net: false,
            landlock_restricts_unix: false,
            writes_files: false,
        })
        .unwrap();
        for program in &f.programs {
            // Load arch; jump over the kill when it matches; kill.
            assert_eq!(program[0].code, 0x20);
            assert_eq!(program[0].k, 4);
            assert_eq!(program[2].k, libc::SECCOMP_RET_KILL_PROCESS);
            #[cfg(target_arch = "x86_64")]
            {
                assert_eq!((program[3].code, program[3].k), (0x20, 0));
                assert_eq!(program[4].k, 0x4000_0000);
                assert_eq!(program[5].k, libc::SECCOMP_RET_KILL_PROCESS);
            }
            let c = if cfg!(target_arch = "x86_64") { 6 } else { 3 };
            assert_eq!((program[c].code, program[c].k), (0x20, 0));
            assert_eq!(program[c + 1].k, libc::SYS_clone3 as u32);
            assert_eq!(
                program[c + 2].k,
                libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
            );
        }
        assert_eq!(f.programs.len(), 1);
    }

    /// A classic BPF interpreter for what these programs use, returning the action.
    fn run(program: &[sock_filter], data: &[u8; 64]) -> u32 {
        run_counting(program, data).0
    }

    /// [`run`], also answering how many instructions ran.
    fn run_counting(program: &[sock_filter], data: &[u8; 64]) -> (u32, usize) {
        let (mut a, mut pc, mut steps) = (0u32, 0usize, 0usize);
        loop {
            steps += 1;
            let i = &program[pc];
            pc += 1;
            match i.code {
                0x20 => {
                    let at = i.k as usize;
                    a = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
                }
                0x54 => a &= i.k,           // ALU AND K
                0x05 => pc += i.k as usize, // JA
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let taken = match i.code {
                        0x15 => a == i.k,
                        0x25 => a > i.k,
                        0x35 => a >= i.k,
                        _ => a & i.k != 0,
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                0x06 => return (i.k, steps),
                other => panic!("instruction {other:#x} not interpreted"),
            }
        }
    }

    fn data(nr: u32, args: [u64; 6]) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[..4].copy_from_slice(&nr.to_le_bytes());
        #[cfg(target_arch = "x86_64")]
        d[4..8].copy_from_slice(&0xC000_003Eu32.to_le_bytes()); // AUDIT_ARCH_X86_64
        for (i, v) in args.iter().enumerate() {
            d[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        d
    }

    /// The search in front changes no decision: for every syscall number up to 1023
    /// (and x32 ones), under argument values made of every constant either program
    /// compares, the attached program answers what the plain chain (with the same
    /// prelude) answers, for every plan. The search is also much shorter to walk for a
    /// syscall the chain does not name, which is the point of it.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_search_decides_exactly_what_the_chain_decides() {
        for plan in plans() {
            let (chain, numbers, _) = compile(plan).unwrap();
            let program = assemble(chain.clone(), &numbers);
            let mut reference: BpfProgram = chain[..3].to_vec();
            reference.extend(x32_kill());
            reference.extend(clone3_enosys());
            reference.extend_from_slice(&chain[3..]);
            let mut constants: Vec<u64> = vec![0, 1, u64::MAX, 0xffff_ffff, 1 << 32];
            for i in &chain {
                constants.extend([u64::from(i.k), u64::from(i.k) | (1 << 32)]);
            }
            constants.sort_unstable();
            constants.dedup();
            let mut seed = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            let nrs = (0..1024u32).chain([0x4000_0000, 0x4000_0001, 0x4000_0000 + 435]);
            for nr in nrs {
                for round in 0..48 {
                    let args: [u64; 6] = std::array::from_fn(|_| {
                        let pick = next() as usize;
                        if round == 0 {
                            0
                        } else {
                            constants[pick % constants.len()]
                        }
                    });
                    let d = data(nr, args);
                    assert_eq!(
                        run(&program, &d),
                        run(&reference, &d),
                        "{plan:?} nr {nr} args {args:x?}"
                    );
                }
            }
            // An unnamed syscall (getpid, 39) is allowed within the prelude and the
            // search: far fewer instructions than the chain's length.
            let (action, steps) = run_counting(&program, &data(39, [0; 6]));
            assert_eq!(action, libc::SECCOMP_RET_ALLOW);
            assert!(!numbers.contains(&39));
            assert!(
                steps < 30 && chain.len() > 200,
                "{steps} steps, chain {}",
                chain.len()
            );
        }
    }

    #[test]
    fn each_plan_is_a_different_program() {
        let mut seen = std::collections::BTreeSet::new();
        for plan in plans() {
            let f = build(plan).unwrap();
            assert!(seen.insert(f.sha256()), "{plan:?}");
        }
        assert_eq!(seen.len(), 8);
    }

    /// Every plan there is.
    fn plans() -> Vec<FilterPlan> {
        let mut all = Vec::new();
        for net in [false, true] {
            for landlock_restricts_unix in [false, true] {
                for writes_files in [false, true] {
                    all.push(FilterPlan {
                        net,
                        landlock_restricts_unix,
                        writes_files,
                    });
                }
            }
        }
        all
    }

    /// Each inode-changing ioctl is refused with EPERM under every plan, by its low 32
    /// bits whatever the high ones hold, and a command beside it (the `GET` twin) is
    /// not; the timestamp calls are refused exactly when the plan writes no file.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn inode_ioctls_are_refused_and_timestamps_follow_the_write_grant() {
        const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        const FS_IOC_GETFLAGS: u64 = 0x8008_6601;
        for plan in plans() {
            let program = &build(plan).unwrap().programs[0];
            let ioctl = |command: u64| {
                run(
                    program,
                    &data(libc::SYS_ioctl as u32, [3, command, 0, 0, 0, 0]),
                )
            };
            for &(name, command) in &INODE_IOCTLS {
                assert_eq!(ioctl(command), EPERM, "{name} {plan:?}");
                assert_eq!(ioctl(command | 0xffff_ffff_0000_0000), EPERM, "{name}");
            }
            assert_eq!(ioctl(FS_IOC_GETFLAGS), libc::SECCOMP_RET_ALLOW);
            let file_setattr = data(SYS_FILE_SETATTR as u32, [0; 6]);
            assert_eq!(run(program, &file_setattr), EPERM);
            for (name, nr) in timestamps() {
                let want = if plan.writes_files {
                    libc::SECCOMP_RET_ALLOW
                } else {
                    EPERM
                };
                let got = run(program, &data(nr as u32, [0; 6]));
                assert_eq!(got, want, "{name} {plan:?}");
            }
        }
    }
}
