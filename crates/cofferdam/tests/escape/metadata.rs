//! The scoped tier's kernel-surface gaps found in review: metadata writes Landlock has no
//! right for (finding 0), TCP Fast Open and a self-binding `listen` (findings 1 and 3).

use crate::harness::{
    Attack, BOTH_MUST, Boundary::FsWrite, Boundary::Network, Ctx, Outcome, Tier::Scoped,
    Tier::Sealed, Verdict::Documented, Verdict::Must, check, unique,
};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The scoped tier's metadata line in the scope report.
const METADATA: &str = "metadata: file modes, timestamps";

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "fw.metadata-own-file",
        boundary: FsWrite,
        description: "chmod and touch -d a file the caller owns outside the workdir",
        on: &[(Sealed, Must), (Scoped, Documented(METADATA))],
        probe: own_file_mode,
    },
    Attack {
        id: "fw.metadata-xattr",
        boundary: FsWrite,
        description: "set and remove a user.* xattr on a file the caller owns outside the workdir",
        on: BOTH_MUST,
        probe: own_file_xattr,
    },
    Attack {
        id: "fw.metadata-system-file",
        boundary: FsWrite,
        description: "as root: chmod, chown, touch -d, setxattr a root-owned file under /opt, by path and through a read-only descriptor",
        on: BOTH_MUST,
        probe: system_file,
    },
    Attack {
        id: "net.tcp-fast-open",
        boundary: Network,
        description: "reach a host TCP listener with sendto(MSG_FASTOPEN), which skips connect(2)",
        on: BOTH_MUST,
        probe: fast_open,
    },
    Attack {
        id: "net.tcp-listen-autobind",
        boundary: Network,
        description: "listen() on an unbound TCP socket (binds 0.0.0.0 by itself, no bind(2))",
        on: &[(Scoped, Must)],
        probe: listen_autobind,
    },
];

fn state(p: &Path) -> (u32, std::time::SystemTime, Option<Vec<u8>>) {
    let m = std::fs::symlink_metadata(p).unwrap();
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: valid C strings and a buffer of the length given.
    let r = unsafe {
        libc::lgetxattr(
            c.as_ptr(),
            c"user.cofferdam".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let x = usize::try_from(r).ok().map(|n| buf[..n].to_vec());
    (m.permissions().mode() & 0o7777, m.modified().unwrap(), x)
}

/// A file of the caller's outside the workdir, mode 0600, an old mtime, an xattr when the
/// filesystem takes one.
fn victim(ctx: &Ctx) -> std::path::PathBuf {
    let p = ctx.outside().join(format!("meta-{}", unique()));
    std::fs::write(&p, "v\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000))
        .unwrap();
    ctx.var("VICTIM", p.display().to_string());
    p
}

fn own_file_mode(ctx: &Ctx) -> Outcome {
    let p = victim(ctx);
    let before = state(&p);
    let r = ctx.sh(
        "chmod 0644 \"$VICTIM\"; chmod u+s \"$VICTIM\"; touch -m -d 2001-01-01 \"$VICTIM\"; true",
    );
    ctx.assert_boundary(&r);
    let after = state(&p);
    check(
        after == before,
        "mode and mtime unchanged",
        format!("{before:?} -> {after:?}"),
    )
}

fn own_file_xattr(ctx: &Ctx) -> Outcome {
    let p = victim(ctx);
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid C strings and a one-byte value.
    let has = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            c"user.cofferdam".as_ptr(),
            c"k".as_ptr().cast(),
            1,
            0,
        )
    } == 0;
    let before = state(&p);
    let r = ctx.py(
        "import os\np=os.environ['VICTIM']\nfor f in (lambda: os.setxattr(p,'user.cofferdam',b'pwn'), lambda: os.setxattr(p,'user.other',b'1'), lambda: os.removexattr(p,'user.cofferdam')):\n    try:\n        f(); print('xattr=ok')\n    except OSError as e:\n        print('xattr=%d' % e.errno)",
    );
    ctx.assert_boundary(&r);
    let after = state(&p);
    // SAFETY: valid C strings; a size query.
    let other =
        unsafe { libc::lgetxattr(c.as_ptr(), c"user.other".as_ptr(), std::ptr::null_mut(), 0) };
    check(
        after == before && other < 0 && !r.out.contains("xattr=ok"),
        format!("xattrs unchanged (pre-set: {has})"),
        format!("{before:?} -> {after:?}: {}", r.out),
    )
}

/// A root-owned file beneath a directory Landlock grants for reading (/opt): only root
/// owns one, so this is the root caller's attack (`chmod 0666 /etc/shadow` without
/// touching /etc). Removed afterwards.
fn system_file(ctx: &Ctx) -> Outcome {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Outcome::Skipped("needs root: only root owns system files".into());
    }
    struct Scratch(std::path::PathBuf);
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let s = Scratch(format!("/opt/cofferdam-escape-{}-{}", std::process::id(), unique()).into());
    std::fs::write(&s.0, "s\n").unwrap();
    std::fs::set_permissions(&s.0, std::fs::Permissions::from_mode(0o600)).unwrap();
    ctx.var("SCRATCH", s.0.display().to_string());
    let before = state(&s.0);
    let r = ctx.py(
        "import os\np=os.environ['SCRATCH']\nsteps=[('chmod',lambda: os.chmod(p,0o4777)),('chown',lambda: os.chown(p,65534,65534)),('utime',lambda: os.utime(p,(1,1))),('setxattr',lambda: os.setxattr(p,'user.cofferdam',b'1'))]\ntry:\n    fd=os.open(p,os.O_RDONLY)\n    steps+=[('fchmod',lambda: os.fchmod(fd,0o666)),('fchown',lambda: os.fchown(fd,65534,65534)),('futimens',lambda: os.utime(fd,(1,1))),('fsetxattr',lambda: os.setxattr(fd,'user.cofferdam',b'1'))]\nexcept OSError as e:\n    print('open=%d' % e.errno)\nfor n,f in steps:\n    try:\n        f(); print(n+'=ok')\n    except OSError as e:\n        print('%s=%d' % (n,e.errno))",
    );
    ctx.assert_boundary(&r);
    let after = state(&s.0);
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&s.0).unwrap());
    check(
        after == before && owner == 0 && !r.out.contains("=ok"),
        "mode, owner, mtime and xattrs of the root-owned file unchanged",
        format!("{before:?} -> {after:?} owner {owner}: {}", r.out),
    )
}

fn fast_open(ctx: &Ctx) -> Outcome {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    ctx.var("PORT", l.local_addr().unwrap().port().to_string());
    let r = ctx.py(
        "import os, socket\ntry:\n    s=socket.socket()\n    s.sendto(b'TFO-ESCAPE', socket.MSG_FASTOPEN, ('127.0.0.1', int(os.environ['PORT'])))\n    print('tfo=sent')\nexcept OSError as e:\n    print('tfo=%d' % e.errno)\nimport time; time.sleep(0.3)",
    );
    ctx.assert_boundary(&r);
    let got = l.accept().is_ok();
    check(
        !got && r.value("tfo") != Some("sent"),
        format!("no connection arrived (tfo={:?})", r.value("tfo")),
        format!("a Fast Open connection reached the host: {}", r.out),
    )
}

fn listen_autobind(ctx: &Ctx) -> Outcome {
    let r = ctx.py(
        "import socket\nfor fam in (socket.AF_INET, socket.AF_INET6):\n    try:\n        s=socket.socket(fam); s.listen(1); print('listen=%s' % (s.getsockname(),))\n    except OSError as e:\n        print('listen=%d' % e.errno)",
    );
    ctx.assert_boundary(&r);
    check(
        !r.out.contains("listen=("),
        format!("no TCP listener: {}", r.out.trim()),
        format!("a host TCP listener opened: {}", r.out),
    )
}
